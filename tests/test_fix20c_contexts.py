"""Fix 20c: the cases around review 20c's (one context's damage or long write reaching the
others): a damaged frame read anywhere is a DamagedStoreError naming it, ``context list`` in
text marks the damaged context, and a write waiting for another thread's gives up when its
caller does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import morphz
from morphz.errors import DamagedStoreError, StoreBusyError
from morphz.store.waiting import GIVE_UP
from stores import run_morphz, run_sql

HANG_GUARD = 60  # seconds: only stops a thread that waits for ever from hanging the suite


def _two_contexts(path: Path) -> None:
    with morphz.open(path) as db:
        db.context("a", create=True).observe("user_message", "alpha is healthy")
        b = db.context("b", create=True)
        first = b.observe("user_message", "beta plans the rollout")
        b.commit(f'(context-tx (base-version 0) (derive plan (from {first.ref}) (note "beta")))')


def test_a_frame_that_is_not_utf8_is_a_damaged_store_error_naming_it(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(store, "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'")
    with morphz.open(store) as db:
        with pytest.raises(DamagedStoreError) as damaged:
            db.context("b").mind()
        assert db.context("a").mind().frames == ()
    message = str(damaged.value)
    assert "the body of frame plan of context 'b' cannot be read" in message, message
    assert "`morphz context audit b`" in message, message


def test_context_list_in_text_marks_the_damaged_context_after_the_table(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    _two_contexts(store)
    run_sql(store, "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'")
    done = run_morphz(tmp_path, "context", "list", "--db", str(store))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2].split()[0] == "a", done.stdout
    assert lines[-1].startswith("context b: its status cannot be read: the body of frame plan")


def test_a_write_waiting_for_another_thread_s_gives_up_when_its_caller_does(
    tmp_path: Path,
) -> None:
    """The busy timeout is long; the waiting caller has given up (store/waiting.py): it stops
    waiting for the other thread's write at its next try, as it does for another process's."""
    db = morphz.open(tmp_path / "s.db", busy_timeout=600)
    try:
        ctx = db.context("a", create=True)
        outcome: list[BaseException | str] = []

        def writer() -> None:
            stop = threading.Event()
            stop.set()
            GIVE_UP.set(stop)
            try:
                ctx.observe("user_message", "waiting")
                outcome.append("written")
            except BaseException as exc:  # what escapes is the finding
                outcome.append(exc)

        lock = db.store._write_lock  # type: ignore[attr-defined]
        with lock:  # another thread's write holds the lock
            thread = threading.Thread(target=writer)
            thread.start()
            thread.join(HANG_GUARD)
            seen = list(outcome)
        thread.join()
        assert len(seen) == 1 and isinstance(seen[0], StoreBusyError), seen
        assert "another thread of this process writes to it" in str(seen[0])
        assert ctx.status().last_seq == 0
    finally:
        db.close()
