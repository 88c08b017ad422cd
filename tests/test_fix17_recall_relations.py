"""A relation is in its subject's recall document only (review 17c): a relate or unrelate
rewrites one document, whatever the object's degree; a search for the object's id still finds
the frames relating to it; the live index stays what a rebuild makes; migration 0026 rebuilds
the indexes written by the earlier rule (relations in both ends' documents)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import morphz
from morphz.mind.state import Changes, Frame
from morphz.recall import documents, maintain
from morphz.recall.documents import FrameDoc
from morphz.store.base import ReadTxn, WriteTxn
from recalls import commit, keys
from stores import run_sql


def test_a_search_for_the_object_finds_the_frames_relating_to_it(ctx: morphz.Context) -> None:
    commit(ctx, "(create proj/hub (goal ship the release))")
    commit(ctx, "(create task/a (write notes))", "(create task/b (fix tests))")
    commit(ctx, "(relate task/a part-of proj/hub)", "(relate task/b blocks task/a)")
    assert set(keys(ctx.recall.search("proj/hub", kinds=["frames"]))) == {
        "frame:proj/hub",
        "frame:task/a",
    }
    assert keys(ctx.recall.search("blocks", kinds=["frames"])) == ["frame:task/b"]
    live = ctx.recall_index.documents()
    ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live
    commit(ctx, "(unrelate task/a part-of proj/hub)", reason="done")
    assert keys(ctx.recall.search("proj/hub", kinds=["frames"])) == ["frame:proj/hub"]
    live = ctx.recall_index.documents()
    ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live
    assert ctx.audit().ok


def _both_ends(w: WriteTxn, changes: Changes) -> dict[str, Frame | None]:
    out = {fid: w.frame(fid) for fid in changes.frames}
    for subject, _, obj in changes.edges:
        out.update({fid: w.frame(fid) for fid in (subject, obj) if fid not in out})
    return out


def _with_objects(r: ReadTxn, frame_ids: Sequence[str], when_us: int) -> list[FrameDoc]:
    def text(frame: Frame, fid: str) -> str:
        words = [fid.replace("/", " "), frame.body, *frame.sources]
        words += [f"{rel.replace('-', ' ')} {(o if s == fid else s).replace('/', ' ')}"
                  for s, rel, o in r.edges_of(fid)]  # fmt: skip
        return " ".join(words)

    docs = []
    for fid in sorted(frame_ids):
        frame = r.frame(fid)
        body = None if frame is None else documents.index_text(text(frame, fid))
        docs.append(FrameDoc(fid, body, when_us))
    return docs


def test_open_rebuilds_an_index_of_the_earlier_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    with monkeypatch.context() as old:  # the frame documents before 0026
        old.setattr(maintain, "frames_to_reindex", _both_ends)
        old.setattr(maintain, "frame_docs", _with_objects)
        with morphz.open(path) as db:
            ctx = db.context("c", create=True)
            commit(ctx, "(create hub (goal))", "(create x (v))", "(relate x part-of hub)")
            assert set(keys(ctx.recall.search("part-of"))) == {"frame:x", "frame:hub"}
    run_sql(path, "DELETE FROM schema_migrations WHERE number = 26")
    with morphz.open(path) as db:
        ctx = db.context("c")
        assert ctx.recall_index.inspect().current
        assert keys(ctx.recall.search("part-of")) == ["frame:x"]
        live = ctx.recall_index.documents()
        ctx.recall_index.rebuild()
        assert ctx.recall_index.documents() == live
