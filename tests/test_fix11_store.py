"""The choices made while fixing review 11's store and API findings (the review's own tests are
tests/test_review11_recovery.py and tests/test_review11_api.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import morphz


def test_an_existing_context_opened_with_another_window_is_refused(db: morphz.Database) -> None:
    """db.context(name, window=W) on a context that exists with another window refuses (the
    window is not changed behind the caller's back) and points to set_window; the same window,
    or none, opens it."""
    db.context("c", create=True, window=3)
    with pytest.raises(morphz.InputError, match=r"set_window\(5\)"):
        db.context("c", create=True, window=5)
    assert db.context("c", window=3).status().window == 3
    db.context("c").set_window(5)
    assert db.context("c", create=True, window=5).status().window == 5


def test_a_reason_that_is_not_text_is_refused_by_interrupt_running(ctx: morphz.Context) -> None:
    """interrupt_running passes its reason to finish_activation, which refuses it (nothing is
    marked) rather than writing a value JSON cannot state."""
    activation = ctx.start_activation("default")
    with pytest.raises(morphz.InputError):
        ctx.interrupt_running(float("nan"))  # type: ignore[arg-type]
    assert [a.activation_id for a in ctx.activations(running_only=True)] == [activation]


def test_the_audit_names_a_damaged_table_and_says_to_restore_a_backup(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    """Damage SQLite finds outside the recall index (here a page of the events table) is the
    audit's first difference, naming the table and saying to restore a backup (a rebuild of the
    recall index cannot help there); the audit still returns its report."""
    db = open_db()
    ctx = db.context("c", create=True)
    for i in range(300):
        ctx.observe("user_message", f"step {i} " + "x" * 200)
    db.close()
    path = tmp_path / "morphz.db"
    conn = sqlite3.connect(path)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        rows = conn.execute("SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf'")
        page = [r[0] for r in rows][3]
    finally:
        conn.close()
    with path.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xff" * 8)  # the page's header
    report = open_db().context("c").audit()
    assert not report.ok
    first = report.differences[0]
    assert "the table events" in first and "restore the store from a backup" in first, first


def test_a_table_less_sqlite_file_becomes_a_store_when_asked_to_create(tmp_path: Path) -> None:
    """Only the commands that do not create stores refuse a SQLite file without tables;
    morphz.open (create=True) makes it a store, as it does an empty file."""
    path = tmp_path / "new.sqlite"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA user_version = 7")
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(morphz.StoreError, match="without tables"):
        morphz.open(path, create=False)
    with morphz.open(path) as db:
        db.context("c", create=True).observe("user_message", "hello")
        assert db.contexts() == ["c"]
