"""Review 18e: the eighteenth session's diff (staged tool outcomes, clocks, loop clients,
bounded caches), read critically. Each test fails on the code it was written against; its
docstring says what happens and what is expected.

Real SQLite throughout and real processes where a process is killed; no timed assertions (the
waits only stop a hung child from hanging the suite)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import types
import weakref
from pathlib import Path
from typing import Any

import pytest

import morphz
from loopback import Server, answer_ok, keep_alive
from morphz import events as ev
from morphz.capacity import Budget
from morphz.encoding import tokens
from morphz.encoding.protocol import PROTOCOL
from morphz.runtime.models.base import ModelRequest
from morphz.runtime.models.openai_compat import OpenAIChatModel
from stores import exec_killed_mid_call, run_cli

CTX = "context-default"


def _killed_exec(tmp_path: Path, calls: list[dict[str, Any]]) -> Path:
    """``morphz exec work`` whose first reply asks for ``calls`` (the last one touches
    started.txt, then sleeps), killed with SIGKILL once the last call runs. The store."""
    return exec_killed_mid_call(tmp_path, calls, "work")


SLEEPER = {
    "name": "exec",
    "arguments": {"command": "touch started.txt; sleep 60", "timeout_s": 120},
}


def test_recovery_answers_a_refused_recall_from_its_staged_outcome_in_call_order(
    tmp_path: Path,
) -> None:
    """A reply asks for two recalls and a command: the first recall is refused (``op`` is not
    one of search, read, frame: its error outcome is staged), the second is delivered (its own
    ``recall_result``, which names no call id), and the process is killed while the command
    runs. ``activating.unanswered`` (activating.py:228) still applies its recall-count
    heuristic *before* looking at the staged rows: the delivered result is taken to answer the
    first recall, whose staged row is skipped, and the delivered second recall gets a false
    "recall has no result ... may have run". The skipped row is then recorded by
    ``staging.flush`` as a second batch after the "may have run" notes, out of call order.
    Expected: a call with a staged outcome is answered by it (the staging says exactly which
    call ended), so the delivered recall gets no "may have run", and the results follow the
    calls' order in one batch."""
    calls = [
        {"name": "recall", "arguments": {"op": "bogus"}},
        {"name": "recall", "arguments": {"op": "search", "query": "work"}},
        SLEEPER,
    ]
    store = _killed_exec(tmp_path, calls)
    recovered = run_cli(tmp_path, "context", "recover", "--db", str(store))
    assert recovered.returncode == 0, recovered.stderr
    with morphz.open(store, create=False) as db:
        events = db.context(CTX).events()
    reply = next(e for e in events if e.kind == ev.MODEL_REPLY)
    ids = [c["id"] for c in (reply.payload or {})["tool_calls"]]
    answers = [
        ((e.meta or {}).get("call"), "may have run" in (e.text or ""))
        for e in events
        if e.seq > reply.seq and (e.meta or {}).get("call") is not None
    ]
    # the refused recall's staged error, then "may have run" for the command only
    assert answers == [(ids[0], False), (ids[2], True)]


# 2. ------------------------------------------------------------- the budget refusal's advice


def test_the_floor_refusal_does_not_send_a_caller_s_budget_to_the_stored_one(
    tmp_path: Path,
) -> None:
    """A runtime (``RuntimeConfig(budget=...)``, hence ``ToolContext.budget``) or a host
    passes the budget a commit is measured with: ``_check_room`` then never reads the stored
    budget (committing.py:260, ``limits.budget or Budget.stored(...)``). When even an empty
    mind is past critical, ``_budget_too_small`` still advises ``morphz context budget CTX
    --limit N`` (``_where_raised``, committing.py:241, looks only at the keys). Following it
    changes nothing: with the stored limit raised far above the floor, the same commit is
    refused with the same advice. Expected: when the budget measured is the caller's, the
    refusal names that (the budget passed with the commit, RuntimeConfig.budget) as what to
    raise, not the stored budget it did not read."""
    small = Budget(window=2000, output_reserve=0, reserve=0)
    tx = '(context-tx (base-version 0) (create note "short"))'
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        ctx.update_budget({"window": 1_000_000, "configured": 500_000})  # the advice, followed
        with pytest.raises(morphz.BudgetError) as info:
            ctx.commit(tx, budget=small, request_floor=3000)
        assert ctx.version == 0
    assert "morphz context budget" not in str(info.value), str(info.value)


# 3. ------------------------------------------------------------- a recovered result, read


def test_the_protocol_tells_the_model_what_a_recovered_result_is() -> None:
    """The inbox now shows ``(meta ... (recovered "true") ...)`` on a result recorded from its
    staged outcome after the process died (staging.py:26): the work of an earlier activation
    that really ran, recorded after that activation ended. The protocol region, the contract a
    model maintains its context from alone, still lists a tool result's meta as "its tool,
    call id and whether it is an error" (encoding/protocol.py:22) and says nothing of
    ``recovered`` (nor of the "may have run" results recovery writes). Expected: the protocol
    names the ``recovered`` meta and what it means."""
    assert "recovered" in PROTOCOL


# 4. ------------------------------------------------------------- an exact counter, resolved


def test_a_counter_that_was_slow_once_is_used_once_its_encoding_has_arrived(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long-lived host's first use of a model finds tiktoken slow (fetching the encoding on
    a bad network): ``exact_counter`` gives up after ``wait`` seconds and lets the fetch go on
    in the background. ``_Resolved`` (encoding/tokens.py:149) keeps that None "for the life of
    the process" beside the answers that are final (an unknown model): once the fetch has
    landed, a host running for weeks still counts every request with the estimate, and the
    kernel says "estimated" instead of "exact". (The lru_cache it replaced at least resolved
    the name again when evicted.) Expected: a give-up on time is not final; a later use takes
    the answer the background fetch produced, without waiting again."""
    arrived = threading.Event()

    class Encoding:
        _pat_str = "(?s:.)"

        def encode_ordinary(self, text: str) -> list[int]:
            return [0] * len(text)

    def slow(name: str) -> Encoding:
        arrived.wait(60)  # the fetch: held until the test lets it land
        return Encoding()

    name = "review18e-slow-model"
    fake = types.ModuleType("tiktoken")
    fake.encoding_for_model = slow  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    tokens._tiktoken_counter.cache_clear()
    try:
        assert tokens.exact_counter(name, wait=0.0) is None  # gave up: the fetch goes on
        arrived.set()
        for thread in threading.enumerate():  # the fetch lands
            if thread.name == f"tiktoken encoding of {name}":
                thread.join(60)
        counter = tokens.exact_counter(name, wait=0.0)
        assert counter is not None and counter("abcd") == 4
    finally:
        arrived.set()
        tokens._tiktoken_counter.cache_clear()


# 5. ------------------------------------------------------------- the clients of event loops


# the loops and transports this test drops unclosed say so as they are collected
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_loop_dropped_unclosed_is_not_kept_alive_by_the_model(loopback_only: None) -> None:
    """A host that runs each message in ``asyncio.new_event_loop().run_until_complete(...)``
    and drops the loop without closing it (a common thread-pool idiom) leaves the loop to the
    collector, which closes it and its sockets. ``LoopClients`` (runtime/models/loop_clients.py:
    35) keys its clients by the loop itself and each closer's frame holds the loop, and only a
    *closed* loop is ever forgotten (``_forget_closed``): every such loop, with its selector,
    self-pipe and the client's pooled connection (about five file descriptors), stays alive as
    long as the model, so a long-lived host runs out of descriptors after a few hundred
    messages. Expected: the model holds no loop alive (weak references), so a dropped loop is
    collected with its client."""
    request = ModelRequest("(context-encoding)", ())
    with keep_alive(Server(answer_ok)) as server:
        model = OpenAIChatModel("m", base_url=f"{server.root}/v1", api_key="sk-18e")
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(model.request(request)).text == "ok"
        dropped = weakref.ref(loop)
        del loop
        gc.collect()
        alive = dropped() is not None
        if alive:  # close it here, not in the collector of a later test
            held = dropped()
            assert held is not None
            held.run_until_complete(held.shutdown_asyncgens())
            held.close()
            del held
        assert not alive, "the model keeps a loop its host dropped alive"
