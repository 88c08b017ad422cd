"""The supersede fast path (DESIGN §7): a frame retired in a transaction whose successor cites
it and is declared ``(relate NEW supersedes OLD)`` in that same transaction is retired at once,
not at the end of its organizing window. :func:`fast_path` runs after each operation of
:func:`~morphz.mind.apply.apply_tx`, on the frames that operation may have completed the three
for (:func:`completes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from morphz.mind.state import OpEffect
from morphz.txlang import ops as o

if TYPE_CHECKING:
    from morphz.mind.apply import _Apply


def fast_path(a: _Apply, completed: Iterable[str]) -> None:
    """Retire at once each frame of ``completed`` whose three are all there: retired in this
    tx, a successor citing it, ``(relate NEW supersedes OLD)`` added in this tx — from the
    operation that completes them (so a later checkpoint in the tx sees it retired). A later
    operation of the same tx that drops the citation or the edge does not undo it: the rule is
    what every recorded history was applied with, and the audit replays them by it.

    ``completed``: the frames the operation just applied may have completed the three for
    (:func:`completes`). No other frame's can have changed, so only these are checked (not
    every retired frame against every edge added so far after each operation: cubic in a
    consolidation of many frames), in the order their retires named them."""
    retired = a.retired
    for old_id in sorted({f for f in completed if f in retired}, key=retired.__getitem__):
        _supersede(a, old_id)


def completes(a: _Apply, op: o.Op) -> Iterable[str]:
    """The frames ``op`` (just applied) may have completed a supersede for: a retire's frames,
    a ``supersedes`` edge's object, the sources a derive or revise now cites, and after a
    rollback (which changes frames and edges wholesale) every frame this tx retired."""
    if isinstance(op, o.Retire):
        return op.targets
    if isinstance(op, o.Relate):
        return (op.object,) if op.relation == "supersedes" else ()
    if isinstance(op, (o.Derive, o.Revise)):
        frame = a.view.frame(op.id)
        return frame.sources if frame is not None else ()
    return a.retired if isinstance(op, o.Rollback) else ()


def _supersede(a: _Apply, old_id: str) -> None:
    """Retire ``old_id`` at once if it is retiring and a ``supersedes`` edge this tx added
    names a successor that cites it (the first such edge added names the successor)."""
    old = a.view.frame(old_id)
    if old is None or old.lifecycle != "retiring":
        return
    for new_id, relation, _ in a.view.added_edges_to(old_id):
        successor = a.view.frame(new_id) if relation == "supersedes" else None
        if successor is not None and old_id in successor.sources:
            a.put_frame(old.with_life("retired", None, old.reason), False, True)
            # the retire still in force (an earlier one a restore cancelled keeps its figures,
            # which the restore's take back); none in a replay, which records no effects
            at = a.retire_effects.get(old_id)
            if at is not None:
                tokens = a.shown(old, a.relations(old_id))  # entry, marks, relations: gone
                effect = a.changes.effects[at]
                # freed now; the relief pending for it (this retire's own, or an earlier tx's
                # when it was retiring already) is taken back
                a.changes.effects[at] = OpEffect(  # frozen: a new one (replace() is slow)
                    effect.index,
                    effect.op,
                    effect.target,
                    f"retired at once: superseded by {new_id}",
                    effect.immediate + tokens,
                    effect.eventual - tokens,
                )
            return
