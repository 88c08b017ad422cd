"""Edges of observing, importing, activations, owners and the audit found in a review of
2026-11-30 (each failed against the code as it was); each names the defect it shows."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz import owners
from morphz.errors import HistoryImportError, InputError
from morphz.interfaces.cli import main
from morphz.owners import Owner, host_name, owner_alive


def _store(tmp_path: Path) -> Path:
    return tmp_path / "morphz.db"  # the path the conftest open_db factory uses


def _tamper(tmp_path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    with contextlib.closing(sqlite3.connect(_store(tmp_path))) as conn, conn:
        conn.execute(sql, params)


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------ meta values


def test_meta_with_mixed_key_types_is_a_typed_error_not_a_crash(ctx: morphz.Context) -> None:
    """check_meta accepts {1: .., "b": ..} (json.dumps without sort_keys), then the store's
    sort_keys encoder raises a bare TypeError inside the write."""
    with pytest.raises(InputError):
        ctx.observe("user_message", "x", meta={1: "a", "b": 2})


def test_meta_returned_by_observe_is_the_meta_stored(ctx: morphz.Context) -> None:
    """A non-string key is accepted; observe() returns it as given while the store keeps
    the JSON form, so the acknowledged event differs from the one read back."""
    event = ctx.observe("user_message", "x", meta={1: "a"})
    assert ctx.event(event.ref).meta == event.meta


def test_meta_nan_is_refused_or_the_events_json_stays_json(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    """NaN is not JSON; it is accepted as meta and `context events --format json` then
    prints a bare NaN that no strict JSON reader accepts."""
    db = open_db()
    ctx = db.context("context-default", create=True)
    try:
        ctx.observe("user_message", "x", meta={"score": math.nan})
    except InputError:
        return  # refused: fine
    db.close()
    result = CliRunner().invoke(
        main, ["context", "events", "--format", "json", "--db", str(_store(tmp_path))]
    )
    assert result.exit_code == 0, result.output
    _strict_json(result.output)


def test_import_line_with_nan_meta_is_refused_like_json_requires(ctx: morphz.Context) -> None:
    with pytest.raises(HistoryImportError, match="line 1"):
        ctx.import_history(io.StringIO('{"text": "a", "meta": {"x": NaN}}\n'))


def test_import_line_with_a_huge_integer_names_the_line(ctx: morphz.Context) -> None:
    """json.loads raises ValueError (int digit limit), not JSONDecodeError: it escapes."""
    lines = '{"text": "a"}\n{"text": "b", "meta": {"x": ' + "1" * 5000 + "}}\n"
    with pytest.raises(HistoryImportError, match="line 2"):
        ctx.import_history(io.StringIO(lines))


def test_import_line_nested_too_deep_names_the_line(ctx: morphz.Context) -> None:
    lines = '{"text": "a"}\n{"text": "b", "meta": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}\n"
    with pytest.raises(HistoryImportError, match="line 2"):
        ctx.import_history(io.StringIO(lines))


def test_observe_meta_nested_too_deep_is_a_typed_error(ctx: morphz.Context) -> None:
    meta: dict[str, Any] = {}
    inner = meta
    for _ in range(5000):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(InputError):
        ctx.observe("user_message", "x", meta=meta)


OBSERVE_X = ["context", "observe", "--kind", "user_message", "--text", "x"]


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        ([*OBSERVE_X, "--meta", '{"a": ' + "1" * 5000 + "}"], None),
        ([*OBSERVE_X, "--meta", "[" * 100_000], None),
        (["context", "import", "-"], '{"text": "b", "meta": {"x": ' + "1" * 5000 + "}}\n"),
    ],
    ids=["observe-huge-int", "observe-deep", "import-huge-int"],
)
def test_cli_bad_meta_is_an_error_not_a_traceback(
    db: morphz.Database, tmp_path: Path, args: list[str], stdin: str | None
) -> None:
    db.context("context-default", create=True)
    result = CliRunner().invoke(main, [*args, "--db", str(_store(tmp_path))], input=stdin)
    # a usage error (2) or a MorphzError (1), never an uncaught exception
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )


# ------------------------------------------------------------------ events paging


def test_events_with_limit_zero_returns_no_events(ctx: morphz.Context) -> None:
    for i in range(3):
        ctx.observe("user_message", f"m{i}")
    assert ctx.events(limit=0) == []


# ------------------------------------------------------------------ audit


def _history(ctx: morphz.Context) -> str:
    root = ctx.observe("user_message", "hello")
    ctx.record("model_reply", "a reply")
    activation = ctx.start_activation("default", root.ref)
    ctx.finish_activation(activation)
    ctx.observe("user_message", "world")
    assert ctx.audit().ok
    return activation


def test_audit_fails_when_an_event_is_deleted_from_the_history(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    db = open_db()
    _history(db.context("context-default", create=True))
    db.close()
    _tamper(tmp_path, "DELETE FROM events WHERE seq = 2")  # the model reply
    report = open_db().context("context-default").audit()
    assert not report.ok, (report.events, "events replayed; last_seq is 5")


def test_audit_checks_the_clock_of_every_event(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    db = open_db()
    _history(db.context("context-default", create=True))
    db.close()
    _tamper(tmp_path, "UPDATE events SET clock = 7 WHERE seq = 2")  # clock after it was 1
    report = open_db().context("context-default").audit()
    assert not report.ok


def test_audit_fails_when_a_finished_activation_is_set_running_again(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    """The activation rows decide causal protection but are not checked against the
    activation_started / activation_finished events."""
    db = open_db()
    activation = _history(db.context("context-default", create=True))
    db.close()
    _tamper(
        tmp_path, "UPDATE activations SET state = 'running' WHERE activation_id = ?", (activation,)
    )
    ctx = open_db().context("context-default")
    assert [a.activation_id for a in ctx.activations(running_only=True)] == [activation]
    report = ctx.audit()
    assert not report.ok


# ------------------------------------------------------------------ sessions


def test_create_session_checks_existence_under_the_writer_lock(
    open_db: Callable[[], morphz.Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like finish_activation, create_session must re-check under the writer lock; it checks
    only in a read before, so two creators both succeed."""
    db, other = open_db(), open_db()
    ctx = db.context("context-default", create=True)
    write = ctx._runtime_event

    def created_elsewhere_first(*args: Any, **kwargs: Any) -> Any:
        other.context("context-default").create_session("s1")
        return write(*args, **kwargs)

    monkeypatch.setattr(ctx, "_runtime_event", created_elsewhere_first)
    with contextlib.suppress(InputError):
        ctx.create_session("s1")
    created = [e for e in ctx.events() if e.kind == "session_created"]
    assert len(created) == 1, [(e.ref, e.session_id) for e in created]


# ------------------------------------------------------------------ owners


def test_an_existing_pid_whose_stat_cannot_be_read_is_not_provably_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With /proc mounted hidepid=2 another user's /proc/<pid> is hidden while the pid
    exists (kill(pid, 0) says so). owner_alive answers False - 'provably dead' - and
    interrupt_orphaned would interrupt that live process's activations."""
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("b00t\n")  # readable; /proc/1 hidden
    monkeypatch.setattr(owners, "PROC", proc)
    assert owners._pid_exists(1)  # pid 1 always exists
    assert owner_alive(Owner(host_name(), 1, "b00t:1")) is not False


def test_recover_leaves_a_hidden_live_owner_running(
    ctx: morphz.Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, end to end: the activation of a live process (pid 1) is marked interrupted."""
    root = ctx.observe("user_message", "hello")
    live = Owner(host_name(), 1, "b00t:1")
    monkeypatch.setattr(owners, "current_owner", lambda: live)
    activation = ctx.start_activation("default", root.ref)
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("b00t\n")
    monkeypatch.setattr(owners, "PROC", proc)
    assert ctx.interrupt_orphaned() == []
    assert [a.activation_id for a in ctx.activations(running_only=True)] == [activation]
