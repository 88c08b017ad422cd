"""Apply a parsed transaction to a mind: pure, all-or-nothing.

:func:`apply_tx` reads through a :class:`~morphz.mind.state.MindView` and returns the
:class:`~morphz.mind.state.Changes` the transaction makes, or raises a typed
:class:`~morphz.errors.TxError` naming the operation and its position. It never writes to the
view, so a refusal leaves nothing behind. The live commit and the audit replay call this same
function; only the :class:`Env` differs (the replay does not re-check runtime admission facts,
such as running work, that were checked when the transaction was accepted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from morphz.errors import NotFoundError, ProtectedError, TxError, ValidationError
from morphz.ids import ref_seq
from morphz.mind import checkpoints, order, session_ops
from morphz.mind.conflicts import edge_key
from morphz.mind.lifecycle import (
    DEFAULT_PREVIEW_THRESHOLD,
    edge_tokens,
    in_view,
    kept_tokens,
    obs_tokens,
    remaining_ticks,
)
from morphz.mind.state import (
    Changes,
    Edge,
    Frame,
    MindView,
    ObsState,
    OpEffect,
    Overlay,
)
from morphz.mind.supersede import completes, fast_path
from morphz.token_estimate import tokens
from morphz.txlang import ops as o
from morphz.txlang.sexpr import line_col


def _never(_: object) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Env:
    """Runtime facts a transaction is admitted against.

    ``session``: the session committing (may not retire itself). ``session_busy``: whether a
    session has running work. ``causally_protected``: whether an observation is the undelivered
    root request of a running activation. ``root_note``: what the refusal to retire such a root
    adds (the runtime's word when the activation's process is gone: how to recover it).
    ``preview_threshold``: the characters above which the inbox shows an observation as a
    preview.
    """

    session: str = "default"
    session_busy: Callable[[str], bool] = _never
    causally_protected: Callable[[int], bool] = _never
    root_note: Callable[[int], str] = lambda _: ""
    # the context's preview threshold (receipts count a long observation as its preview)
    preview_threshold: Callable[[], int] = lambda: DEFAULT_PREVIEW_THRESHOLD
    # the token units of observation seq's inbox entry shown as a preview under a threshold:
    # the mind layer has not its text, and a preview's head and tail may be far denser in
    # chunks than the text on average (None: counted from the units kept with it)
    preview_units: Callable[[int, int], int | None] = lambda seq, threshold: None
    # whether the receipt is wanted: a replay (the audit) rebuilds the state, which the
    # receipt's effects are no part of, so it records none and skips the lookups only their
    # figures need (a frame's relations)
    receipts: bool = True
    # whether this is a new commit: refusals added after a release (a place that moves
    # nothing, review 17b; a revise or a rollback that changes nothing, a rollback that would
    # remove or retire a protected frame, review 20b) apply to new commits only; a replay (the
    # audit) accepts what an earlier release committed, as txlang.validate.check_new does for
    # the text's rules
    live: bool = True


REPLAY_ENV = Env(session="", receipts=False, live=False)


class _Apply:
    """State of one application: the overlay, the tx and the operation being applied."""

    __slots__ = (
        "changes", "env", "index", "op", "relations_of", "retire_effects", "retired", "tx", "view"
    )  # fmt: skip

    def __init__(self, view: MindView, tx: o.Tx, env: Env) -> None:
        self.changes = Changes()
        self.view = Overlay(view, self.changes)
        self.tx = tx
        self.env = env
        self.index = 0
        self.op: o.Op = tx.ops[0]
        # frames a retire of this tx named, in the order first named (the fast path's order)
        self.retired: dict[str, int] = {}
        self.retire_effects: dict[str, int] = {}  # where in effects each target's last retire is
        self.relations_of: dict[str, int] = {}  # relations(), until a relation of it changes

    # -- errors and effects

    def fail(self, cls: type[TxError], message: str, **details: object) -> TxError:
        line, column = line_col(self.tx.source, self.op.pos) if self.tx.source else (None, None)
        return cls(
            message,
            op=self.op.name,
            op_index=self.index,
            line=line,
            column=column,
            details=dict(details),
        )

    def effect(self, target: str, change: str, immediate: int = 0, eventual: int = 0) -> None:
        """Record what the operation changed, for the receipt; a replay has no receipt (see
        Env.receipts), so it records nothing: building the frozen effects and their texts
        was some 8% of the audit's replay."""
        if not self.env.receipts:
            return
        effect = OpEffect(self.index, self.op.name, target, change, immediate, eventual)
        if effect.op == "retire":
            self.retire_effects[target] = len(self.changes.effects)
        self.changes.effects.append(effect)

    # A frame effect's figures; all 0 in a replay, which wants the state, not its receipts
    # (Env.receipts): it skips the lookups and counts only they need.

    def relations(self, frame_id: str) -> int:
        """The tokens of the relations ``frame_id`` is the subject of: the mind region shows
        them with it while it is in view (one lookup; a frame's lifecycle does not change them)."""
        if not self.env.receipts:
            return 0
        known = self.relations_of.get(frame_id)
        if known is None:
            known = sum(edge_tokens(e) for e in self.view.subject_edges(frame_id))
            self.relations_of[frame_id] = known
        return known

    def shown(self, frame: Frame | None, relations: int) -> int:
        """What ``frame`` shows in the mind region: its entry (with a retiring frame's marks)
        and its ``relations`` (:meth:`relations`); 0 when out of view."""
        if not self.env.receipts or not in_view(frame):
            return 0
        return kept_tokens(frame) + relations

    def shown_obs(self, obs: ObsState) -> int:
        """What ``obs`` counts in the inbox (its entry, or its preview); 0 in a replay."""
        if not self.env.receipts:
            return 0
        threshold = self.env.preview_threshold()
        if obs.chars > threshold:
            units = self.env.preview_units(obs.seq, threshold)
            if units is not None:
                return tokens(units)
        return obs_tokens(obs, threshold)

    def pending(self, frame: Frame | None, relations: int) -> int:
        """The relief a retiring ``frame`` brings when its window ends; 0 for any other."""
        retiring = frame is not None and frame.lifecycle == "retiring"
        return self.shown(frame, relations) if retiring else 0

    # -- lookups that refuse with a clear error

    def need_frame(self, fid: str) -> Frame:
        frame = self.view.frame(fid)
        if frame is None:
            raise self.fail(
                NotFoundError,
                f"frame '{fid}' does not exist: check the id in the mind region, or create it",
                target=fid,
            )
        return frame

    def need_obs(self, ref: str) -> ObsState:
        seq = ref_seq(ref)
        obs = self.view.observation(seq)
        if obs is not None:
            return obs
        if seq <= self.view.last_seq:
            raise self.fail(
                ValidationError,
                f"{ref} is an event but not an observation: only observations can be cited, "
                "retired, restored or protected",
                target=ref,
            )
        latest = self.view.last_seq
        known = f"the latest event is @e{latest}" if latest else "this context has no event yet"
        raise self.fail(NotFoundError, f"{ref} does not exist: {known}", target=ref)

    def check_sources(self, sources: tuple[str, ...]) -> None:
        for src in sources:
            if src.startswith("@"):
                self.need_obs(src)
            else:
                self.need_frame(src)

    # -- writes

    def put_frame(self, frame: Frame, content: bool, life: bool) -> None:
        self.view.put_frame(frame.id, frame)
        if content:
            self.changes.written.add(f"content:{frame.id}")
        if life:
            self.changes.written.add(f"life:{frame.id}")

    def put_obs(self, obs: ObsState) -> None:
        self.changes.observations[obs.seq] = obs
        self.changes.written.add(f"life:@e{obs.seq}")


# ------------------------------------------------------------ frame content


def _new_frame(a: _Apply, fid: str, sources: tuple[str, ...], body: str) -> None:
    existing = a.view.frame(fid)
    if existing is not None:
        raise a.fail(
            ValidationError,
            f"frame '{fid}' already exists ({existing.lifecycle}): ids stay used after "
            "retirement, so revise or restore it, or choose a new id",
            target=fid,
        )
    a.check_sources(sources)
    pos = a.view.order_max + 1.0
    a.changes.order_max = pos
    frame = Frame(fid, body, sources, 1, "active", False, pos)
    a.put_frame(frame, True, True)
    if a.env.receipts:  # (a replay records no effects: see Env.receipts)
        a.effect(fid, "created", immediate=-a.shown(frame, 0))  # (no relation names it yet)


def _create(a: _Apply, op: o.Create) -> None:
    _new_frame(a, op.id, (), op.body_text)


def _derive(a: _Apply, op: o.Derive) -> None:
    _new_frame(a, op.id, op.sources, op.body_text)


def _revise(a: _Apply, op: o.Revise) -> None:
    old = a.need_frame(op.id)
    sources = old.sources if op.sources is None else op.sources
    a.check_sources(sources)
    same = (old.body, old.sources) == (op.body_text, sources)
    if a.env.live and same and old.lifecycle == "active":  # (new commits only: see Env.live)
        raise a.fail(
            ValidationError,
            f"frame '{op.id}' has this body and these sources already: drop this operation",
            target=op.id,
        )
    new = Frame(old.id, op.body_text, sources, old.revision + 1, "active", old.protected, old.pos)
    rel = a.relations(op.id)
    before, pending = a.shown(old, rel), a.pending(old, rel)
    a.put_frame(new, True, old.lifecycle != "active")
    change = f"revision {new.revision}"
    if old.lifecycle != "active":
        change += f" (was {old.lifecycle}; now active)"
    # a pending retirement is cancelled: the relief its retire promised will not come
    a.effect(op.id, change, immediate=before - a.shown(new, rel), eventual=-pending)


# ------------------------------------------------------------ lifecycle


def _retire(a: _Apply, op: o.Retire) -> None:
    for target in op.targets:
        if target.startswith("@"):
            _retire_obs(a, target)
        else:
            _retire_frame(a, target)


def _root_stays(a: _Apply, ref: str, seq: int) -> str:
    """Why the runtime keeps ``ref``, the root request of a running activation."""
    return (
        f"{ref} is the root request of a running activation: the runtime keeps it protected "
        f"until its reply is delivered; drop this operation{a.env.root_note(seq)}"
    )


def _retire_obs(a: _Apply, ref: str) -> None:
    obs = a.need_obs(ref)
    if obs.protected:
        raise a.fail(ProtectedError, f"{ref} is protected: unprotect it first", target=ref)
    if a.env.causally_protected(obs.seq):
        raise a.fail(ProtectedError, _root_stays(a, ref, obs.seq), target=ref)
    if obs.lifecycle == "retired":
        raise a.fail(ValidationError, f"{ref} is already retired; nothing to retire", target=ref)
    a.put_obs(obs.with_life("retired", obs.protected))
    a.effect(ref, "retired", immediate=a.shown_obs(obs))


def _retire_frame(a: _Apply, fid: str) -> None:
    frame = a.need_frame(fid)
    if frame.protected:
        raise a.fail(ProtectedError, f"frame '{fid}' is protected: unprotect it first", target=fid)
    if frame.lifecycle == "retired":
        raise a.fail(
            ValidationError, f"frame '{fid}' is already retired: drop this operation", target=fid
        )
    a.retired.setdefault(fid, len(a.retired))
    if frame.lifecycle == "retiring":
        left = remaining_ticks(frame, a.view.clock)
        a.effect(fid, f"already retiring: keeps its window ({left} ticks left)")
        return
    window = a.view.window
    if window == 0:
        new = frame.with_life("retired", frame.deadline, a.tx.reason)
    else:
        new = frame.with_life("retiring", a.view.clock + window, a.tx.reason)
    a.put_frame(new, False, True)
    if a.env.receipts:  # (a replay records no effects: see Env.receipts)
        _retire_effect(a, frame, new, window)


def _retire_effect(a: _Apply, old: Frame, new: Frame, window: int) -> None:
    """The effect of retiring ``old`` (to ``new``): out of view at once in a window of 0;
    otherwise its marks and reason enter now and all of it leaves when the window ends."""
    rel = a.relations(old.id)
    before, after = a.shown(old, rel), a.shown(new, rel)
    if window == 0:
        a.effect(old.id, "retired (window 0)", immediate=before)
    else:
        a.effect(old.id, f"retiring: {window} ticks left", immediate=before - after, eventual=after)


def _restore(a: _Apply, op: o.Restore) -> None:
    for target in op.targets:
        if target.startswith("@"):
            obs = a.need_obs(target)
            if obs.lifecycle == "active":
                raise a.fail(
                    ValidationError,
                    f"{target} is already active: drop this operation",
                    target=target,
                )
            a.put_obs(obs.with_life("active", obs.protected))
            a.effect(target, "restored", immediate=-a.shown_obs(obs))
            continue
        frame = a.need_frame(target)
        if frame.lifecycle == "active":
            raise a.fail(
                ValidationError,
                f"frame '{target}' is already active: drop this operation",
                target=target,
            )
        rel = a.relations(target)
        before, pending = a.shown(frame, rel), a.pending(frame, rel)
        restored = frame.with_life("active", None, None)
        a.put_frame(restored, False, True)
        change = "restored" if frame.lifecycle == "retired" else "retirement cancelled"
        a.effect(target, change, immediate=before - a.shown(restored, rel), eventual=-pending)


def _protect(a: _Apply, op: o.Protect) -> None:
    for target in op.targets:
        if target.startswith("@"):
            obs = a.need_obs(target)
            if obs.protected:
                raise a.fail(
                    ValidationError,
                    f"{target} is already protected: drop this operation",
                    target=target,
                )
            if obs.lifecycle == "retired":
                raise a.fail(
                    ValidationError, f"{target} is retired: restore it first", target=target
                )
            a.put_obs(obs.with_life(obs.lifecycle, True))
            a.effect(target, "protected")
            continue
        frame = a.need_frame(target)
        if frame.protected:
            raise a.fail(
                ValidationError,
                f"frame '{target}' is already protected: drop this operation",
                target=target,
            )
        if frame.lifecycle == "retired":
            raise a.fail(
                ValidationError, f"frame '{target}' is retired: restore it first", target=target
            )
        rel = a.relations(target) if frame.lifecycle == "retiring" else 0
        before, pending = a.shown(frame, rel), a.pending(frame, rel)
        new = replace(frame, protected=True, lifecycle="active", deadline=None, reason=None)
        a.put_frame(new, False, True)
        if pending:
            change = "protected; retirement cancelled"
            a.effect(target, change, immediate=before - a.shown(new, rel), eventual=-pending)
        else:  # the "(protected)" mark the frame's line now shows
            a.effect(target, "protected", immediate=before - a.shown(new, rel))


def _unprotect(a: _Apply, op: o.Unprotect) -> None:
    for target in op.targets:
        if target.startswith("@"):
            obs = a.need_obs(target)
            if not obs.protected and a.env.causally_protected(obs.seq):
                raise a.fail(ProtectedError, _root_stays(a, target, obs.seq), target=target)
            if not obs.protected:
                raise a.fail(
                    ValidationError,
                    f"{target} is not protected: drop this operation",
                    target=target,
                )
            a.put_obs(obs.with_life(obs.lifecycle, False))
        else:
            frame = a.need_frame(target)
            if not frame.protected:
                raise a.fail(
                    ValidationError,
                    f"frame '{target}' is not protected: drop this operation",
                    target=target,
                )
            new = replace(frame, protected=False)  # active: a protected frame never retires
            a.put_frame(new, False, True)
            a.effect(target, "unprotected", immediate=a.shown(frame, 0) - a.shown(new, 0))
            continue
        a.effect(target, "unprotected")


# ------------------------------------------------------------ relations and order


def _relate(a: _Apply, op: o.Relate) -> None:
    subject = a.need_frame(op.subject)
    a.need_frame(op.object)
    edge: Edge = (op.subject, op.relation, op.object)
    if a.view.has_edge(edge):
        raise a.fail(ValidationError, _existing_edge(a.tx, edge, subject.lifecycle))
    a.changes.edges[edge] = True
    a.changes.written.add(edge_key(*edge))
    a.relations_of.pop(op.subject, None)
    _edge_effect(a, edge, "related", 1)


def _existing_edge(tx: o.Tx, edge: Edge, lifecycle: str) -> str:
    """The refusal of relating ``edge`` again; when the transaction also retires the object of a
    supersedes edge, how to keep the supersede fast path (an edge that exists does not count).
    The mind region shows the relations of the frames in view only: an edge of a retired subject
    exists where the model sees none, so the refusal says why it is not shown."""
    subject, relation, old = edge
    exists = f"edge ({' '.join(edge)}) already exists"
    if lifecycle == "retired":
        exists += f" (not shown: its subject {subject} is retired; restore it to see the edge)"
    retires = any(isinstance(op, o.Retire) and old in op.targets for op in tx.ops)
    if relation != "supersedes" or not retires:
        return f"{exists}: drop this operation"
    return (
        f"{exists}, and an edge declared before does not retire {old} at once: put (unrelate "
        f"{subject} supersedes {old}) before this operation to declare it again here, so {old} "
        f"retires at once; without this relate, {old} waits out its organizing window"
    )


def _unrelate(a: _Apply, op: o.Unrelate) -> None:
    edge: Edge = (op.subject, op.relation, op.object)
    if not a.view.has_edge(edge):
        raise a.fail(
            NotFoundError,
            f"edge ({' '.join(edge)}) does not exist: check the relations in the mind region",
        )
    a.changes.edges[edge] = False
    a.changes.written.add(edge_key(*edge))
    a.relations_of.pop(op.subject, None)
    _edge_effect(a, edge, "unrelated", -1)


def _edge_effect(a: _Apply, edge: Edge, change: str, sign: int) -> None:
    """The effect of adding (``sign`` 1) or removing (-1) ``edge``: what it counts in the mind
    region (its tokens while its subject is in view) enters or leaves now, and what of it
    leaves when its subject's window ends (all of it while the subject retires) is pending or
    no longer. None in a replay (see Env.receipts)."""
    if not a.env.receipts:
        return
    subject = a.view.frame(edge[0])
    shown = edge_tokens(edge) if in_view(subject) else 0
    pending = shown if subject is not None and subject.lifecycle == "retiring" else 0
    a.effect(" ".join(edge), change, immediate=-sign * shown, eventual=sign * pending)


def _place(a: _Apply, op: o.Place) -> None:
    frame = a.need_frame(op.id)
    anchor = a.need_frame(op.anchor) if op.anchor is not None else None
    lo, hi = order.between(a.view, op.id, op.where, anchor)
    if a.env.live and order.stays(a.view, frame, lo, hi):
        where = op.where + (f" {op.anchor}" if op.anchor else "")
        raise a.fail(
            ValidationError,
            f"frame '{op.id}' is {where} already: drop this operation",
            target=op.id,
        )
    if lo is None and hi is None:
        pos = 1.0
    elif lo is None:
        assert hi is not None
        pos = hi.pos - 1.0
    elif hi is None:
        pos = max(lo.pos, a.view.order_max) + 1.0
    else:
        pos = (lo.pos + hi.pos) / 2
    if (lo is not None and pos <= lo.pos) or (hi is not None and pos >= hi.pos):
        _renumber(a, order.renumbered(a.view, frame, op.where, op.anchor))
    else:
        a.put_frame(replace(frame, pos=pos), False, False)
        if pos > a.view.order_max:
            a.changes.order_max = pos
    a.changes.written.add("order")
    a.effect(op.id, f"placed {op.where}" + (f" {op.anchor}" if op.anchor else ""))


def _renumber(a: _Apply, sequence: list[Frame]) -> None:
    """Float keys ran out of room between two neighbours: renumber every frame 1..n."""
    for number, frame in enumerate(sequence, start=1):
        if frame.pos != float(number):
            a.put_frame(replace(frame, pos=float(number)), False, False)
    a.changes.order_max = float(len(sequence))


# ------------------------------------------------------------ the transaction


_HANDLERS: dict[type, Callable[[_Apply, o.Op], None]] = {
    o.Create: _create,  # type: ignore[dict-item]
    o.Derive: _derive,  # type: ignore[dict-item]
    o.Revise: _revise,  # type: ignore[dict-item]
    o.Retire: _retire,  # type: ignore[dict-item]
    o.Restore: _restore,  # type: ignore[dict-item]
    o.Protect: _protect,  # type: ignore[dict-item]
    o.Unprotect: _unprotect,  # type: ignore[dict-item]
    o.Relate: _relate,  # type: ignore[dict-item]
    o.Unrelate: _unrelate,  # type: ignore[dict-item]
    o.Place: _place,  # type: ignore[dict-item]
    o.Checkpoint: checkpoints.checkpoint,  # type: ignore[dict-item]
    o.Rollback: checkpoints.rollback,  # type: ignore[dict-item]
    o.DropCheckpoint: checkpoints.drop_checkpoint,  # type: ignore[dict-item]
    o.RetireSession: session_ops.retire_session,  # type: ignore[dict-item]
    o.RestoreSession: session_ops.restore_session,  # type: ignore[dict-item]
}


def apply_tx(view: MindView, tx: o.Tx, env: Env = REPLAY_ENV) -> Changes:
    """Apply every operation of ``tx`` in order; return the changes or raise a TxError."""
    a = _Apply(view, tx, env)
    for index, op in enumerate(tx.ops):
        a.index, a.op = index, op
        _HANDLERS[type(op)](a, op)
        if a.retired:
            fast_path(a, completes(a, op))  # as soon as successor, edge and retire are there
    return a.changes
