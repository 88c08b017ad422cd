"""Review 12 of the newest refactors and fixes (runtime/calls.py, ToolContext.in_thread, the
interruption's settle-before-finish, the scripted model's {ref:N}). Every test fails on the code
it was written against; each docstring states the behaviour expected. Synchronised with events,
never sleeps."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import WRITE_A, asking, end_of, make_engine, results_busy_once, results_of
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel

WAIT = 30  # seconds: a guard against a hang, never a synchronisation


def test_results_whose_write_fails_after_a_ctrl_c_are_still_recorded_by_the_interruption(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply's ``write_file`` runs (the file is written) and its ``tool_result`` batch is
    being written when Ctrl-C comes (the activation's task is cancelled): the write goes on in
    its thread and then fails and rolls back (``StoreBusyError``: the store was held past the
    busy timeout, which is exactly when a person presses Ctrl-C on a chat that seems stuck).
    The interruption settles that write, then records "the results of the calls that ran
    (never lost with the interruption)". Expected: the write's ``tool_result`` is in the
    context, before ``activation_finished``, as it is when the same failure comes without a
    Ctrl-C (test_review12_conc.py's third test). Today ``Calls.record`` takes ``ran`` before
    its write and, on CancelledError, re-raises without keeping it (calls.py: "the write goes
    on in its thread: it may land"); when it does not land, nothing records the result: the
    workspace changed and the context never says so."""
    entered, go = threading.Event(), threading.Event()

    def before() -> None:  # the write is in flight: the test cancels it, then lets it fail
        entered.set()
        assert go.wait(WAIT)

    results_busy_once(monkeypatch, before)

    async def scenario() -> None:
        engine = make_engine(ctx, asking(WRITE_A), workspace, ask_default=True)
        task = asyncio.create_task(engine.run("write a.txt", session="s"))
        assert await asyncio.to_thread(entered.wait, WAIT)  # the results' write is in flight
        task.cancel()  # Ctrl-C
        go.set()  # ... and the write then fails, rolled back
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert (workspace / "a.txt").read_text(encoding="utf-8") == "hi\n"  # the write happened
    assert [a.state for a in ctx.activations()] == ["interrupted"]
    finished, results = end_of(ctx), results_of(ctx, "c1")
    assert results, "write_file ran, but its result was lost with the failed write"
    assert results[0].seq < finished
    assert ctx.audit().ok


def test_an_activation_whose_start_is_written_during_the_loops_shutdown_gets_its_end(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while an activation's start (``begin_activation``: the user message and the
    activation row) is being written: the engine waits for the start to land and records the
    end ("cancelled as it started", engine.py ``run``, ending.py ``despite_cancellation``). A
    Ctrl-C makes asyncio.run close, which cancels every task left. Expected: the start still
    lands and the activation is recorded as ended (interrupted), as review 12's fix made sure
    for every write that goes through ``ToolContext.in_thread`` (the executor's future, which
    the shutdown cannot cancel while its thread writes). Today the start is still
    ``asyncio.ensure_future(asyncio.to_thread(...))``, a task: the shutdown cancels it,
    ``_despite_cancellation`` finds it done and re-raises its CancelledError, and the start
    lands afterwards in its thread with no end: an activation left ``running`` (its root
    protected) until some later process finds it orphaned."""
    entered, go = threading.Event(), threading.Event()
    begin = morphz.Context.begin_activation

    def slow_begin(self: morphz.Context, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert go.wait(WAIT)
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(morphz.Context, "begin_activation", slow_begin)

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse("hi", ())

    async def scenario() -> None:
        engine = make_engine(ctx, FunctionModel(model), workspace)
        task = asyncio.create_task(engine.run("hello", session="s"))
        assert await asyncio.to_thread(entered.wait, WAIT)
        task.cancel()  # the first Ctrl-C: the engine waits for the start
        # the second: what asyncio.run does as it closes (cancel every task left, then wait)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in left:
            t.cancel()
        go.set()
        await asyncio.gather(*left, return_exceptions=True)

    asyncio.run(scenario())  # its shutdown waits for the start's thread
    activations = ctx.activations()
    assert len(activations) == 1  # the start landed
    assert activations[0].state == "interrupted", "the activation's end was never recorded"
    assert ctx.audit().ok
