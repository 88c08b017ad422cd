"""A stored row that is not a frame or an event (a relation, a checkpoint, a frame's sources)
whose text is not UTF-8 is damage, reported as such: a DamagedStoreError naming the column and
the context, a finding of that context's audit, a context marked damaged in `context list`;
the other contexts of the store keep working (the twentieth session's note left these rows
reading as a plain StoreError, which failed `context list` for every context)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from morphz.errors import DamagedStoreError
from stores import run_morphz, run_sql

NOT_UTF8 = "CAST(X'68C3' AS TEXT)"
DAMAGE = {
    "relation": f"UPDATE relations SET relation = {NOT_UTF8} WHERE context_id = 'b'",
    "name": f"UPDATE checkpoints SET name = {NOT_UTF8} WHERE context_id = 'b'",
    "source": f"UPDATE frame_sources SET source = {NOT_UTF8} WHERE context_id = 'b'",
}


def _store(path: Path, column: str) -> Path:
    """A store with a sound context ``a`` and a context ``b`` whose ``column`` is damaged."""
    with morphz.open(path) as db:
        db.context("a", create=True).observe("user_message", "alpha is healthy")
        b = db.context("b", create=True)
        first = b.observe("user_message", "beta plans the rollout")
        b.commit(
            f'(context-tx (base-version 0) (derive plan (from {first.ref}) (note "x")) '
            f'(derive step (from {first.ref}) (note "y")) (relate step supports plan) '
            "(checkpoint before))"
        )
    run_sql(path, DAMAGE[column])
    return path


@pytest.mark.parametrize("column", sorted(DAMAGE))
def test_the_audit_reports_the_damaged_column_and_the_other_context_is_sound(
    tmp_path: Path, column: str
) -> None:
    store = _store(tmp_path / "s.db", column)
    with morphz.open(store) as db:
        report = db.context("b").audit()
        assert db.context("a").audit().ok
    assert not report.ok
    assert any(f"column '{column}'" in d for d in report.differences), report.differences


@pytest.mark.parametrize("column", ["name", "relation"])
def test_reading_the_damaged_context_is_a_damaged_store_error_naming_column_and_audit(
    tmp_path: Path, column: str
) -> None:
    store = _store(tmp_path / "s.db", column)
    with morphz.open(store) as db:
        b = db.context("b")
        with pytest.raises(DamagedStoreError) as read:
            b.status()
        a = db.context("a")  # the failed read left nothing open: a write and a read see it
        a.commit('(context-tx (base-version 0) (create note (text "still writable")))')
        assert a.status().version == 1
    message = str(read.value)
    assert f"'{column}' column" in message
    assert "context 'b'" in message
    assert "morphz context audit b" in message


def test_context_list_marks_the_context_whose_relation_is_damaged(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db", "relation")
    done = run_morphz(tmp_path, "context", "list", "--db", str(store), "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [entry["context"] for entry in listed] == ["a", "b"]
    assert "relation" in json.dumps(listed[1])
    status = run_morphz(tmp_path, "context", "status", "b", "--db", str(store))
    assert status.returncode != 0
    assert "morphz context audit b" in status.stderr


def test_a_kept_error_does_not_pin_the_snapshot_of_later_reads_and_writes(tmp_path: Path) -> None:
    """The failed statement's cursor lived as long as the error (its traceback's frames keep
    it), and with it the statement's read: a caller that keeps the error (a log, a list of
    failures) saw the state of that moment in every later read of the thread, and its next write
    waited until busy_timeout ("locked") once another process had written."""
    store = _store(tmp_path / "s.db", "relation")
    kept: list[Exception] = []
    with morphz.open(store, busy_timeout=2.0) as db:
        b, a = db.context("b"), db.context("a")
        for attempt in (b.status, lambda: b.commit("(context-tx (base-version 1) (retire step))")):
            try:
                attempt()
            except morphz.MorphzError as exc:
                kept.append(exc)
        other = (
            'morphz.open(p).context("a").commit("(context-tx (base-version 0) (create n (k v)))")'
        )
        done = subprocess.run(
            [sys.executable, "-c", f"import morphz, sys; p = sys.argv[1]; {other}", str(store)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert a.status().version == 1  # another process's commit is seen
        a.commit("(context-tx (base-version 1) (create m (k v)))")  # and this one's goes through
        assert a.status().version == 2
    assert len(kept) == 2
