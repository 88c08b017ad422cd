"""Review 9e (observe): appending, the clock, import, audit and the event commands. Each test
fails against the code as it was reviewed; its docstring states the expected behaviour."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz.errors import InputError
from morphz.interfaces.cli import main


def _store(tmp_path: Path) -> Path:
    return tmp_path / "morphz.db"  # the path the conftest open_db factory uses


def _tamper(tmp_path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    with contextlib.closing(sqlite3.connect(_store(tmp_path))) as conn, conn:
        assert conn.execute(sql, params).rowcount >= 1, sql


def _tx(ctx: morphz.Context, ops: str, session: str = "default") -> morphz.Receipt:
    return ctx.commit(
        f'(context-tx (base-version {ctx.version}) (reason "review") {ops})', session=session
    )


def _history(ctx: morphz.Context) -> None:
    """A small healthy history: observations in two sessions, a derived frame citing @e1, a
    window change, a model reply and a finished activation with an objective."""
    first = ctx.observe("user_message", "prepare the deployment")
    ctx.observe("tool_result", "build ok", session="ops")
    _tx(ctx, f"(create a (fact one)) (derive b (from {first.ref} a) (fact two))")
    ctx.set_window(4)
    ctx.record("model_reply", "working on it")
    activation = ctx.start_activation("default", first.ref, "ship the release")
    ctx.observe("user_message", "and the docs")
    ctx.finish_activation(activation)
    report = ctx.audit()
    assert report.ok, report.differences


@pytest.fixture
def tampered(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> Callable[[str], morphz.Context]:
    """Build the history, close the store, run one SQL statement on it, reopen the context."""

    def make(sql: str) -> morphz.Context:
        db = open_db()
        _history(db.context("context-default", create=True))
        db.close()
        _tamper(tmp_path, sql)
        return open_db().context("context-default")

    return make


def _seq(ctx: morphz.Context, kind: str) -> int:
    return next(e.seq for e in ctx.events() if e.kind == kind)


# ------------------------------------------------------------------ the audit on a damaged log


@pytest.mark.parametrize(
    "payload",
    ["{}", '{"window": "x"}', "{not json", "[1]"],
    ids=["no-window", "window-not-a-number", "not-json", "not-an-object"],
)
def test_audit_reports_a_damaged_event_payload_instead_of_crashing(
    tampered: Callable[[str], morphz.Context], payload: str
) -> None:
    """The audit is the tool an operator runs on a store they suspect: an event whose stored
    payload is damaged (here the settings_changed event's) must come back as a failed
    AuditReport naming the event (or at worst a typed MorphzError), never a bare KeyError,
    ValueError, JSONDecodeError or AttributeError out of audit.replay_event / the row reader."""
    ctx = tampered(f"UPDATE events SET payload = '{payload}' WHERE kind = 'settings_changed'")
    try:
        report = ctx.audit()
    except morphz.MorphzError:
        return  # typed: acceptable
    assert not report.ok


def test_audit_reports_damaged_event_meta_instead_of_crashing(
    tampered: Callable[[str], morphz.Context],
) -> None:
    """Meta that is not JSON any more (a damaged row) must fail the audit (or raise a typed
    MorphzError), not escape as json.JSONDecodeError from the event reader."""
    ctx = tampered("UPDATE events SET meta = '{bad' WHERE seq = 1")
    try:
        report = ctx.audit()
    except morphz.MorphzError:
        return
    assert not report.ok


def test_cli_audit_of_a_damaged_event_prints_a_result_not_a_traceback(
    tampered: Callable[[str], morphz.Context], tmp_path: Path
) -> None:
    """`morphz context audit --format json` on a store with a damaged event payload prints a
    JSON object (a failed report, or the error object) and exits 1, without a traceback."""
    ctx = tampered("UPDATE events SET payload = '{}' WHERE kind = 'settings_changed'")
    ctx.db.close()
    result = CliRunner().invoke(
        main, ["context", "audit", "--db", str(_store(tmp_path)), "--format", "json"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1
    assert json.loads(result.output)["ok"] is False


def test_audit_reports_an_event_of_an_unknown_kind(
    tampered: Callable[[str], morphz.Context],
) -> None:
    """Morphz never writes an event of a kind it does not know: a log holding one was changed
    by something else (here a model_reply turned into 'bogus'), and the audit, which checks
    every event, must say so; today replay_event's fallback branch accepts any kind silently."""
    ctx = tampered("UPDATE events SET kind = 'bogus' WHERE kind = 'model_reply'")
    assert not ctx.audit().ok


# ------------------------------------------------------------------ the audit's coverage


def test_audit_detects_tampered_frame_sources(
    tampered: Callable[[str], morphz.Context],
) -> None:
    """frame_sources (who cites what) is written by write_changes with the frames, is not part
    of the recall index a rebuild remakes, and decides what the encoding shows (the
    observation-state region's "cited by N frames" via cited_by) and recall traversal's
    descendants. Deleting frame b's rows makes @e1 look uncited while frame b still cites it;
    the audit must compare the table with the replayed frames' sources."""
    ctx = tampered("DELETE FROM frame_sources WHERE frame_id = 'b'")
    assert "cited" not in ctx.encode().text.split("(observation-state", 1)[1].split("\n(", 1)[0]
    assert not ctx.audit().ok


@pytest.mark.parametrize("session", ["", "has space", "@e1"])
def test_set_window_checks_the_session_id(ctx: morphz.Context, session: str) -> None:
    """Every other appending call (observe, record, commit, create_session, activations)
    checks the session id; set_window does not, so it creates sessions whose ids no other call
    accepts (observe and context-tx refuse them). It must raise InputError and write nothing."""
    before = ctx.events()
    with pytest.raises(InputError):
        ctx.set_window(3, session=session)
    assert ctx.events() == before
    assert [s.session_id for s in ctx.sessions()] == []


# ------------------------------------------------------------------ events paging


def test_events_after_is_checked_like_limit(ctx: morphz.Context) -> None:
    """`after` is a whole number of at least 0, as `limit` is: None or text silently returned
    no events (SQL compares seq > NULL / seq > 'abc'), and a number past SQLite's integers
    raised a bare OverflowError."""
    ctx.observe("user_message", "one")
    for bad in (None, "abc", 2**63):
        with pytest.raises(InputError):
            ctx.events(after=bad)  # type: ignore[arg-type]


def test_cli_events_after_a_huge_number_is_not_a_traceback(
    ctx: morphz.Context, tmp_path: Path
) -> None:
    """`context events --after 9223372036854775808` (click's IntRange has no upper bound)
    ended in an OverflowError traceback from the SQLite driver; it should list no events (no
    event has a larger seq) or be a usage/typed error, never an uncaught exception."""
    ctx.observe("user_message", "one")
    result = CliRunner().invoke(
        main,
        ["context", "events", "--after", str(2**63), "--db", str(_store(tmp_path))],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )


def test_event_by_a_huge_int_seq_is_a_typed_error(ctx: morphz.Context) -> None:
    """ctx.event('@e9223372036854775808') is an InputError, but the same seq as an int
    escapes as OverflowError."""
    ctx.observe("user_message", "one")
    with pytest.raises(InputError):
        ctx.event(2**63)


# ------------------------------------------------------------------ argument types


@pytest.mark.parametrize("text", [5, b"bytes"], ids=["int", "bytes"])
def test_record_text_that_is_not_text_is_a_typed_error(ctx: morphz.Context, text: Any) -> None:
    """record() checks its kind and payload but not that text is a string: an int escapes as
    AttributeError (from the recall tokenizer), bytes as TypeError. It should be an InputError,
    as observe() gives for the same mistake."""
    with pytest.raises(InputError):
        ctx.record("model_reply", text)
    assert ctx.events() == []


@pytest.mark.parametrize("items", [[("user_message", "x")], "ab"], ids=["tuples", "a-string"])
def test_observe_batch_of_non_observations_is_a_typed_error(
    ctx: morphz.Context, items: Any
) -> None:
    """observe_batch takes Observation items; anything else escaped as AttributeError
    ('tuple' object has no attribute 'kind'). It should be an InputError saying what it takes."""
    with pytest.raises(InputError):
        ctx.observe_batch(items)
