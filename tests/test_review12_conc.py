"""Review 12, concurrency and crashes: an activation stopped while its tools run, and the order
of what an interrupted activation writes (engine.py interrupted/record_ran, outcomes.py, the
placeholder of a call stopped while running). Every test fails on the code it was written
against; each docstring states the behaviour expected. Synchronised with events, never sleeps."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import (
    ECHO,
    WRITE_A,
    approving_writes,
    asking,
    end_of,
    has_tool_result,
    make_engine,
    results_busy_once,
    results_of,
)
from morphz import staging
from morphz.recall.api import Recall
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

WAIT = 30  # seconds: a guard against a hang, never a synchronisation


def test_a_recall_stopped_while_it_delivers_gets_one_result_not_a_second_placeholder(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model asks for one ``recall`` call; Ctrl-C (the activation's task cancelled) comes
    while the recall runs in its worker thread. The engine waits for that thread (settle), so the
    recall's ``recall_result`` observation lands: the call has its result. Expected: exactly one
    ``recall_result`` for the call, before ``activation_finished``, and no "was interrupted while
    it ran: its effect may have happened" error beside it (the effect did happen: it is right
    there). Today the engine appends the placeholder too (engine.py _run_tool's except branch,
    recorded as a ``recall_result`` since result_kind(recall) is that), so the context holds two
    results for one call, one of them an error claiming the outcome is unknown."""
    ctx.observe("user_message", "the deploy notes mention alpha", session="s")
    entered, go = threading.Event(), threading.Event()
    deliver = Recall.deliver

    def slow_deliver(self: Recall, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert go.wait(WAIT)
        return deliver(self, *args, **kwargs)

    monkeypatch.setattr(Recall, "deliver", slow_deliver)

    def model(request: ModelRequest) -> ModelResponse:
        args = json.dumps({"op": "search", "query": "alpha"})
        return ModelResponse(None, (ToolCall("c1", "recall", args),))

    async def scenario() -> None:
        engine = make_engine(ctx, FunctionModel(model), workspace)
        task = asyncio.create_task(engine.run("find alpha", session="s"))
        assert await asyncio.to_thread(entered.wait, WAIT)
        task.cancel()
        go.set()  # the recall's thread goes on and delivers; the engine waits for it
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    events = list(ctx.events())
    finished = [e.seq for e in events if e.kind == "activation_finished"]
    assert len(finished) == 1
    results = [e for e in events if e.kind == "recall_result"]
    assert all(e.seq < finished[0] for e in results)
    said = [(e.text or "")[:60] for e in results]
    assert len(results) == 1, f"one recall call, {len(results)} recall_result events: {said}"
    assert ctx.audit().ok


def test_a_second_interrupt_while_results_are_written_does_not_finish_the_activation_first(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply asks for ``write_file`` (approved: it runs) and ``exec`` (its approval never
    comes). Ctrl-C: the interruption writes the write's ``tool_result`` batch, then
    ``activation_finished`` (engine.py ``interrupted``: "the results of the calls that ran, then
    the end"). A second Ctrl-C while that batch is being written cancels the run again, and the
    event loop's shutdown (asyncio.run closing: every task left is cancelled) cancels the
    shielded ``_interrupted`` task too: its ``finally`` then records the end in a new thread
    while the results' thread is still writing. Expected: the results batch still lands before
    ``activation_finished`` (the end waits for the work in flight, as ``settle`` does), so no
    result of the activation is recorded after its end. Today the end is written beside the
    batch, not after it, and here lands first.

    Synchronisation: the results' write waits (``go``) until the end's write has started or
    (once fixed, when the end waits for it) for the guard timeout; the failure does not depend
    on timing: today the end's write starts while the results' write is in flight."""
    asked = asyncio.Event()
    results_entered, go, results_done = threading.Event(), threading.Event(), threading.Event()
    in_flight_at_finish: list[bool] = []
    record = staging.record  # the write of a step's results
    finish_activation = morphz.Context.finish_activation

    def slow_record(self: morphz.Context, *args: Any) -> Any:
        if not has_tool_result(args[-1]):
            return record(self, *args)
        results_entered.set()
        go.wait(1)  # released by the end's write before the fix; since, this guard (1 s)
        try:
            return record(self, *args)
        finally:
            results_done.set()

    def watched_finish(self: morphz.Context, *args: Any, **kwargs: Any) -> Any:
        in_flight_at_finish.append(results_entered.is_set() and not results_done.is_set())
        go.set()
        return finish_activation(self, *args, **kwargs)

    monkeypatch.setattr(staging, "record", slow_record)
    monkeypatch.setattr(morphz.Context, "finish_activation", watched_finish)

    async def scenario() -> None:
        engine = make_engine(
            ctx, asking(WRITE_A, ECHO), workspace, approver=approving_writes(asked)
        )
        task = asyncio.create_task(engine.run("write a.txt, then run echo", session="s"))
        await asked.wait()
        task.cancel()  # the first Ctrl-C
        assert await asyncio.to_thread(results_entered.wait, WAIT)
        task.cancel()  # the second, while the results are being written
        with pytest.raises(asyncio.CancelledError):
            await task
        # what asyncio.run does as it closes: cancel every task left, then wait for them
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in left:
            t.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    asyncio.run(scenario())
    events = list(ctx.events())
    finished = [e.seq for e in events if e.kind == "activation_finished"]
    results = [e.seq for e in events if e.kind == "tool_result"]
    assert len(finished) == 1 and len(results) == 1
    assert in_flight_at_finish == [False], "the end was written while the results were in flight"
    assert results[0] < finished[0], f"tool_result @e{results[0]} after the end @e{finished[0]}"
    assert ctx.audit().ok


def test_results_whose_write_failed_and_rolled_back_are_recorded_by_the_interruption(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply's ``write_file`` call runs (the file is written); writing its ``tool_result``
    batch fails with ``StoreBusyError`` (another process held the store past the busy timeout:
    the transaction rolled back, nothing landed). The run ends with that error and the engine's
    interruption records "the results of the calls that ran (never lost with the
    interruption)", then the end. Expected: the write's ``tool_result`` is in the context,
    before ``activation_finished``, since the interruption's write succeeds. Today
    ``record_ran`` empties ``ran`` before its write (engine.py: "taken first: never recorded
    twice") and does not put the outcomes back when the write raised, so the interruption finds
    nothing to record: the workspace changed and the context never says so."""
    results_busy_once(monkeypatch, lambda: None)
    engine = make_engine(ctx, asking(WRITE_A), workspace, ask_default=True)
    with pytest.raises(morphz.StoreBusyError):
        asyncio.run(engine.run("write a.txt", session="s"))
    assert (workspace / "a.txt").read_text(encoding="utf-8") == "hi\n"  # the write happened
    assert [a.state for a in ctx.activations()] == ["interrupted"]
    finished, results = end_of(ctx), results_of(ctx, "c1")
    assert results, "write_file ran, but its result was lost with the failed write"
    assert results[0].seq < finished
    assert ctx.audit().ok
