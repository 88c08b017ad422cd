"""Review 14's store findings, fixed: migration 0024 guards the writes that record no event
(settings, a new context) as 0023 guards events; Morphz's connections trust the schema (the
guard's triggers call a function of Morphz's); a report that teaches a calibration nothing takes
no write lock; ``recall-index clean`` forgets tables dropped by hand and, with ``--force``, drops
those whose rebuild cannot be told alive."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces import render
from morphz.interfaces.cli import main
from morphz.owners import Owner, host_name, untold_reason
from morphz.store import sqlite_builders

# ------------------------------------------------------------------ the writer guard (0024)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO context_settings VALUES ('c', 'calibration:m', '{\"factor\": 2.0}')",
        "UPDATE context_settings SET value = '{}' WHERE context_id = 'c'",
        "INSERT INTO contexts (context_id, created_at, version, clock, last_seq, head, window, "
        "order_max, barrier) SELECT 'd', created_at, 0, 0, 0, head, window, 0, 0 FROM contexts",
    ],
)
def test_a_connection_without_the_guard_cannot_write_settings_or_contexts(
    tmp_path: Path, statement: str
) -> None:
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        ctx = db.context("c", create=True)
        ctx.set_view(morphz.encoding.view.View(preview_threshold=300))
    conn = sqlite3.connect(store)
    try:
        with pytest.raises(sqlite3.OperationalError, match="morphz_upgraded_store_guard"):
            conn.execute(statement)
        conn.rollback()
        conn.execute("DELETE FROM context_settings WHERE context_id = 'c'")  # a hand fix works
        conn.commit()
    finally:
        conn.close()


def test_morphz_connections_trust_the_schema(tmp_path: Path) -> None:
    """A build of SQLite with SQLITE_TRUSTED_SCHEMA=0 refuses the guard's function in a
    trigger ("unsafe use of morphz_upgraded_store_guard()"): Morphz turns trust on."""
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "hello")
        assert db.store._reader().execute("PRAGMA trusted_schema").fetchone()[0] == 1
        # a connection of its own, which the store does not close: closed here (Python 3.13
        # warns, ResourceWarning, when an open connection is collected)
        with closing(db.store._connect(read_only=True)) as conn:
            assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 1


# ------------------------------------------------------------------ calibrate


def test_a_report_that_teaches_nothing_takes_no_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        learnt = ctx.calibrate("openai:m", 1000, 2000)

        def no_write(*_: object) -> None:
            raise AssertionError("a report that teaches nothing took the write lock")

        monkeypatch.setattr(db.store, "write", no_write)
        assert ctx.calibrate("openai:m", 1000, 0) == learnt
        assert ctx.calibrate("openai:m", 0, 500) == learnt


# ------------------------------------------------------------------ recall-index clean


def _leftover(db: morphz.ContextDB) -> str:
    """A building table of this process's (a rebuild that never swapped it in)."""
    with db.store.write("c") as w:
        return w.recall.begin_rebuild()


def test_clean_forgets_a_table_dropped_by_hand(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "deploy the checkout service")
        table = _leftover(db)
        with db.store.write("c") as w:
            w.recall.conn.execute(f"DROP TABLE {table}")  # type: ignore[attr-defined]
        (found,) = ctx.recall_index.inspect().building
        assert found.missing and found.documents == 0
        assert "dropped by hand" in render.index_report(ctx.recall_index.inspect())
        assert any("dropped by hand" in w for w in ctx.audit().warnings)
        report = ctx.recall_index.clean()
        assert report.forgotten == (table,) and report.dropped == () and report.kept == ()
        assert ctx.recall_index.inspect().building == ()


def test_clean_force_drops_a_table_whose_rebuild_cannot_be_told_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "deploy the checkout service")
        table = _leftover(db)
    monkeypatch.setattr(sqlite_builders, "owner_alive", lambda _owner: None)
    with morphz.open(store) as db:
        kept = db.context("c").recall_index.clean()
        assert kept.dropped == () and [b.table for b in kept.kept] == [table]
        assert "--force" in render.clean_report(kept)
    done = CliRunner().invoke(
        main, ["context", "recall-index", "clean", "c", "--db", str(store), "--force"]
    )
    assert done.exit_code == 0, done.output
    assert f"warning: dropped {table}" in done.output
    assert "if that rebuild still runs, it fails and must be run again" in done.output
    with morphz.open(store) as db:
        assert db.context("c").recall_index.inspect().building == ()


def test_an_untold_owner_on_this_host_is_not_said_to_be_on_another() -> None:
    here = untold_reason(Owner(host_name(), 4242, "boot:1"))
    assert "this host" in here and "/proc" in here and "another host" not in here
    there = untold_reason(Owner(host_name() + "-elsewhere", 4242, "boot:1"))
    assert "another host" in there
