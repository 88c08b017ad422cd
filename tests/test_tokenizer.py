"""The exact tokenizer (issue 4, token accounting): when tiktoken is installed and knows the
model, the runtime, ``ctx.encode`` and ``morphz context encoding --model`` count with it and the
kernel says ``(figure exact)``; otherwise the estimate (or its calibration) is used.

tiktoken here is the real package with a small BPE registered as ``o200k_base`` (the
``tiny_tiktoken`` fixture in conftest.py): the real encoding files come from the network."""

from __future__ import annotations

import asyncio
import functools
import importlib
import itertools
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import morphz
from morphz.encoding.compile import PRESSURE_SLACK, pressure_figures
from morphz.encoding.tokens import (
    CL100K_PATTERN,
    O200K_PATTERN,
    R50K_PATTERN,
    SPLITTABLE_PATTERNS,
    Calibration,
    PieceCounter,
    _tiktoken_counter,
    exact_counter,
    pieces,
)
from morphz.errors import InputError
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings, _settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import ToolRegistry

try:
    TIKTOKEN: Any = importlib.import_module("tiktoken")  # a dev dependency
except ImportError:  # pragma: no cover - the tests that need it fail and say so
    TIKTOKEN = None

TEXT = "the context of the session: observation, frame, mind and pressure (level normal)"


def test_without_tiktoken_there_is_no_exact_counter() -> None:
    # conftest makes ``import tiktoken`` fail unless a test asks for it
    assert exact_counter("openai:gpt-4o") is None
    assert exact_counter("gpt-4o") is None


def test_openai_models_are_counted_with_their_encoding(tiny_tiktoken: Any) -> None:
    counter = exact_counter("openai:gpt-4o")
    assert counter is not None
    assert counter(TEXT) == len(tiny_tiktoken.encode_ordinary(TEXT))
    assert counter(TEXT) < len(TEXT.encode())  # merges happened: not one token per byte
    bare = exact_counter("gpt-4o-mini")  # a bare OpenAI name resolves the same way
    assert bare is not None and bare(TEXT) == counter(TEXT)


def test_special_token_text_is_counted_as_ordinary_text(tiny_tiktoken: Any) -> None:
    counter = exact_counter("openai:gpt-4o")
    assert counter is not None
    text = "a tool printed <|endoftext|> in its output"
    with pytest.raises(ValueError):  # what tiktoken's plain encode does with it
        tiny_tiktoken.encode(text)
    assert counter(text) == len(tiny_tiktoken.encode_ordinary(text)) > 1


@pytest.mark.parametrize(
    "spec",
    [
        "anthropic:claude-sonnet-4-5",  # another provider's tokenizer: tiktoken would be wrong
        "scripted:demo.json",
        "openai:qwen2.5-7b-instruct",  # a local model behind an OpenAI-compatible server
        "none",
    ],
)
def test_models_tiktoken_does_not_know_get_the_estimate(tiny_tiktoken: Any, spec: str) -> None:
    assert exact_counter(spec) is None


def test_an_encoding_file_that_cannot_be_fetched_means_the_estimate(
    tiny_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, tiktoken raises an OSError (requests' ConnectionError) on its first use of an
    encoding whose file is not cached: the answer is None, and it is not asked again."""
    asked: list[str] = []

    def offline(name: str) -> Any:
        asked.append(name)
        raise ConnectionError(f"cannot fetch the encoding of {name}")

    import tiktoken  # the real package, put back by the fixture

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    assert exact_counter("openai:gpt-4.1") is None
    assert exact_counter("openai:gpt-4.1") is None
    assert asked == ["gpt-4.1"]


def test_an_encoding_that_does_not_arrive_in_time_means_the_estimate(
    tiny_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tiktoken fetches without a timeout; on a network that drops packets the first use would
    hang. The answer after ``wait`` seconds is None, while the fetch goes on in the
    background: a later use neither fetches again nor waits again, and gets None until the
    fetch has arrived (tests/test_review18e_diff.py: then its counter)."""
    asked: list[str] = []
    release = threading.Event()

    def hanging(name: str) -> Any:
        asked.append(name)
        release.wait()
        return tiny_tiktoken

    import tiktoken

    monkeypatch.setattr(tiktoken, "encoding_for_model", hanging)
    late = threading.Timer(5.0, release.set)  # a counter that waited for it fails, not hangs
    late.start()
    try:
        assert exact_counter("openai:gpt-4o", wait=0.01) is None
        assert exact_counter("openai:gpt-4o", wait=0.01) is None
        assert asked == ["gpt-4o"]
    finally:
        release.set()
        late.cancel()


def test_an_unexpected_tiktoken_error_reaches_the_caller(
    tiny_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(name: str) -> Any:
        raise RuntimeError(f"tiktoken broke on {name}")

    import tiktoken

    monkeypatch.setattr(tiktoken, "encoding_for_model", broken)
    with pytest.raises(RuntimeError, match="tiktoken broke on gpt-4o"):
        exact_counter("openai:gpt-4o")


def _populate(ctx: morphz.Context) -> None:
    ctx.observe("user_message", TEXT * 20)
    ctx.commit(f'(context-tx (base-version {ctx.version}) (create the/mind (note "{TEXT}")))')


def test_encode_with_the_counter_reports_an_exact_figure(
    ctx: morphz.Context, tiny_tiktoken: Any
) -> None:
    _populate(ctx)
    counter = exact_counter("openai:gpt-4o")
    estimated = ctx.encode(model="openai:gpt-4o")
    exact = ctx.encode(model="openai:gpt-4o", counter=counter)
    assert "(figure estimated)" in estimated.region("kernel")
    assert exact.pressure.kind == "exact" and "(figure exact)" in exact.region("kernel")
    assert counter is not None
    # the figure is the tokenizer's count of every region, counted before the figures were known
    # (the kernel's "(pressure )"), plus the fixed slack kept for them
    figures = f"(pressure {pressure_figures(exact.pressure)})"
    assert figures in exact.region("kernel")
    draft = [exact.region(r.name).replace(figures, "(pressure )") for r in exact.regions]
    assert exact.tokens == sum(counter(part) for part in draft) + PRESSURE_SLACK
    assert exact.tokens != estimated.tokens
    # each region is counted as the whole is (the figure adds the slack and what lies between)
    assert [r.tokens for r in exact.regions] == [
        counter(exact.region(r.name)) for r in exact.regions
    ]
    assert [r.tokens for r in exact.regions] != [r.tokens for r in estimated.regions]


# --- the runtime ------------------------------------------------------------------------------


def _engine(
    ctx: morphz.Context, name: str, tmp_path: Path, **config: Any
) -> tuple[Engine, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse("done", ())

    registry: ToolRegistry = build_tools(Settings())
    engine = Engine(
        ctx, FunctionModel(answer, name), registry, RuntimeConfig(workspace=tmp_path, **config)
    )
    return engine, seen


def test_the_runtime_counts_exactly_when_it_can(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "openai:gpt-4o", tmp_path)
    assert asyncio.run(engine.run("hello")).state == "delivered"
    assert "(figure exact)" in seen[0].encoding
    assert engine.encoding().pressure.kind == "exact"  # what chat's /encoding shows


def test_the_runtime_estimates_when_told_to(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "openai:gpt-4o", tmp_path, exact_tokens=False)
    asyncio.run(engine.run("hello"))
    assert "(figure estimated)" in seen[0].encoding


def test_the_runtime_estimates_for_models_tiktoken_does_not_know(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "anthropic:claude-sonnet-4-5", tmp_path)
    asyncio.run(engine.run("hello"))
    assert "(figure estimated)" in seen[0].encoding


def test_the_tokenizer_setting() -> None:
    assert _settings({}, {}, ()).exact_tokens is True
    assert _settings({"tokenizer": "auto"}, {}, ()).exact_tokens is True
    assert _settings({"tokenizer": "estimate"}, {}, ()).exact_tokens is False
    with pytest.raises(InputError, match="tokenizer must be auto or estimate"):
        _settings({"tokenizer": "tiktoken"}, {}, ())


# --- the command line -------------------------------------------------------------------------


def _pressure_kind(db_path: Path, *args: str) -> str:
    out = CliRunner().invoke(
        main, ["context", "encoding", "work", "--db", str(db_path), "--format", "json", *args]
    )
    assert out.exit_code == 0, out.output
    return str(json.loads(out.output)["pressure"]["kind"])


def test_context_encoding_counts_for_the_model_named(tmp_path: Path, tiny_tiktoken: Any) -> None:
    db_path = tmp_path / "m.db"
    with morphz.open(db_path) as db:
        ctx = db.context("work", create=True)
        _populate(ctx)
        calibration = Calibration()
        calibration.update(1_000, 1_200)
        ctx.save_calibration("openai:local-llama", calibration)
    assert _pressure_kind(db_path) == "estimated"
    assert _pressure_kind(db_path, "--model", "openai:gpt-4o") == "exact"
    # what the runtime learned about a model tiktoken does not know
    assert _pressure_kind(db_path, "--model", "openai:local-llama") == "calibrated"
    assert _pressure_kind(db_path, "--model", "anthropic:claude-sonnet-4-5") == "estimated"


# ------------------------------------------------------------ counting piece by piece

ALPHABET = "aB1() \n'/\t"  # letters, a digit, the encoding's brackets, the whitespace around them


@functools.lru_cache(maxsize=1)
def _rich_ranks() -> dict[bytes, int]:
    """Every byte, then every string of 2-4 characters of ALPHABET: any pre-tokenizer chunk of
    up to four of those characters is one token, so counting a chunk boundary differently than
    tiktoken does changes the count (with a byte-level vocabulary it mostly would not)."""
    ranks = {bytes([i]): i for i in range(256)}
    for size in (2, 3, 4):
        for chars in itertools.product(ALPHABET, repeat=size):
            ranks.setdefault("".join(chars).encode(), len(ranks))
    return ranks


PATTERNS = {"o200k": O200K_PATTERN, "cl100k": CL100K_PATTERN, "r50k": R50K_PATTERN}


@functools.cache
def _rich_encoding(pattern: str) -> Any:
    if TIKTOKEN is None:
        pytest.fail("tiktoken is a dev dependency: pip install -e '.[dev]'")
    return TIKTOKEN.Encoding("rich", pat_str=pattern, mergeable_ranks=_rich_ranks(),
                             special_tokens={})  # fmt: skip


def test_the_patterns_are_those_of_the_installed_tiktoken(
    monkeypatch: pytest.MonkeyPatch, tiny_tiktoken: Any
) -> None:
    # a tiktoken that changes a pattern makes this fail; the runtime would then count such an
    # encoding whole, which is slower but still exact
    public = importlib.import_module("tiktoken_ext.openai_public")
    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda *args, **kwargs: {b"a": 0})
    assert public.r50k_base()["pat_str"] == R50K_PATTERN
    assert public.p50k_base()["pat_str"] == R50K_PATTERN
    assert public.cl100k_base()["pat_str"] == CL100K_PATTERN
    assert public.o200k_base()["pat_str"] == O200K_PATTERN
    assert public.o200k_harmony()["pat_str"] == O200K_PATTERN
    assert set(PATTERNS.values()) == SPLITTABLE_PATTERNS


LINES = st.lists(
    st.tuples(st.sampled_from(["", " ", "  ", "\t"]), st.text(ALPHABET + "é中", max_size=30)),
    max_size=8,
).map(lambda lines: "\n".join(indent + ("(" + body if body else body) for indent, body in lines))


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(LINES, st.text(ALPHABET + "é中", max_size=60)),
    name=st.sampled_from(list(PATTERNS)),
)
def test_counting_piece_by_piece_is_exact(text: str, name: str) -> None:
    encoding = _rich_encoding(PATTERNS[name])
    counter = PieceCounter(encoding.encode_ordinary, cuts=True)
    whole = len(encoding.encode_ordinary(text))
    assert counter(text) == whole
    assert counter(text) == whole  # and again, from what it remembers


@pytest.mark.parametrize(
    ("name", "text"),
    [("o200k", "(a)\n\n(a)"), ("cl100k", "(a)\n\n(a)"), ("r50k", "(a) \n(a)")],
)
def test_a_cut_anywhere_else_would_change_counts(name: str, text: str) -> None:
    # the test above can fail: cutting after every newline miscounts texts like these
    encoding = _rich_encoding(PATTERNS[name])
    whole = len(encoding.encode_ordinary(text))
    assert sum(len(encoding.encode_ordinary(p)) for p in re.split(r"(?<=\n)", text)) != whole
    assert PieceCounter(encoding.encode_ordinary, cuts=True)(text) == whole


class _Calls:
    def __init__(self, encode: Callable[[str], list[int]]) -> None:
        self.encode, self.texts = encode, list[str]()

    def __call__(self, text: str) -> list[int]:
        self.texts.append(text)
        return self.encode(text)


def test_a_step_counts_only_the_lines_that_changed(tiny_tiktoken: Any) -> None:
    calls = _Calls(tiny_tiktoken.encode_ordinary)
    counter = PieceCounter(calls, cuts=True)
    first = '(inbox\n (@e1 tool_result "one")\n (@e2 tool_result "two"))\n(kernel (tick 1))\n'
    assert counter(first) == len(tiny_tiktoken.encode_ordinary(first))
    assert len(calls.texts) == 4  # each line once
    calls.texts.clear()
    second = first.replace('two"))', 'two")\n (@e3 user_message "three"))')
    second = second.replace("(tick 1)", "(tick 2)")
    assert counter(second) == len(tiny_tiktoken.encode_ordinary(second))
    assert calls.texts == [" (@e2 tool_result \"two\")\n", " (@e3 user_message \"three\"))\n",
                           "(kernel (tick 2))\n"]  # fmt: skip


def test_what_it_remembers_is_bounded(tiny_tiktoken: Any) -> None:
    calls = _Calls(tiny_tiktoken.encode_ordinary)
    counter = PieceCounter(calls, cuts=True, capacity=40)
    lines = [f"(line {i} of the session)\n" for i in range(10)]  # 24 characters each
    for line in lines:
        counter(line)
    counter(lines[-1])
    assert len(calls.texts) == 10  # the newest is remembered
    counter(lines[0])
    assert len(calls.texts) == 11  # the oldest was let go
    assert counter("x" * 100) == len(tiny_tiktoken.encode_ordinary("x" * 100))  # too big to keep


def test_an_unknown_pattern_is_counted_whole(
    tiny_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = exact_counter("openai:gpt-4o")
    assert isinstance(known, PieceCounter) and known.cuts  # o200k's pattern: cut into lines
    other = TIKTOKEN.Encoding("o200k_base", pat_str=r"\s?[A-Za-z]+|\s?\d+|\s?[^\sA-Za-z\d]+|\s+",
                              mergeable_ranks=_rich_ranks(), special_tokens={})  # fmt: skip
    monkeypatch.setitem(TIKTOKEN.registry.ENCODINGS, "o200k_base", other)
    _tiktoken_counter.cache_clear()
    counter = exact_counter("openai:gpt-4o")
    assert isinstance(counter, PieceCounter) and not counter.cuts
    text = "(a)\n (B)\n(1)\n"  # cut into lines, this pattern's count would be one too many
    assert sum(len(other.encode_ordinary(p)) for p in pieces(text)) == 12
    assert counter(text) == len(other.encode_ordinary(text)) == 11
