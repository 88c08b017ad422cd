"""Review 13: the audit compares what recall indexes and shows (a commit's payload, the frames'
documents) with what the log says. Each test failed on the code it was written against."""

from __future__ import annotations

from pathlib import Path

import morphz
from stores import revised_store, run_sql


def test_the_audit_reports_a_commit_payload_that_differs_from_its_transaction(
    tmp_path: Path,
) -> None:
    """A commit's payload repeats what its transaction says (the reason) and what it replaced;
    recall indexes and shows them. A reason or replaced body changed in the payload passes the
    audit: the replay reads the transaction text and never compares the payload."""
    path = tmp_path / "s.db"
    revised_store(path)
    run_sql(
        path,
        "UPDATE events SET payload = json_set(payload, '$.reason', 'forged') "
        "WHERE kind = 'context_tx_committed' AND seq = 3",
    )
    with morphz.open(path) as db:
        report = db.context("c").audit()
    assert not report.ok
    assert any("@e3" in d for d in report.differences)


def test_the_audit_reports_a_recall_index_that_lost_its_frame_documents(tmp_path: Path) -> None:
    """The audit checks that a current index holds a document of each event, but not the
    frames': with recall_frames emptied it says ok while `recall-index inspect` says the index
    is not current and a search for a frame's words finds nothing. (Emptied while the store is
    open: open rebuilds such an index, below.)"""
    path = tmp_path / "s.db"
    revised_store(path)
    with morphz.open(path) as db:
        ctx = db.context("c")
        run_sql(path, "DELETE FROM recall_frames")
        assert not ctx.recall_index.inspect().current
        report = ctx.audit()
        assert not report.ok
        assert any("frame documents" in d and "rebuild c" in d for d in report.differences)


def test_open_rebuilds_a_recall_index_that_lost_its_frame_documents(tmp_path: Path) -> None:
    """Open rebuilds only an index behind the log, so an index whose frame documents were lost
    stayed so (nothing mended it): open now rebuilds it too, as the audit advises."""
    path = tmp_path / "s.db"
    revised_store(path)
    run_sql(path, "DELETE FROM recall_frames")
    with morphz.open(path) as db:
        ctx = db.context("c")
        assert ctx.recall_index.inspect().current
        assert [h.frame_id for h in ctx.recall.search("mountain", kinds=["frames"]).hits] == [
            "plan/route"
        ]
        assert ctx.audit().ok
