"""Projection order: where ``place`` puts a frame. Frames are ordered by ``(pos, id)``, every
frame of the mind, retired ones too (they keep their place for a restore). A place reads the
two frames the moved one goes between, one step each along the order (:meth:`MindView.frame_after`
and ``frame_before``), never the mind's whole history; only when float keys run out of room
between them is every frame renumbered.
"""

from __future__ import annotations

from morphz.mind.state import Frame, MindView


def between(
    view: MindView, moved: str, where: str, anchor: Frame | None
) -> tuple[Frame | None, Frame | None]:
    """The frames ``moved`` goes between when placed ``where`` (first, last, before or after
    ``anchor``), ``moved`` itself passed over; None past either end."""
    if where == "first":
        return None, _step(view, float("-inf"), "", moved, after=True)
    if where == "last":
        return _step(view, float("inf"), "", moved, after=False), None
    assert anchor is not None
    if where == "before":
        return _step(view, anchor.pos, anchor.id, moved, after=False), anchor
    return anchor, _step(view, anchor.pos, anchor.id, moved, after=True)


def stays(view: MindView, moved: Frame, lo: Frame | None, hi: Frame | None) -> bool:
    """Whether ``moved`` is between ``lo`` and ``hi`` already (its neighbours in the whole
    order, retired frames included): a place that would move nothing."""
    before = view.frame_before(moved.pos, moved.id)
    after = view.frame_after(moved.pos, moved.id)
    return _id(before) == _id(lo) and _id(after) == _id(hi)


def _id(frame: Frame | None) -> str | None:
    return None if frame is None else frame.id


def _step(view: MindView, pos: float, fid: str, skip: str, after: bool) -> Frame | None:
    """The frame next to ``(pos, fid)`` one way, passing over the frame ``skip``."""
    step = view.frame_after if after else view.frame_before
    found = step(pos, fid)
    if found is not None and found.id == skip:
        found = step(found.pos, found.id)
    return found


def renumbered(view: MindView, moved: Frame, where: str, anchor: str | None) -> list[Frame]:
    """Every frame in its new order with ``moved`` placed ``where``: what the keys 1..n are
    given when float keys ran out of room (the one step of a place that reads the whole
    order)."""
    ordered = sorted((f for f in view.frames() if f.id != moved.id), key=lambda f: (f.pos, f.id))
    if where in ("first", "last"):
        index = 0 if where == "first" else len(ordered)
    else:
        index = [f.id for f in ordered].index(str(anchor)) + (where == "after")
    return [*ordered[:index], moved, *ordered[index:]]
