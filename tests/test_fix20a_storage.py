"""Fix 20a (storage faults): beyond the reviewer's tests (test_review20a_storage.py), what the
fixes must also hold. A store file replaced while open and then closed without a write keeps
what was put there; the -wal is not emptied into the old file when another connection wrote
since this one did (its pages may be the new file's); a store made anew where one was deleted
opens empty and sound. An agent run whose store write fails mid-run (a full disk, an I/O
error) says what stands and what is still running, whether the interruption was recorded or
not, without "nothing was changed". A deleted -wal seen as another process opens the store
is still named."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import asking, make_engine
from morphz.errors import StoreError
from morphz.runtime.models.base import ToolCall
from morphz.store.sqlite import SqliteStore
from stores import SRC, isolated_env
from stores import backup as backup_to


def _texts(path: Path) -> list[str]:
    with morphz.open(path) as db:
        assert db.store.check_file() == []
        return [e.text or "" for e in db.context("c").events()]


def test_a_store_replaced_while_open_and_closed_without_a_write_keeps_the_restored_file(
    tmp_path: Path,
) -> None:
    """SQLite does not checkpoint a moved store as it closes, and leaves its -wal for the file
    now at the path: the close empties it into the file the process opened first."""
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "before the backup")
        backup_to(path, backup)
        for i in range(20):
            ctx.observe("user_message", f"after the backup {i} " + "b" * 3000)
        os.replace(backup, path)
    assert _texts(path) == ["before the backup"]


def test_the_wal_is_left_as_it_is_when_another_connection_wrote_since(tmp_path: Path) -> None:
    """Another connection's pages in the shared -wal may be the new file's (a process that
    opened the restored file and wrote): moving them into the old file would lose them. So
    the refusal leaves the -wal and says what to do."""
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    with morphz.open(path) as db, morphz.open(path) as other:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "one")
        backup_to(path, backup)
        other.context("c").observe("user_message", "by the other connection")
        os.replace(backup, path)
        wal = Path(f"{path}-wal").stat().st_size
        with pytest.raises(StoreError) as refused:
            ctx.observe("user_message", "two")
        assert Path(f"{path}-wal").stat().st_size == wal  # not emptied
        said = refused.value.message
        assert "another process wrote" in said and "audit" in said, said
        assert "nothing was written" in said and "replaced" in said, said


def test_a_store_made_anew_where_an_open_one_was_deleted_is_empty_and_sound(
    tmp_path: Path,
) -> None:
    """The refusal empties the -wal into the deleted file, so a store made at the path (by
    this process's next open, while the old Database is still open) does not take its pages;
    and closing the old Database leaves the new store alone."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        for i in range(10):
            ctx.observe("user_message", f"kept in the deleted file {i} " + "a" * 3000)
        path.unlink()
        with pytest.raises(StoreError) as refused:
            ctx.observe("user_message", "lost")
        assert "was deleted" in refused.value.message, refused.value.message
        with morphz.open(path) as fresh:
            fresh.context("c", create=True).observe("user_message", "new")
    assert _texts(path) == ["new"]


def test_a_deleted_wal_is_still_named_when_another_process_opens_the_store(
    tmp_path: Path,
) -> None:
    """An I/O error as a process opens a store whose -wal another process had open and lost
    (a whole -shm beside it, no -wal or an empty one) names that case, beside the others."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        db.context("c", create=True).observe("user_message", "one")
        Path(f"{path}-wal").unlink()
        done = subprocess.run(
            [sys.executable, "-m", "morphz", "context", "status", "c", "--db", str(path)],
            cwd=tmp_path,
            env=dict(isolated_env(tmp_path), PYTHONPATH=str(SRC)),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    said = done.stderr.lower()
    assert "disk i/o error" in said, done.stderr
    assert "-wal file was deleted" in said and "quota" in said, done.stderr


# ------------------------------------------------------------- a store that fails mid-run

ECHO = ToolCall("c1", "exec", '{"command": "echo hi"}')


@pytest.fixture
def full_after_start(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every write fails as on a full disk ("database or disk is full", SQLITE_FULL) while the
    list yielded holds a count above 0, which each failure lowers; the writes go on working
    once it reaches 0 (a test sets it once its run has started)."""
    failing = [0]
    check = SqliteStore._check_writable

    def full(self: SqliteStore, conn: sqlite3.Connection) -> None:
        check(self, conn)
        if failing[0] > 0:
            failing[0] -= 1
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = 13  # type: ignore[attr-defined]
            raise exc

    monkeypatch.setattr(SqliteStore, "_check_writable", full)
    yield failing


def _run_failing(
    tmp_path: Path, failing: list[int], failures: int
) -> tuple[morphz.Database, StoreError]:
    db = morphz.open(tmp_path / "s.db")
    ctx = db.context("c", create=True)
    model = asking(ECHO)
    ask = model.request

    async def request(*args: Any, **kwargs: Any) -> Any:
        failing[0] = failures  # the run's start is recorded: its next writes fail
        return await ask(*args, **kwargs)

    model.request = request  # type: ignore[method-assign]
    engine = make_engine(ctx, model, tmp_path)
    with pytest.raises(StoreError) as raised:
        asyncio.run(engine.run("build it", session="s"))
    failing[0] = 0
    return db, raised.value


def test_a_run_whose_write_fails_once_says_its_interruption_was_recorded(
    tmp_path: Path, full_after_start: list[int]
) -> None:
    db, error = _run_failing(tmp_path, full_after_start, failures=1)
    with db:
        ctx = db.context("c")
        assert [a.state for a in ctx.activations()] == ["interrupted"]
        assert ctx.audit().ok
    said = error.message
    assert "nothing was changed" not in said and "run the command again" not in said, said
    assert "is full" in said and "recorded interrupted" in said, said
    assert "context events c" in said, said


def test_a_run_whose_interruption_cannot_be_written_says_it_is_left_running(
    tmp_path: Path, full_after_start: list[int]
) -> None:
    db, error = _run_failing(tmp_path, full_after_start, failures=1000)
    with db:
        assert [a.state for a in db.context("c").activations()] == ["running"]
    said = error.message
    assert "nothing was changed" not in said, said
    assert "is full" in said and "still marked running" in said, said
    assert "morphz context recover c" in said, said
