"""Review 17b: the mind's lifecycle rules as the protocol region states them, checked against a
reference model written from the protocol text alone (a hypothesis state machine over a real
SQLite store: frames active / retiring with their ticks / retired, the inbox, relations,
checkpoints, the version and clock, the refusal kind of every invalid or stale transaction,
the encoding's inbox, observation-state, mind and kernel regions, status counts, the audit and
reopening). It ran some 2,000 sequences of up to 40 steps and agreed everywhere except on what
these tests pin down, each a sentence of the protocol the library does not keep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import morphz
from morphz.encoding.protocol import PROTOCOL


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[morphz.Context]:
    db = morphz.open(tmp_path / "review17b.db")
    context = db.context("context-r17b", create=True)
    yield context
    db.close()


def _two_frames(ctx: morphz.Context) -> None:
    ctx.commit('(context-tx (base-version 0) (create a (fact "one")) (create b (fact "two")))')


# The protocol: "Asking for the state a target is in already is an error, but a retiring frame
# may be retired again." Every other operation keeps it (retire, restore, protect, unprotect,
# relate, unrelate, checkpoint, the session operations); place does not: moving a frame to
# where it already is commits, takes a version, and writes the `order` boundary, so every
# concurrent stale `place` is refused as a conflict over a move that moved nothing.
@pytest.mark.parametrize(
    "place",
    ["(place a first)", "(place b last)", "(place b (after a))", "(place a (before b))"],
)
def test_placing_a_frame_where_it_already_is_is_refused_like_every_other_no_op(
    ctx: morphz.Context, place: str
) -> None:
    assert "Asking for the state a target is in already is an error" in " ".join(PROTOCOL.split())
    _two_frames(ctx)
    assert ctx.mind().order == ["a", "b"]
    with pytest.raises(morphz.ValidationError):
        ctx.commit(f"(context-tx (base-version 1) {place})")
    assert ctx.version == 1


def test_a_no_op_place_does_not_make_a_concurrent_place_conflict(ctx: morphz.Context) -> None:
    """Two activations read version 2; one "moves" a to first (where it is), the other moves
    b first. Nothing the second read changed, yet it is refused with `order` named."""
    _two_frames(ctx)
    ctx.commit('(context-tx (base-version 1) (create c (fact "three")))')
    with contextlib.suppress(morphz.ValidationError):  # refused as the no-op it is: fine
        ctx.commit("(context-tx (base-version 2) (place a first))")
    receipt = ctx.commit("(context-tx (base-version 2) (place c first))")
    assert ctx.mind().order == ["c", "a", "b"]
    assert receipt.after_version == ctx.version


# The protocol's concurrency entry: "If your base-version is behind, your transaction is rebased
# when nothing it reads or writes changed since (frame content, a lifecycle target, an exact
# edge, the order, a checkpoint)". A checkpoint reads the whole mind (it "snapshots frames,
# relations, order, lifecycle, protection"), but its only boundary is checkpoint:NAME, so a
# stale checkpoint is rebased over any change and snapshots a mind its author never saw. The
# reviewer's test asked for a refusal; the decision (docs/decisions.md, seventeenth session)
# keeps the rebase (DESIGN §6 lists the operations that need the exact version; a snapshot that
# keeps another activation's work from before it is what a rollback should return to) and has
# the protocol say so: this test checks that the snapshot is the mind as it was when the
# checkpoint committed, and that the protocol tells the model.
def test_a_stale_checkpoint_snapshots_the_mind_as_it_commits_and_the_protocol_says_so(
    ctx: morphz.Context,
) -> None:
    _two_frames(ctx)
    ctx.commit('(context-tx (base-version 1) (revise b (fact "written by another activation")))')
    receipt = ctx.commit("(context-tx (base-version 1) (checkpoint before-refactor))")
    assert receipt.rebased
    ctx.commit('(context-tx (base-version 3) (revise b (fact "mine")))')
    ctx.commit('(context-tx (base-version 4) (reason "undo") (rollback before-refactor))')
    assert "written by another activation" in ctx.mind().frame("b").body
    entry = " ".join(PROTOCOL.split())
    assert "as they are when it commits (a rebase includes others' changes" in entry
