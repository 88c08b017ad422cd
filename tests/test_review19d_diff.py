"""Review 19d: a fresh look at the nineteenth session's changes (the late tokenizer, the
refusal's ceiling counted as sent, the engine split, the reply in the ending write, the commit
that names its call and what recovery says of it, a batch's kernel fact). Each test fails on
the code it was written against because of the defect its docstring names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import morphz
from agents import make_engine
from morphz import events as ev
from morphz.runtime import engine as engine_module
from morphz.runtime.floor import Floors
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.replies import reply_payload


def _per_char(text: str) -> int:
    return len(text)  # a tokenizer of one token per character: far from the estimate


def test_floors_are_counted_with_the_tokenizer_the_engine_took_late(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine made before the tokenizer arrived measures its floors (the smallest work and
    maintenance requests) with estimates at its first activation; engine.py _take_counter
    then switches the engine to the exact counter, but runtime/floor.py Floors keeps each
    mode's counted parts from the first measurement (``_known``) and ``figure`` with a counter
    returns them as they are: from the second activation on, when work resumes
    (capacity.resume_below) and the budget refusal of the agent's commits use estimated
    floors labelled exact, while every other figure of the activation counts exactly."""
    arrived: list[bool] = []
    monkeypatch.setattr(
        engine_module, "exact_counter", lambda model, wait=0.0: _per_char if arrived else None
    )

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse("done")

    engine = make_engine(ctx, FunctionModel(model, "openai:late-tokenizer"), workspace)
    assert asyncio.run(engine.run("first", session="s1")).state == "delivered"
    arrived.append(True)
    assert asyncio.run(engine.run("second", session="s1")).state == "delivered"
    assert engine.counter is _per_char
    work, maintenance = (engine.options("default", batch=m, maintenance=m) for m in (False, True))
    fresh = Floors()
    assert engine.floors() == (fresh.get(work, False), fresh.get(maintenance, True))


def _reply(
    ctx: morphz.Context, activation: str, *calls: tuple[str, str], staged: bool = True
) -> ev.Event:
    """The model_reply the runtime records for a response asking for ``calls`` (id, tool);
    ``staged=False``: as a release before staged calls recorded it."""
    tool_calls = [ToolCall(c, n, "{}") for c, n in calls]
    payload = reply_payload(activation, ModelResponse(None, tuple(tool_calls)), {})
    if not staged:
        del payload["staged_calls"]
    return ctx.record(ev.MODEL_REPLY, None, payload=payload, session="s")


def _answers(ctx: morphz.Context, after: ev.Event) -> dict[str, str]:
    found = [e for e in ctx.events() if e.kind == "tool_result" and e.seq > after.seq]
    return {str((e.meta or {})["call"]): e.text or "" for e in found}


def test_recovery_does_not_say_a_call_that_never_started_may_have_run(tmp_path: Path) -> None:
    """A reply's calls run one after another, each outcome staged as the call ends before the
    next starts (runtime/calls.py Calls.run_reply -> ended -> staging.stage). So when the
    first call has neither a result nor a staged outcome, the process died while it ran and
    the second never started. recovery.py ``_told`` still tells the agent of the second
    (recovery.py:88-92) "exec has no result: ... it may have run, in whole or in part, or not
    at all; check before running it again": after a build killed mid-way, the agent is told
    its deploy may have happened, the very harm fix 19c mended for a call awaiting approval.
    The log supports "did not run (it had not started)" for every call after the first one
    with no outcome."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "build, then deploy")
        reply = _reply(ctx, act, ("c1", "exec"), ("c2", "exec"))
        assert ctx.interrupt_running() == [act]
        answers = _answers(ctx, reply)
        assert "may have run" in answers["c1"]  # it was running: that is all the log says
        assert "may have run" not in answers["c2"], answers["c2"]
        assert "did not run" in answers["c2"] and "c1" in answers["c2"]


def test_an_earlier_release_s_reply_may_have_run_every_unanswered_call(tmp_path: Path) -> None:
    """A reply recorded before calls were staged one after another (no ``staged_calls`` in its
    payload) kept its outcomes in memory until the step's batch: a later call may have run
    although an earlier one has nothing recorded."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        _, act = ctx.begin_activation("s", "build, then deploy")
        reply = _reply(ctx, act, ("c1", "exec"), ("c2", "exec"), staged=False)
        assert ctx.interrupt_running() == [act]
        answers = _answers(ctx, reply)
        assert all("may have run" in answers[c] for c in ("c1", "c2")), answers
