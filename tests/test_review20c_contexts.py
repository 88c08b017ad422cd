"""Review 20c (several contexts in one store, and moving data between stores): what a user meets
when one store holds many contexts — one context's damage or long write reaching the others, and
advice that names another context (or store) than the one the command ran on. Each test failed
against the code as reviewed and states the behaviour expected of it."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

import morphz
from morphz.capacity import Budget
from morphz.errors import StoreBusyError
from stores import rebuild_tables, run_morphz, run_sql

HANG_GUARD = 20  # seconds: only stops a thread that waits for ever from hanging the suite


def _two_contexts(path: Path) -> None:
    """A store with a healthy context ``a`` and a context ``b`` holding an event, a frame and a
    stored budget."""
    with morphz.open(path) as db:
        a = db.context("a", create=True)
        a.observe("user_message", "alpha is healthy")
        b = db.context("b", create=True)
        first = b.observe("user_message", "beta plans the rollout")
        b.commit(f'(context-tx (base-version 0) (derive plan (from {first.ref}) (note "beta")))')
        b.set_budget(Budget())


# --- 1. one damaged frame row keeps the whole store, every context, from opening ---------------


def test_a_damaged_frame_of_one_context_does_not_keep_the_store_from_opening(
    tmp_path: Path,
) -> None:
    """``morphz.open`` rebuilds every stale recall index before it returns the store, and is
    meant to open a damaged store anyway "so that the audit can report the damage"
    (database.py:217-248, reviews 14, 17l and 17m). ``_rebuild_unless_damaged`` only catches
    DamagedStoreError (database.py:234), but a frame row whose body is not UTF-8 fails the
    rebuild's read of the frames (recall/api.py:376, ``w.frames()``) with a plain StoreError
    ("write to ... failed: Could not decode to UTF-8 column 'body'"), which escapes ``open``:
    no command on any context of the store runs, not even the audit of the damaged one, and the
    healthy context ``a`` is out of reach too. (Review 17m's test damages an event as well,
    which takes the DamagedStoreError branch first.) The store should open, leaving b's index
    stale, so that ``a`` works and b can be audited."""
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(
        store,
        "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'",
        "UPDATE recall_meta SET indexed_seq = -1 WHERE context_id = 'b'",  # as a migration does
    )
    with morphz.open(store) as db:
        assert db.context("a").status().last_seq == 1
        assert db.context("b").recall_index.inspect().current is False


def test_the_audit_names_a_damaged_frame_row_instead_of_failing(tmp_path: Path) -> None:
    """The audit is the tool that finds damage: a damaged event is a difference ("the event
    cannot be read ... the replay stops", audit.py ``_next_event``), and database.py:246 counts
    on it for frames too ("a damaged frame row: the audit names it"). It does not: with one
    frame body that is not UTF-8 (and every event sound), ``_compare_rows`` reads the frames
    (audit.py:250) and the driver's decode error ends the audit as a StoreError, "read from ...
    failed: Could not decode to UTF-8 column 'body'", naming neither the context nor the frame
    (``audit_context`` re-raises a StoreError when no difference was found before it). ``morphz
    context audit b`` then exits 1 with a store error, not "audit: FAILED" and the frame. The
    audit should report the damaged row as a difference naming the frame."""
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(store, "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'")
    with morphz.open(store) as db:
        report = db.context("b").audit()
        assert db.context("a").audit().ok
    assert not report.ok
    assert any("plan" in difference for difference in report.differences), report.differences


def test_a_rebuild_that_fails_on_a_damaged_frame_leaves_no_building_table(tmp_path: Path) -> None:
    """``RecallIndex.rebuild`` promises that "an interrupted rebuild leaves [the live index]
    untouched and drops what it built" (recall/api.py:329-355). When the frames cannot be read
    (a frame body that is not UTF-8), ``_fill`` fails inside ``[f.id for f in w.frames()]`` and
    the cursor of that read is still open on the writer connection when the cleanup's write runs:
    ``DROP TABLE`` fails with "database table is locked", and the table stays (a note says so).
    Its owner is this process, alive, so neither ``recall-index clean`` nor the next rebuild
    drops it while the process lives: a host (or ``morphz.open``, which rebuilds stale indexes)
    that retries leaves one more FTS table, a copy of the context's event documents, per try.
    The failed read's cursor should be closed (or reset) before the cleanup, so the table goes."""
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(store, "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'")
    with morphz.open(store) as db:
        with pytest.raises(morphz.StoreError):
            db.context("b").recall_index.rebuild()
        assert db.context("b").recall_index.inspect().building == ()
    assert rebuild_tables(store) == []


# --- 2. one damaged context makes `context list` list nothing --------------------------------


def test_context_list_lists_the_healthy_contexts_beside_a_damaged_one(tmp_path: Path) -> None:
    """``morphz context list`` computes each context's status in one list comprehension
    (interfaces/cli.py:289), so one context whose stored budget is damaged (or whose inbox holds
    an event that cannot be read) fails the whole command: exit 1, nothing listed, although the
    error itself says "the context's events and mind are intact" and every other context is
    sound. ``list`` is how an operator finds the contexts of a store (and which one is damaged);
    it should list every context, the damaged one marked as such (its status unreadable), and
    not fail for the others."""
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(store, "UPDATE context_settings SET value = 'not json' WHERE context_id = 'b'")
    done = run_morphz(tmp_path, "context", "list", "--db", str(store), "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [entry["context"] for entry in listed] == ["a", "b"]


# --- 3. a write to one context waits without bound behind another thread's write to another ---


def test_a_write_to_one_context_is_busy_not_stuck_behind_another_thread_s_write(
    tmp_path: Path,
) -> None:
    """The busy contract (decisions.md "Busy handling"; ``morphz.open(busy_timeout=...)``) is
    that a writer that cannot get the store within ``busy_timeout`` gets a StoreBusyError. A host
    serving several contexts from one Database (one ``morphz.open`` per process, a thread per
    context) does not get it: ``SqliteStore._begin_write`` takes the process's writer lock with
    ``with self._write_lock:`` (store/sqlite.py:463), which waits for ever, so a write to context
    ``b`` stays blocked for as long as another thread writes context ``a`` (here an import whose
    progress callback waits; in life a long import or a stuck callback) — busy_timeout=0.2 is
    ignored. Through a second Database on the same file the same write is a StoreBusyError after
    0.2 s. The lock should be taken with the busy timeout, and the write refused as busy."""
    store = tmp_path / "s.db"
    db = morphz.open(store, busy_timeout=0.2)
    try:
        a, b = db.context("a", create=True), db.context("b", create=True)
        holding, release = threading.Event(), threading.Event()

        def progress(done: int, total: int) -> None:
            holding.set()
            release.wait(HANG_GUARD * 3)

        history = io.StringIO('{"text": "a long import"}\n')
        importer = threading.Thread(target=lambda: a.import_history(history, progress=progress))
        importer.start()
        outcome: list[str] = []

        def write_b() -> None:
            try:
                b.observe("user_message", "hello from b")
                outcome.append("written")
            except StoreBusyError:
                outcome.append("busy")

        try:
            assert holding.wait(HANG_GUARD)
            writer = threading.Thread(target=write_b)
            writer.start()
            writer.join(HANG_GUARD)
            seen = list(outcome)
        finally:
            release.set()
            importer.join()
        writer.join()
        assert seen == ["busy"], "the write to b waited for the other thread's write to a"
    finally:
        db.close()
