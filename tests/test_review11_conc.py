"""Review 11 (concurrency): threads and processes on one store. Each test fails against the code
as reviewed; its docstring states the behaviour expected.

Interleavings are made deterministic with events and a lock wrapper that says when a thread is
about to wait for the writer lock, never by sleeping."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

import morphz
from morphz import audit as audit_module
from morphz.errors import StoreBusyError, StoreError
from morphz.store import sqlite as sqlite_store


class _AnnouncingLock:
    """Wraps the store's writer lock: a thread entering it first sets ``entering`` (it has
    passed the store's "is it closed?" check and is about to wait for the lock)."""

    def __init__(self, real: Any, entering: threading.Event) -> None:
        self.real = real
        self.entering = entering

    def __enter__(self) -> Any:
        self.entering.set()
        return self.real.__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self.real.__exit__(*exc)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:  # a write waits within busy_timeout
        self.entering.set()
        return self.real.acquire(*args, **kwargs)

    def release(self) -> None:
        self.real.release()

    def __getattr__(self, name: str) -> Any:  # the rest of an RLock (whether this thread owns it)
        return getattr(self.real, name)


def test_a_write_waiting_for_the_lock_while_another_thread_closes_the_store_is_a_store_error(
    open_db: Callable[[], morphz.Database],
) -> None:
    """SqliteStore._begin_write checks ``_closed`` and only then waits for the writer lock.
    A thread that passed the check while another thread held the lock and closed the store
    (Database.close takes the same lock) goes on with the closed writer connection: its
    ``conn.in_transaction`` raises sqlite3.ProgrammingError, the ``except`` handler touches
    ``conn.in_transaction`` again and the raw driver error escapes ctx.observe / ctx.commit,
    outside the MorphzError tree ("driver errors -> StoreError at one boundary").

    Expected: the write raises StoreError("the store is closed") (the same as a write started
    after the close), and nothing is written."""
    db = open_db()
    ctx = db.context("context-default", create=True)
    ctx.observe("user_message", "before the close")
    store = db.store
    real = store._write_lock  # type: ignore[attr-defined]
    entering = threading.Event()
    outcome: list[BaseException | str] = []

    def writer() -> None:
        try:
            ctx.observe("user_message", "racing the close")
            outcome.append("written")
        except BaseException as exc:  # what escapes is the finding
            outcome.append(exc)

    real.acquire()  # another thread's write holds the lock
    try:
        store._write_lock = _AnnouncingLock(real, entering)  # type: ignore[attr-defined]
        thread = threading.Thread(target=writer)
        thread.start()
        assert entering.wait(60), "the writer never reached the lock"
        store._write_lock = real  # type: ignore[attr-defined]
        db.close()  # this thread holds the (re-entrant) lock: the close goes through now
    finally:
        real.release()
    thread.join(60)
    assert len(outcome) == 1
    (result,) = outcome
    assert isinstance(result, StoreError), f"{type(result).__module__}.{result!r}"
    assert "closed" in str(result)
    with morphz.open(store.path) as again:  # type: ignore[attr-defined]
        texts = [e.text for e in again.context("context-default").events()]
    assert texts == ["before the close"]


def test_an_audit_whose_database_another_thread_closes_does_not_report_damage(
    open_db: Callable[[], morphz.Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit replays the log in one read on its thread's reader connection. When another
    thread closes the Database meanwhile (the connection is closed under it), the next fetch of
    events raises sqlite3.ProgrammingError("Cannot operate on a closed database"), which
    audit._next_event takes for a damaged row (it catches every Exception): the audit returns
    a report that is not ok, saying "@eN: the event cannot be read ...: the replay stops",
    "context last_seq: replay N, stored M" and a diverging head: a false alarm of damage on
    an intact store, which sends its owner to restore a backup.

    Expected: the audit raises StoreError saying the store is closed (as any read after the
    close does) instead of returning a report of differences; the store audits clean after."""
    db = open_db()
    ctx = db.context("context-default", create=True)
    lines = [json.dumps({"kind": "user_message", "text": f"line {i}"}) for i in range(2500)]
    ctx.import_history(io.StringIO("\n".join(lines)))
    monkeypatch.setattr(audit_module, "PROGRESS_EVERY", 10)
    reached, closed = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def progress(done: int, total: int) -> None:
        if done == 10:  # 990 events of the first fetch left, then more fetches
            reached.set()
            assert closed.wait(60)

    def run() -> None:
        try:
            outcome.append(ctx.audit(progress))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert reached.wait(60)
    db.close()
    closed.set()
    thread.join(60)
    (result,) = outcome
    assert not isinstance(result, morphz.AuditReport), (
        f"the audit reported damage on an intact store: {result.differences}"
    )
    assert isinstance(result, StoreError) and "closed" in str(result), repr(result)
    with morphz.open(db.store.path) as again:  # type: ignore[attr-defined]
        assert again.context("context-default").audit().ok


def test_a_busy_file_check_in_the_audit_is_a_store_busy_error(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's PRAGMA quick_check runs on a fresh read-only connection of its own
    (SqliteStore.check_file). When SQLite answers it busy (another process holds the file:
    a WAL recovery after a crash, an exclusive-mode connection), sqlite_files.damage re-raises
    the OperationalError as meant, but check_file wraps every sqlite3.Error as a plain
    StoreError ("cannot check the file ...: database is locked", code ``store``), and
    audit_context re-raises it as is. Every other busy read or write of the store is a
    StoreBusyError (code ``busy``: "retry later or raise busy_timeout"), and audit_context
    itself expects one (``isinstance(exc, StoreBusyError)``). A caller retrying on ``busy``
    (or the CLI's exit code) cannot tell this one from damage.

    Expected: a busy quick_check raises StoreBusyError, worded with what to do (retry)."""
    ctx.observe("user_message", "hello")

    def busy(conn: sqlite3.Connection) -> list[str]:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(sqlite_store, "damage", busy)
    with pytest.raises(StoreError) as raised:
        ctx.audit()
    assert isinstance(raised.value, StoreBusyError), f"code {raised.value.code!r}: {raised.value}"
    assert raised.value.code == "busy"
