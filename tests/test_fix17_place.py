"""The fix of review 17b's no-op place: a place that would leave the frame between the
neighbours it has (in the whole order, retired frames included) is refused like every other
no-op, naming where the frame is; one that moves it past a retired frame is a real move."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import morphz


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[morphz.Context]:
    db = morphz.open(tmp_path / "place.db")
    context = db.context("c", create=True, window=0)
    yield context
    db.close()


def _tx(ctx: morphz.Context, ops: str, reason: str = "") -> morphz.Receipt:
    why = f' (reason "{reason}")' if reason else ""
    return ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


def test_the_refusal_names_where_the_frame_is(ctx: morphz.Context) -> None:
    _tx(ctx, "(create a (x 1)) (create b (x 2))")
    with pytest.raises(morphz.ValidationError, match="frame 'b' is after a already: drop this"):
        _tx(ctx, "(place b (after a))")


def test_a_place_past_a_retired_frame_moves_it(ctx: morphz.Context) -> None:
    """The order holds retired frames (they keep their place for a restore): placing a first
    when only a retired frame precedes it moves it, so a restore of that frame comes after."""
    _tx(ctx, "(create x (x 0)) (create a (x 1))")
    _tx(ctx, "(retire x)", reason="done")
    receipt = _tx(ctx, "(place a first)")
    assert receipt.after_version == ctx.version
    _tx(ctx, "(restore x)")
    assert ctx.mind().order[:2] == ["a", "x"]


def test_a_move_and_its_undo_in_one_transaction_commit(ctx: morphz.Context) -> None:
    """Each place is judged on the state the operations before it left."""
    _tx(ctx, "(create a (x 1)) (create b (x 2))")
    _tx(ctx, "(place b first) (place a first)")
    assert ctx.mind().order == ["a", "b"]
