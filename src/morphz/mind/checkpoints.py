"""The checkpoint operations of :func:`~morphz.mind.apply.apply_tx`: ``checkpoint`` keeps a
snapshot of the mind (its frames and edges), ``rollback`` brings the mind back to one (a frame
whose window ended meanwhile comes back retired) with its token effect as the kept total counts
it, and ``drop-checkpoint`` forgets one. A new rollback that would change nothing, or remove or
retire a protected frame, is refused (a replay takes those an earlier release committed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from morphz.errors import NotFoundError, ProtectedError, ValidationError
from morphz.mind.conflicts import edge_key
from morphz.mind.lifecycle import edge_tokens, in_view, kept_tokens
from morphz.mind.state import Edge, Frame, Snapshot
from morphz.txlang import ops as o

if TYPE_CHECKING:
    from morphz.mind.apply import _Apply


def checkpoint(a: _Apply, op: o.Checkpoint) -> None:
    if a.view.has_checkpoint(op.checkpoint):
        raise a.fail(
            ValidationError,
            f"checkpoint '{op.checkpoint}' already exists: drop it first or choose another name",
        )
    frames = tuple(sorted(a.view.frames(), key=lambda f: f.id))
    edges = tuple(sorted(a.view.edges()))
    a.changes.checkpoints[op.checkpoint] = Snapshot(
        op.checkpoint, a.view.version + 1, frames, edges
    )
    a.changes.written.add(f"checkpoint:{op.checkpoint}")
    a.effect(op.checkpoint, f"checkpoint of {len(frames)} frames and {len(edges)} edges")


def rollback(a: _Apply, op: o.Rollback) -> None:
    snap = a.view.checkpoint(op.checkpoint)
    if snap is None:
        raise a.fail(
            NotFoundError,
            f"checkpoint '{op.checkpoint}' does not exist: the mind region lists the checkpoints",
        )
    clock = a.view.clock
    target = {f.id: _finalized_if_due(f, clock) for f in snap.frames}
    current = {f.id: f for f in a.view.frames()}
    wanted, edges = set(snap.edges), list(a.view.edges())
    if a.env.live:  # refusals added in review 20b: new commits only (see Env.live)
        _check_new_rollback(a, op.checkpoint, current, target, wanted == set(edges))
    a.relations_of.clear()  # the relations are the snapshot's from here
    # the token effect, as the kept total counts: what is in view (frames with their marks, and
    # the relations of frames in view) and what retiring frames will free, before and after
    freed, pending = _view_totals(current, edges)
    after = _view_totals(target, snap.edges)
    freed, pending = freed - after[0], after[1] - pending
    for fid in current.keys() - target.keys():
        a.view.put_frame(fid, None)
        a.changes.written.update((f"content:{fid}", f"life:{fid}"))
    for fid, frame in target.items():
        if current.get(fid) != frame:
            a.put_frame(frame, True, True)
    for edge in edges:
        if edge not in wanted:
            a.changes.edges[edge] = False
            a.changes.written.add(edge_key(*edge))
    for edge in snap.edges:
        if not a.view.has_edge(edge):
            a.changes.edges[edge] = True
            a.changes.written.add(edge_key(*edge))
    top = max((f.pos for f in snap.frames), default=0.0)
    if top > a.view.order_max:
        a.changes.order_max = top
    a.changes.barrier = True
    a.changes.written.update(("order", f"checkpoint:{op.checkpoint}"))
    # named by the checkpoint, not a version: one taken before other operations of its
    # transaction holds a mind that transaction's version never had
    change = f"mind rolled back to checkpoint '{op.checkpoint}'"
    a.effect(op.checkpoint, change, immediate=freed, eventual=pending)


def _check_new_rollback(
    a: _Apply, name: str, current: dict[str, Frame], target: dict[str, Frame], same_edges: bool
) -> None:
    """Refuse a rollback that changes nothing (it would take a version and raise the rollback
    barrier for nothing), and one that would remove or retire a protected frame (protected
    content cannot be retired: it must be unprotected first)."""
    if same_edges and current == target:
        raise a.fail(
            ValidationError,
            f"the mind is at checkpoint '{name}' already: drop this operation",
            target=name,
        )
    hit = sorted(
        fid
        for fid, frame in current.items()
        if frame.protected and (fid not in target or target[fid].lifecycle != "active")
    )
    if hit:
        named = ", ".join(f"{fid} ({_fate(target.get(fid))})" for fid in hit)
        raise a.fail(
            ProtectedError,
            f"rolling back to checkpoint '{name}' would remove or retire protected frames: "
            f"{named}; unprotect them first if they may go, or drop this operation",
            target=name,
            frames=hit,
        )


def _fate(frame: Frame | None) -> str:
    """What a rollback does to a protected frame: removes one created since the checkpoint, or
    brings it back retiring or retired."""
    return "created since" if frame is None else f"comes back {frame.lifecycle}"


def _view_totals(frames: dict[str, Frame], edges: Iterable[Edge]) -> tuple[int, int]:
    """The tokens ``frames`` and ``edges`` show in the mind region, and those of it that
    retiring frames free when their windows end."""
    shown = {fid: kept_tokens(f) for fid, f in frames.items() if in_view(f)}
    retiring = {fid for fid, f in frames.items() if f.lifecycle == "retiring"}
    for edge in edges:
        if edge[0] in shown:
            shown[edge[0]] += edge_tokens(edge)
    return sum(shown.values()), sum(shown[fid] for fid in retiring)


def _finalized_if_due(frame: Frame, clock: int) -> Frame:
    """A snapshot's retiring frame whose window has already ended comes back retired."""
    if frame.lifecycle == "retiring" and frame.deadline is not None and frame.deadline <= clock:
        return frame.with_life("retired", None, frame.reason)
    return frame


def drop_checkpoint(a: _Apply, op: o.DropCheckpoint) -> None:
    for name in op.checkpoints:
        if not a.view.has_checkpoint(name):
            raise a.fail(
                NotFoundError,
                f"checkpoint '{name}' does not exist: the mind region lists the checkpoints",
                target=name,
            )
        a.changes.checkpoints[name] = None
        a.changes.written.add(f"checkpoint:{name}")
        a.effect(name, "dropped")


__all__ = ["checkpoint", "drop_checkpoint", "rollback"]
