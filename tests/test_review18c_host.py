"""Review 18c: Morphz inside a long-lived host process (a web service, a scheduler) that opens
many stores, runs many activations, one event loop per request (``asyncio.run``), for weeks.

Each test fails on the code it was written against; its docstring says what happens and what is
expected. Memory is measured with tracemalloc at two sizes (what stays after the Database is
closed), never with a clock."""

from __future__ import annotations

import asyncio
import gc
import random
import string
import sys
import tracemalloc
import types
from pathlib import Path
from typing import Any

import pytest

import morphz
from loopback import Server, anthropic_message, keep_alive, openai_completion
from morphz.encoding import tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings, make_model
from morphz.runtime.engine import Engine, RuntimeConfig

# --- the README's "From Python": one model, asyncio.run per message ---------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_host_running_each_message_in_its_own_event_loop_gets_every_reply(
    tmp_path: Path, provider: str, loopback_only: None
) -> None:
    """README, "From Python": ``asyncio.run(Engine(ctx, model, tools, RuntimeConfig(workspace))
    .run(prompt))`` with a model from ``make_model``. A host (a thread-per-request server, a
    scheduler job) does exactly that for each message, with the one model it made at start. The
    adapter's SDK client (``SdkAdapter.__init__``, runtime/models/sdk.py:113) is made once and
    its pooled keep-alive connection stays bound to the first message's event loop, which
    ``asyncio.run`` closed: the second message's activation raises a bare ``RuntimeError: Event
    loop is closed`` out of ``engine.run`` with the OpenAI adapter (after the provider received,
    answered and billed the request), and the Anthropic adapter sends the request twice (the
    first copy's answer dropped, then retried). decisions.md ("morphz chat and exec, ninth
    review") fixed this for the CLI only, by running the chat in one asyncio.Runner; the
    documented host pattern still hits it. Expected: every message is delivered, with one HTTP
    request each (the adapter makes a new client when it is awaited in another event loop)."""
    answered: list[str] = []

    def answer(_request: Any) -> dict[str, Any]:
        answered.append(f"reply {len(answered) + 1}")
        if provider == "openai":
            return openai_completion(answered[-1], 3000, 5)
        return anthropic_message([{"type": "text", "text": answered[-1]}])

    workspace = tmp_path / "ws"
    workspace.mkdir()
    with keep_alive(Server(answer)) as server:
        if provider == "openai":
            settings = Settings(openai_base_url=f"{server.root}/v1")
            model = make_model("openai:host-model", settings, {"OPENAI_API_KEY": "sk-host"})
        else:
            settings = Settings(anthropic_base_url=server.root)
            env = {"ANTHROPIC_API_KEY": "sk-ant-host"}
            model = make_model("anthropic:claude-host", settings, env)
        db = morphz.open(tmp_path / "m.db")
        try:
            ctx = db.context("host", create=True)
            states = []
            for prompt in ("first message", "second message"):
                engine = Engine(ctx, model, build_tools(Settings()), RuntimeConfig(workspace))
                try:
                    result = asyncio.run(engine.run(prompt))
                    states.append(result.state)
                except RuntimeError as exc:  # what the second message raises today
                    states.append(f"raised {exc}")
            sent = len(server.requests)
        finally:
            db.close()
            asyncio.run(model.aclose())  # type: ignore[attr-defined]
            gc.collect()
    assert states == ["delivered", "delivered"], states
    assert sent == 2, f"{sent} HTTP requests for two one-step messages"


# --- module caches that outlive every Database ----------------------------------------------


def _retained_after(work: Any) -> int:
    """Bytes still allocated after ``work()`` returned (its Database closed) and a collection."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _observe_and_close(folder: Path, observations: list[morphz.Observation]) -> None:
    with morphz.open(folder / "m.db") as db:
        ctx = db.context("host", create=True)
        ctx.observe_batch(observations)
        ctx.status()  # compiles: reads every active observation with its meta


def test_observation_meta_is_not_kept_in_memory_after_the_store_is_closed(
    tmp_path: Path,
) -> None:
    """``store/active_base.py:128``: ``_meta_items`` is a module-level ``lru_cache`` of 16,384
    entries keyed by an observation's whole meta text, holding that text and its decoded items
    for the life of the process, after every Database that read them is closed. Meta has no size
    limit (observe.check_meta), so a host whose events carry payloads in their meta (a webhook's
    body, 64 KiB) keeps about twice that per observation it ever compiled: measured, 6 MiB after
    50 such observations, 25 MiB after 200, and up to 16,384 x 128 KiB = 2 GiB for the
    cache's size. Expected: what is kept after the store is closed does not grow with the
    meta read (cache only small meta texts, or bound the cache by bytes, or per compile)."""
    filler = "x" * 65_536

    def run(count: int, tag: str) -> int:
        folder = tmp_path / tag
        folder.mkdir()
        items = [
            morphz.Observation("external_event", f"hook {i}", meta={"body": f"{tag}{i}{filler}"})
            for i in range(count)
        ]
        return _retained_after(lambda: _observe_and_close(folder, items))

    small, large = run(20, "a"), run(120, "b")
    assert large - small < 4 << 20, (
        f"{small >> 10} KiB kept after 20 observations with 64 KiB meta, "
        f"{large >> 10} KiB after 120: kept after the store was closed"
    )


def test_long_words_of_indexed_text_are_not_kept_in_memory_after_the_store_is_closed(
    tmp_path: Path,
) -> None:
    """``recall/tokenize.py:176-193``: every word the recall index tokenizes is stemmed through
    ``_STEMS``, a module-level dict of up to 200,000 words, bounded by count and not by size,
    kept after the Database is closed. A word is a run of letters with no length limit, so tool
    output holding long letter runs (a DNA sequence, a minified blob, a long identifier) keeps
    each word twice (key and stem) for the process's life: measured, 1 MiB after 200 words of
    4,000 letters, 8 MiB after 1,000, up to 200,000 x 8 KB = 1.6 GB before the dict is cleared.
    Expected: what stays after the store is closed does not grow with the words indexed (do not
    cache, or do not stem, words longer than a real word, e.g. 64 characters)."""
    rnd = random.Random(18)

    def word() -> str:
        return "".join(rnd.choice(string.ascii_lowercase) for _ in range(4_000))

    def run(count: int, tag: str) -> int:
        folder = tmp_path / tag
        folder.mkdir()
        items = [
            morphz.Observation("tool_result", " ".join(word() for _ in range(10)))
            for _ in range(count)
        ]
        return _retained_after(lambda: _observe_and_close(folder, items))

    small, large = run(10, "a"), run(60, "b")
    assert large - small < 2 << 20, (
        f"{small >> 10} KiB kept after 100 long words, {large >> 10} KiB after 600: kept after "
        "the store was closed"
    )


# --- the tokenizer of a model, resolved once per process ------------------------------------


def test_a_models_tokenizer_is_resolved_once_per_process_whatever_other_models_are_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``encoding/tokens.exact_counter`` says a model's tokenizer is "resolved once per model and
    process": when it cannot be had (offline), or tiktoken does not answer within ``wait``
    seconds, "the answer is None for the rest of the process". It is an ``lru_cache(maxsize=64)``
    (tokens.py:130): a host serving more than 64 model names (OpenAI fine-tunes per customer,
    models behind a local OpenAI-compatible server) evicts the answer, and the next Engine of
    the model resolves it again: a new thread and, offline, up to ``RESOLVE_SECONDS`` (10 s)
    of waiting again for that Engine's first request, each time the name comes back after
    being evicted. Expected: the answer for a model is kept for the process, as documented (or
    the documentation says it is not)."""
    asked: list[str] = []

    def encoding_for_model(name: str) -> Any:
        asked.append(name)
        if name == "gpt-4o":
            raise OSError("offline: the encoding file cannot be fetched")
        raise KeyError(name)  # an unknown model name

    fake = types.ModuleType("tiktoken")
    fake.encoding_for_model = encoding_for_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    tokens._tiktoken_counter.cache_clear()
    try:
        assert tokens.exact_counter("openai:gpt-4o") is None
        for number in range(64):
            assert tokens.exact_counter(f"openai:ft:gpt-4o-mini:customer-{number}") is None
        assert tokens.exact_counter("openai:gpt-4o") is None
    finally:
        tokens._tiktoken_counter.cache_clear()
    assert asked.count("gpt-4o") == 1, f"gpt-4o's tokenizer was resolved {asked.count('gpt-4o')}x"


def test_a_long_word_is_stemmed_as_a_short_one_is_without_being_cached() -> None:
    """The fix for the test above: a word longer than 64 characters has the stem Porter2 gives
    it (so search results do not change), and the cache does not keep it."""
    import snowballstemmer

    from morphz.recall.tokenize import _STEMS, stem

    porter2 = snowballstemmer.stemmer("english")
    for word in ("deployments" * 7, "a" * 65 + "ing", "nationalization" * 5 + "s"):
        assert len(word) > 64
        assert stem(word) == porter2.stemWord(word) != word
        assert word not in _STEMS
    assert stem("deployments") == "deploy" and "deployments" in _STEMS
