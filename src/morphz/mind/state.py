"""Value types of the mind and the read/write interfaces the pure layer works through.

The pure layer never sees a database. It reads through a :class:`MindView` (the store provides
one backed by SQL rows, the audit replay one backed by :class:`MindState` in memory) and returns
a :class:`Changes` value: the rows that one logical step changes. The store writes those rows;
the replay applies them to its in-memory state. Both then chain the same canonical rendering of
the changes into the head hash.

:class:`Frame` and :class:`ObsState` are values (compared and hashed by their fields, never
changed after construction) but not declared ``frozen``: a frozen dataclass's ``__init__`` costs
about four times as much, and every commit and every replayed event builds some.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Literal, Protocol

FrameLife = Literal["active", "retiring", "retired"]
ObsLife = Literal["active", "retired"]
Attention = Literal["active", "retired"]
Edge = tuple[str, str, str]

GENESIS_HEAD = "0" * 64


@dataclass(slots=True, unsafe_hash=True)
class Frame:
    """One row of the mind: a frame and everything the projection keeps about it."""

    id: str
    body: str  # canonical text of the body S-expressions
    sources: tuple[str, ...]
    revision: int
    lifecycle: FrameLife
    protected: bool
    pos: float  # projection order key: smaller comes first
    deadline: int | None = None  # clock tick when a retiring frame becomes retired
    reason: str | None = None  # reason of the retirement (pending or effective)

    def with_life(self, lifecycle: FrameLife, deadline: int | None, reason: str | None) -> Frame:
        """This frame with another lifecycle, deadline and retirement reason (the same as
        ``dataclasses.replace``, several times cheaper)."""
        return Frame(
            self.id,
            self.body,
            self.sources,
            self.revision,
            lifecycle,
            self.protected,
            self.pos,
            deadline,
            reason,
        )

    def canonical(self) -> str:
        deadline = "-" if self.deadline is None else str(self.deadline)
        return (
            f"frame {self.id} r{self.revision} {self.lifecycle} p{int(self.protected)} "
            f"o{self.pos!r} d{deadline} s[{' '.join(self.sources)}] b{self.body} "
            f"w{self.reason or ''}"
        )


@dataclass(slots=True, unsafe_hash=True)
class ObsState:
    """The mutable attributes of one observation (its content is an immutable event)."""

    seq: int
    kind: str
    lifecycle: ObsLife
    protected: bool
    chars: int  # size of the observation text, for token estimates
    units: int  # its text's token estimate in twelfths of a token (graphemes.token_units)

    def with_life(self, lifecycle: ObsLife, protected: bool) -> ObsState:
        """This observation with another lifecycle and protection."""
        return ObsState(self.seq, self.kind, lifecycle, protected, self.chars, self.units)

    def canonical(self) -> str:
        # without units, which the text decides as it decides chars: the heads of every store
        # chained before units were kept (migration 0022) stay what the replay computes
        return f"obs {self.seq} {self.kind} {self.lifecycle} p{int(self.protected)} c{self.chars}"


@dataclass(frozen=True, slots=True)
class SessionState:
    id: str
    attention: Attention

    def canonical(self) -> str:
        return f"session {self.id} {self.attention}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A checkpoint: frames (with order, lifecycle and protection) and relations."""

    name: str
    version: int  # mind version at which it was taken (after its tx)
    frames: tuple[Frame, ...]
    edges: tuple[Edge, ...]

    def canonical(self) -> str:
        digest = hashlib.sha256()
        for frame in sorted(self.frames, key=lambda f: f.id):
            digest.update(frame.canonical().encode())
            digest.update(b"\n")
        for edge in sorted(self.edges):
            digest.update(" ".join(edge).encode())
            digest.update(b"\n")
        return f"checkpoint {self.name} v{self.version} {digest.hexdigest()}"


@dataclass(frozen=True, slots=True)
class OpEffect:
    """What one operation changed, with its estimated token effect.

    ``immediate`` tokens leave (positive) or enter (negative) the encoding at commit;
    ``eventual`` tokens leave when a pending retirement finalizes.
    """

    index: int
    op: str
    target: str
    change: str
    immediate: int = 0
    eventual: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "op": self.op,
            "target": self.target,
            "change": self.change,
            "tokens_immediate": self.immediate,
            "tokens_eventual": self.eventual,
        }


@dataclass(slots=True, init=False)
class Changes:
    """The projection rows one step changes. ``None`` in ``frames``/``checkpoints`` deletes."""

    frames: dict[str, Frame | None] = field(default_factory=dict)
    edges: dict[Edge, bool] = field(default_factory=dict)  # True: added, False: removed
    observations: dict[int, ObsState] = field(default_factory=dict)
    checkpoints: dict[str, Snapshot | None] = field(default_factory=dict)
    sessions: dict[str, SessionState] = field(default_factory=dict)
    order_max: float | None = None
    window: int | None = None
    clock: int | None = None
    barrier: bool = False  # a rollback: every older base version is invalid
    written: set[str] = field(default_factory=set)  # conflict boundaries written
    effects: list[OpEffect] = field(default_factory=list)

    def __init__(  # noqa: PLR0917 - the generated one, a third cheaper: every event builds one
        self,
        frames: dict[str, Frame | None] | None = None,
        edges: dict[Edge, bool] | None = None,
        observations: dict[int, ObsState] | None = None,
        checkpoints: dict[str, Snapshot | None] | None = None,
        sessions: dict[str, SessionState] | None = None,
        order_max: float | None = None,
        window: int | None = None,
        clock: int | None = None,
        barrier: bool = False,
        written: set[str] | None = None,
        effects: list[OpEffect] | None = None,
    ) -> None:
        self.frames = {} if frames is None else frames
        self.edges = {} if edges is None else edges
        self.observations = {} if observations is None else observations
        self.checkpoints = {} if checkpoints is None else checkpoints
        self.sessions = {} if sessions is None else sessions
        self.order_max = order_max
        self.window = window
        self.clock = clock
        self.barrier = barrier
        self.written = set() if written is None else written
        self.effects = [] if effects is None else effects

    def is_empty(self) -> bool:
        return not (
            self.frames
            or self.edges
            or self.observations
            or self.checkpoints
            or self.sessions
            or self.window is not None
            or self.clock is not None
        )

    def canonical(self) -> str:
        """Deterministic text of every changed row; what the head hash chains."""
        lines: list[str] = []
        if self.frames:
            frames = self.frames
            for fid in sorted(frames):
                frame = frames[fid]
                lines.append(frame.canonical() if frame is not None else f"frame {fid} deleted")
        if self.edges:
            edges = self.edges
            for edge in sorted(edges):
                lines.append(f"edge {' '.join(edge)} {'+' if edges[edge] else '-'}")
        if self.observations:
            observations = self.observations
            for seq in sorted(observations):
                lines.append(observations[seq].canonical())
        if self.checkpoints:
            checkpoints = self.checkpoints
            for name in sorted(checkpoints):
                snap = checkpoints[name]
                lines.append(snap.canonical() if snap is not None else f"checkpoint {name} dropped")
        if self.sessions:
            sessions = self.sessions
            for sid in sorted(sessions):
                lines.append(sessions[sid].canonical())
        if self.order_max is not None:
            lines.append(f"order-max {self.order_max!r}")
        if self.window is not None:
            lines.append(f"window {self.window}")
        if self.clock is not None:
            lines.append(f"clock {self.clock}")
        if self.barrier:
            lines.append("barrier")
        return "\n".join(lines)


def chain_head(previous: str, changes: Changes) -> str:
    """The next head hash: SHA-256 of the previous head and the canonical changes."""
    return hashlib.sha256(f"{previous}\n{changes.canonical()}".encode()).hexdigest()


class MindView(Protocol):
    """Read access to one context's projection, as the pure layer needs it."""

    @property
    def version(self) -> int: ...
    @property
    def clock(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def order_max(self) -> float: ...
    @property
    def last_seq(self) -> int: ...

    def frame(self, frame_id: str) -> Frame | None: ...
    def has_edge(self, edge: Edge) -> bool: ...
    def observation(self, seq: int) -> ObsState | None: ...
    def session(self, session_id: str) -> SessionState | None: ...
    def has_checkpoint(self, name: str) -> bool: ...
    def checkpoint(self, name: str) -> Snapshot | None: ...
    def frames(self) -> Iterable[Frame]: ...
    def edges(self) -> Iterable[Edge]: ...
    def subject_edges(self, frame_id: str) -> list[Edge]: ...
    def due_retirements(self, clock: int) -> list[str]: ...
    # neighbours in projection order, (pos, id), any lifecycle: the first frame whose key is
    # after (before) ``(pos, frame_id)`` (which need not be a frame's)
    def frame_after(self, pos: float, frame_id: str) -> Frame | None: ...
    def frame_before(self, pos: float, frame_id: str) -> Frame | None: ...


class Overlay:
    """A :class:`MindView` that reads ``changes`` first, then the base view.

    Operations in one transaction apply to the state the previous ones left: each writes into
    the shared ``changes`` and reads through this overlay. The edges of ``changes`` are indexed
    by subject and object as they come (an edge's key is never removed, only set to False), so
    reading a frame's edges costs what it has, not every edge the transaction changed. Frames
    are written through :meth:`put_frame`, which keeps the changed frames in projection order,
    so a place finds its neighbours by bisection there and by indexed steps in the base that
    pass only the rows of frames the transaction moved or deleted, each once (review 17c: a
    place past more than 8 such rows read every frame the context ever had).
    """

    def __init__(self, base: MindView, changes: Changes) -> None:
        self.base = base
        self.changes = changes
        self._indexed = 0  # how many keys of changes.edges the two indexes hold
        self._by_subject: dict[str, list[Edge]] = {}
        self._by_object: dict[str, list[Edge]] = {}
        self._placed = _ChangedOrder()
        # a base row of a frame these changes moved or deleted -> the first row past it (one
        # way: True after, False before) of a frame they had not (:meth:`_in_place`)
        self._jumps: dict[bool, dict[str, Frame | None]] = {True: {}, False: {}}

    def put_frame(self, frame_id: str, frame: Frame | None) -> None:
        """Write ``frame`` (None: deleted) into the changes: the way operations change frames,
        so that the order of the changed frames is kept (:meth:`frame_after`)."""
        self.changes.frames[frame_id] = frame
        self._placed.pending[frame_id] = None

    @property
    def version(self) -> int:
        return self.base.version

    @property
    def clock(self) -> int:
        if self.changes.clock is not None:
            return self.changes.clock
        return self.base.clock

    @property
    def window(self) -> int:
        if self.changes.window is not None:
            return self.changes.window
        return self.base.window

    @property
    def order_max(self) -> float:
        if self.changes.order_max is not None:
            return self.changes.order_max
        return self.base.order_max

    @property
    def last_seq(self) -> int:
        return self.base.last_seq

    def frame(self, frame_id: str) -> Frame | None:
        frames = self.changes.frames
        if frame_id in frames:
            return frames[frame_id]
        return self.base.frame(frame_id)

    def has_edge(self, edge: Edge) -> bool:
        edges = self.changes.edges
        if edge in edges:
            return edges[edge]
        return self.base.has_edge(edge)

    def observation(self, seq: int) -> ObsState | None:
        obs = self.changes.observations
        if seq in obs:
            return obs[seq]
        return self.base.observation(seq)

    def session(self, session_id: str) -> SessionState | None:
        sessions = self.changes.sessions
        if session_id in sessions:
            return sessions[session_id]
        return self.base.session(session_id)

    def has_checkpoint(self, name: str) -> bool:
        cps = self.changes.checkpoints
        if name in cps:
            return cps[name] is not None
        return self.base.has_checkpoint(name)

    def checkpoint(self, name: str) -> Snapshot | None:
        cps = self.changes.checkpoints
        if name in cps:
            return cps[name]
        return self.base.checkpoint(name)

    def frames(self) -> Iterator[Frame]:
        changed = self.changes.frames
        for frame in self.base.frames():
            if frame.id not in changed:
                yield frame
        for frame_or_none in changed.values():
            if frame_or_none is not None:
                yield frame_or_none

    def edges(self) -> Iterator[Edge]:
        changed = self.changes.edges
        for edge in self.base.edges():
            if edge not in changed:
                yield edge
        for edge, present in changed.items():
            if present:
                yield edge

    def subject_edges(self, frame_id: str) -> list[Edge]:
        changed = self.changes.edges
        edges = {e for e in self.base.subject_edges(frame_id) if e not in changed}
        if changed:
            edges.update(e for e in self._edge_index()[0].get(frame_id, ()) if changed[e])
        return sorted(edges)

    def added_edges_to(self, object_id: str) -> list[Edge]:
        """The edges these changes add (present now) whose object is ``object_id``, in the
        order they entered the changes."""
        changed = self.changes.edges
        if not changed:
            return []
        return [e for e in self._edge_index()[1].get(object_id, ()) if changed[e]]

    def _edge_index(self) -> tuple[dict[str, list[Edge]], dict[str, list[Edge]]]:
        """The changed edges by subject and by object, brought up to date: the keys added
        since the last call are the last ones of the (insertion-ordered) dict."""
        changed = self.changes.edges
        if new := len(changed) - self._indexed:
            by_subject, by_object = self._by_subject, self._by_object
            for edge in reversed(list(islice(reversed(changed), new))):
                by_subject.setdefault(edge[0], []).append(edge)
                by_object.setdefault(edge[2], []).append(edge)
            self._indexed = len(changed)
        return self._by_subject, self._by_object

    def frame_after(self, pos: float, frame_id: str) -> Frame | None:
        return self._neighbour(pos, frame_id, self.base.frame_after, after=True)

    def frame_before(self, pos: float, frame_id: str) -> Frame | None:
        return self._neighbour(pos, frame_id, self.base.frame_before, after=False)

    def _neighbour(
        self, pos: float, frame_id: str, step: Callable[[float, str], Frame | None], after: bool
    ) -> Frame | None:
        """The nearer of the base's nearest frame these changes left in its place and the
        nearest frame they changed (moved or not), as they have it."""
        found = self._in_place(step(pos, frame_id), step, after)
        mine = self._placed.next_to(self.changes.frames, (pos, frame_id), after)
        if mine is None:
            return found
        if found is None or (
            mine < (found.pos, found.id) if after else mine > (found.pos, found.id)
        ):
            return self.changes.frames[mine[1]]
        return found

    def _in_place(
        self, row: Frame | None, step: Callable[[float, str], Frame | None], after: bool
    ) -> Frame | None:
        """``row`` (a base row), or the first base row past it one way whose frame these
        changes left where the base has it (not changed, or changed in place: a retire), as
        they have it. One indexed step per row passed, remembered with where it leads: a
        transaction's places pass each such row once, however many frames its history holds.
        A remembered step may pass a frame put back in its place since: every frame passed is
        a changed one, which :meth:`_neighbour` finds among the changed frames."""
        changed, jumps = self.changes.frames, self._jumps[after]
        passed = []
        while row is not None and row.id in changed:
            now = changed[row.id]
            if now is not None and now.pos == row.pos:
                break
            passed.append(row.id)
            row = jumps[row.id] if row.id in jumps else step(row.pos, row.id)
        for fid in passed:
            jumps[fid] = row
        return None if row is None else changed.get(row.id, row)

    def due_retirements(self, clock: int) -> list[str]:
        due = set(self.base.due_retirements(clock))
        for fid, frame in self.changes.frames.items():
            is_due = (
                frame is not None
                and frame.lifecycle == "retiring"
                and frame.deadline is not None
                and frame.deadline <= clock
            )
            if is_due:
                due.add(fid)
            else:
                due.discard(fid)
        return sorted(due)


class _ChangedOrder:
    """The ``(pos, id)`` keys of the frames a transaction changed (deleted ones left out),
    sorted, brought up to date from the ids written since (``pending``): a few by bisection,
    many (a renumber, a rollback) by sorting again. Every write goes through
    :meth:`Overlay.put_frame`; a frame written past it is noticed only when its id is new."""

    __slots__ = ("keys", "pending", "placed")

    def __init__(self) -> None:
        self.keys: list[tuple[float, str]] = []
        self.placed: dict[str, tuple[float, str] | None] = {}  # each id's key in ``keys``
        self.pending: dict[str, None] = {}  # ids written since (an ordered set)

    def next_to(
        self, frames: Mapping[str, Frame | None], key: tuple[float, str], after: bool
    ) -> tuple[float, str] | None:
        """The key nearest ``key`` one way (after it: ``after``), None past the end."""
        keys = self._synced(frames)
        if after:
            at = bisect_right(keys, key)
            return keys[at] if at < len(keys) else None
        at = bisect_left(keys, key)
        return keys[at - 1] if at else None

    def _synced(self, frames: Mapping[str, Frame | None]) -> list[tuple[float, str]]:
        keys, placed, pending = self.keys, self.placed, self.pending
        if pending and len(pending) <= 16 + len(keys) // 16:
            for fid in pending:
                frame = frames[fid]
                old, new = placed.get(fid), None if frame is None else (frame.pos, fid)
                if old != new:
                    if old is not None:
                        del keys[bisect_left(keys, old)]
                    if new is not None:
                        insort(keys, new)
                placed[fid] = new
            pending.clear()
        if pending or len(placed) != len(frames):
            self.placed = {fid: None if f is None else (f.pos, fid) for fid, f in frames.items()}
            self.keys = sorted(k for k in self.placed.values() if k is not None)
            pending.clear()
        return self.keys
