"""Fix 18b: a finished call's outcome is staged in the store as the call ends, so a process
killed before its step's batch of results is written loses no result (morphz.staging).

Real SQLite throughout and real processes where a process is killed; no timed assertions (the
waits only stop a hung child from hanging the suite)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import make_engine
from morphz import events as ev
from morphz import staging
from morphz.errors import StoreError
from morphz.observe import Observation
from morphz.runtime.engine import Engine
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from oldcode import old_morphz, run_on
from stores import exec_killed_mid_call, run_cli, run_sql, user_config

CTX = "context-default"
PREVIOUS = "7323045"  # the last commit before staged results (schema 26)


def _staged_rows(store: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(store)
    try:
        return conn.execute(
            "SELECT activation_id, reply_seq, position, kind, text, meta, ticks "
            "FROM staged_results ORDER BY reply_seq, position"
        ).fetchall()
    finally:
        conn.close()


def _results_after(events: list[ev.Event], seq: int) -> list[ev.Event]:
    return [e for e in events if e.seq > seq and e.kind in ("tool_result", "tx_receipt")]


# 1. ------------------------------------------------------------------ a killed exec, recovered


def _killed_mid_step(tmp_path: Path) -> Path:
    """``morphz exec`` whose reply asks for two calls: the first (a quick command) finishes,
    the second blocks; the process is killed with SIGKILL while the second runs. The store."""
    first = "echo built > built.txt; echo BUILD-OK"
    second = "touch started.txt; sleep 60"
    calls = [
        {"name": "exec", "arguments": {"command": first}},
        {"name": "exec", "arguments": {"command": second, "timeout_s": 120}},
    ]
    return exec_killed_mid_call(tmp_path, calls, "build it")


def test_recovery_records_the_real_result_of_a_call_that_finished(tmp_path: Path) -> None:
    """The first call's outcome was staged as it ended: recovery records it as its result (the
    command's output, marked recovered, ticking the clock as the batch would have), and "may
    have run" for the call that was running, in call order, in the write that ends the
    activation; nothing stays staged, and the audit is clean."""
    store = _killed_mid_step(tmp_path)
    staged = _staged_rows(store)
    assert [(row[2], row[3]) for row in staged] == [(0, "tool_result")]
    assert "BUILD-OK" in staged[0][4] and staged[0][6] == 1
    with morphz.open(store, create=False) as db:
        clock_before = db.context(CTX).status().clock

    recovered = run_cli(tmp_path, "context", "recover", "--db", str(store))
    assert recovered.returncode == 0, recovered.stderr
    assert _staged_rows(store) == []
    audit = run_cli(tmp_path, "context", "audit", "--db", str(store))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    with morphz.open(store, create=False) as db:
        ctx = db.context(CTX)
        events = ctx.events()
        reply = next(e for e in events if e.kind == ev.MODEL_REPLY)
        first, second = _results_after(events, reply.seq)
        calls = reply.payload["tool_calls"] if reply.payload else []
        assert [first.meta["call"], second.meta["call"]] == [c["id"] for c in calls]
        assert "BUILD-OK" in (first.text or "")
        assert first.meta == {
            "call": calls[0]["id"], "tool": "exec", "error": False, "recovered": True
        }  # fmt: skip
        assert "may have run" in (second.text or "") and "recovered" not in second.meta
        finished = events[-1]
        assert finished.kind == ev.ACTIVATION_FINISHED
        assert (finished.payload or {})["state"] == "interrupted"
        # one write: the results follow each other and the end follows them
        assert second.seq == first.seq + 1 and finished.seq == second.seq + 1
        assert first.recorded_at == second.recorded_at
        # the real result ticks once, as its batch would have; "may have run" does not
        assert ctx.status().clock == clock_before + 1
        assert first.payload == {"activation": reply.payload["activation"], "tick": True}
        assert first.ref in ctx.encode().text


def test_the_next_exec_recovers_the_staged_result_too(tmp_path: Path) -> None:
    """The next ``morphz exec`` on the context recovers the orphan at its start, the same way."""
    store = _killed_mid_step(tmp_path)
    steps = [{"reply": "ok"}]
    (tmp_path / "next.json").write_text(json.dumps(steps), encoding="utf-8")
    done = run_cli(
        tmp_path, "exec", "again", "--model", "scripted:next.json", "--workspace", "ws",
        "--db", str(store),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _staged_rows(store) == []
    with morphz.open(store, create=False) as db:
        ctx = db.context(CTX)
        assert ctx.audit().ok
        events = ctx.events()
        reply = next(e for e in events if e.kind == ev.MODEL_REPLY)
        texts = [e.text or "" for e in _results_after(events, reply.seq)]
        assert "BUILD-OK" in texts[0] and "may have run" in texts[1] and len(texts) == 2


# 2. ------------------------------------------------------------------ a normal run


def test_a_call_is_staged_while_the_next_runs_and_a_normal_run_leaves_nothing(
    tmp_path: Path,
) -> None:
    """``morphz exec`` run to its end: while the second call runs, the first call's outcome is
    staged (the second reads the store's table); once the step is recorded nothing is staged,
    each call has one result, and the audit is clean."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "home").mkdir()
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')
    store = tmp_path / "morphz.db"
    peek = (
        f"{sys.executable} -c \"import sqlite3; c = sqlite3.connect('{store}'); "
        "print('STAGED', c.execute('SELECT count(*) FROM staged_results').fetchone()[0])\""
    )
    steps = [
        {
            "tool_calls": [
                {"name": "exec", "arguments": {"command": "echo FIRST"}},
                {"name": "exec", "arguments": {"command": peek}},
            ]
        },
        {"reply": "done"},
    ]
    (tmp_path / "steps.json").write_text(json.dumps(steps), encoding="utf-8")
    done = run_cli(
        tmp_path, "exec", "go", "--model", "scripted:steps.json", "--workspace", "ws",
        "--db", str(store),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _staged_rows(store) == []
    with morphz.open(store, create=False) as db:
        ctx = db.context(CTX)
        assert ctx.audit().ok
        events = ctx.events()
        reply = next(e for e in events if e.kind == ev.MODEL_REPLY)
        results = _results_after(events, reply.seq)
        assert len(results) == 2
        assert "FIRST" in (results[0].text or "") and "STAGED 1" in (results[1].text or "")
        assert not any("recovered" in (e.meta or {}) for e in results)


# 3. ------------------------------------------------------------------ never both, never neither


def _echo_model(calls: list[ToolCall]) -> FunctionModel:
    """A model that asks for ``calls`` once, then answers."""
    asked: list[int] = []

    def reply(request: ModelRequest) -> ModelResponse:
        if not asked:
            asked.append(1)
            return ModelResponse(None, tuple(calls))
        return ModelResponse("done", ())

    return FunctionModel(reply)


def _engine(ctx: morphz.Context, tmp_path: Path, calls: list[ToolCall]) -> Engine:
    """An engine whose tools are those ``morphz exec`` offers, with ``exec`` allowed."""
    engine = make_engine(ctx, _echo_model(calls), tmp_path, step_limit=5)
    engine.tools.set_policy("exec", "allow")
    return engine


def test_a_failed_batch_write_rolls_back_its_events_and_its_unstaging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch write fails after appending its events (an injected error): the write rolls
    back, so the calls' staged rows are still there and no result is (never neither, never
    both); the interruption that follows records each result once and nothing stays staged."""
    store = tmp_path / "store.db"
    seen: list[tuple[int, int]] = []
    real_append, real_record = staging.append, staging.record
    failures = [1]

    def failing_append(*args: Any, **kw: Any) -> list[ev.Event]:
        out = real_append(*args, **kw)
        if failures:
            failures.pop()
            raise StoreError("injected: the disk went away after the events were appended")
        return out

    def watched_record(ctx: morphz.Context, *args: Any) -> list[ev.Event]:
        try:
            return real_record(ctx, *args)
        except StoreError:
            results = [e for e in ctx.events() if e.kind == "tool_result"]
            seen.append((len(_staged_rows(store)), len(results)))
            raise

    monkeypatch.setattr(staging, "append", failing_append)
    monkeypatch.setattr(staging, "record", watched_record)
    with morphz.open(store) as db:
        ctx = db.context(CTX, create=True)
        calls = [
            ToolCall("c1", "exec", json.dumps({"command": "echo one"})),
            ToolCall("c2", "exec", json.dumps({"command": "echo two"})),
        ]
        engine = _engine(ctx, tmp_path, calls)
        with pytest.raises(StoreError, match="injected"):
            asyncio.run(engine.run("go"))
        assert seen == [(2, 0)]  # after the failed write: both staged, no result
        assert _staged_rows(store) == []
        results = [e for e in ctx.events() if e.kind == "tool_result"]
        assert [e.meta["call"] for e in results if e.meta] == ["c1", "c2"]
        assert ctx.activations()[0].state == "interrupted"
        assert ctx.audit().ok


# 4. ------------------------------------------------------------- an activation ended meanwhile


def _reply_with_calls(ctx: morphz.Context, act: str, *ids: str) -> ev.Event:
    calls = [{"id": i, "name": "exec", "arguments": {}} for i in ids]
    payload = {"activation": act, "tool_calls": calls}
    return ctx.record(ev.MODEL_REPLY, None, payload=payload, session="ops")


def _outcome(position: int, call: str, text: str) -> staging.Outcome:
    meta = {"tool": "exec", "call": call, "error": False}
    return staging.Outcome(position, Observation("tool_result", text, meta=meta), True)


def test_an_engine_still_running_after_recovery_records_no_duplicate(tmp_path: Path) -> None:
    """Review 17l's case: another process marks the activation interrupted while its engine
    still runs. Recovery records the staged outcome of c1 and "may have run" for c2; the engine
    then stages c2 (refused: the activation has ended, nothing would record the row) and writes
    its batch of c1 and c2: c1's row is gone (recovery recorded it), so c1 is left out, and c2's
    real result is recorded after recovery's "may have run", as work recorded for an activation
    that has ended is kept."""
    with morphz.open(tmp_path / "store.db") as db:
        ctx = db.context(CTX, create=True)
        _, act = ctx.begin_activation("ops", "deploy")
        reply = _reply_with_calls(ctx, act, "c1", "c2")
        one, two = _outcome(0, "c1", "deployed"), _outcome(1, "c2", "migrated")
        assert staging.stage(ctx, "ops", act, reply.seq, one)
        assert ctx.interrupt_running("an operator stopped it") == [act]
        assert not staging.stage(ctx, "ops", act, reply.seq, two)
        late = staging.record(ctx, "ops", act, reply.seq, [(one, True), (two, False)])
        assert [e.text for e in late] == ["migrated"]
        results = [(e.meta or {}).get("call") for e in ctx.events() if e.kind == "tool_result"]
        assert results == ["c1", "c2", "c2"]
        assert ctx.audit().ok
        assert _staged_rows(tmp_path / "store.db") == []


def test_an_activation_s_own_end_records_what_is_still_staged(tmp_path: Path) -> None:
    """An end that is not a recovery (finish_activation) records what is still staged of the
    activation before its end, and removes it: no staged row outlives its activation."""
    with morphz.open(tmp_path / "store.db") as db:
        ctx = db.context(CTX, create=True)
        _, act = ctx.begin_activation("ops", "deploy")
        reply = _reply_with_calls(ctx, act, "c1")
        assert staging.stage(ctx, "ops", act, reply.seq, _outcome(0, "c1", "deployed"))
        ctx.finish_activation(act, "interrupted", "stopped")
        events = ctx.events()
        assert events[-2].text == "deployed" and (events[-2].meta or {}).get("recovered")
        assert events[-1].kind == ev.ACTIVATION_FINISHED
        assert ctx.audit().ok
        assert _staged_rows(tmp_path / "store.db") == []


def test_the_audit_reports_a_staged_row_of_an_ended_activation(tmp_path: Path) -> None:
    """Staged rows are runtime state: those of a running activation are no finding; one of an
    activation that has ended is a fact no event holds, and the audit says so."""
    store = tmp_path / "store.db"
    with morphz.open(store) as db:
        ctx = db.context(CTX, create=True)
        _, act = ctx.begin_activation("ops", "deploy")
        reply = _reply_with_calls(ctx, act, "c1")
        assert staging.stage(ctx, "ops", act, reply.seq, _outcome(0, "c1", "deployed"))
        assert ctx.audit().ok
        row = _staged_rows(store)[0]
        ctx.finish_activation(act, "delivered")
    run_sql(
        store,
        "INSERT INTO staged_results VALUES ('context-default', "
        + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in row)
        + ")",
    )
    with morphz.open(store) as db:
        report = db.context(CTX).audit()
    assert not report.ok
    assert any("was never recorded as an event" in d for d in report.differences)


# 5. ------------------------------------------------------------------ an upgrade


ORPHANED_BY_THE_PREVIOUS_RELEASE = """
import os, sys
import morphz
from morphz import events as ev
db = morphz.open(sys.argv[1])
ctx = db.context("context-default", create=True)
_, act = ctx.begin_activation("ops", "deploy v2")
calls = [{"id": "c1", "name": "exec", "arguments": {}}]
ctx.record(ev.MODEL_REPLY, None, payload={"activation": act, "tool_calls": calls}, session="ops")
os.kill(os.getpid(), 9)
"""


def test_a_store_of_the_previous_release_migrates_and_recovers(tmp_path: Path) -> None:
    """A store the previous release (schema 26) wrote, with an activation its killed process
    left running: this release migrates it (schema 28, the staged results' table, empty),
    recovers the activation with "may have run" as before, stages and records new work, and
    audits clean."""
    src = old_morphz(PREVIOUS, tmp_path)
    store = tmp_path / "store.db"
    with contextlib.suppress(AssertionError):  # the child kills itself
        run_on(src, ORPHANED_BY_THE_PREVIOUS_RELEASE, str(store))
    conn = sqlite3.connect(store)
    try:
        assert conn.execute("SELECT max(number) FROM schema_migrations").fetchone()[0] == 26
    finally:
        conn.close()
    with morphz.open(store) as db:
        ctx = db.context(CTX)
        assert _staged_rows(store) == []
        assert ctx.interrupt_orphaned() != []
        results = [e for e in ctx.events() if e.kind == "tool_result"]
        assert len(results) == 1 and "may have run" in (results[0].text or "")
        _, act = ctx.begin_activation("ops", "again")
        reply = _reply_with_calls(ctx, act, "c9")
        one = _outcome(0, "c9", "done")
        assert staging.stage(ctx, "ops", act, reply.seq, one)
        assert [e.text for e in staging.record(ctx, "ops", act, reply.seq, [(one, True)])] == [
            "done"
        ]
        ctx.finish_activation(act)
        assert ctx.audit().ok
        assert _staged_rows(store) == []
