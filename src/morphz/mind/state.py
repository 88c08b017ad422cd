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
    reading a frame's edges costs what it has, not every edge the transaction changed.
    """

    def __init__(self, base: MindView, changes: Changes) -> None:
        self.base = base
        self.changes = changes
        self._indexed = 0  # how many keys of changes.edges the two indexes hold
        self._by_subject: dict[str, list[Edge]] = {}
        self._by_object: dict[str, list[Edge]] = {}

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
        """The base's neighbour that these changes leave as it was, or a changed frame nearer."""
        changed = self.changes.frames
        found = step(pos, frame_id)
        for _ in range(MAX_STEPS):  # past frames this tx changed (their base rows are stale)
            if found is None or found.id not in changed:
                break
            found = step(found.pos, found.id)
        else:  # many changed frames in a row: one read of the base's order instead
            found = _nearest(self.base.frames(), (pos, frame_id), after, skip=changed)
        key = (pos, frame_id)
        best = None if found is None else (found.pos, found.id)
        for frame in changed.values():
            if frame is None:
                continue
            mine = (frame.pos, frame.id)
            if (mine > key if after else mine < key) and (
                best is None or (mine < best if after else mine > best)
            ):
                found, best = frame, mine
        return found

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


MAX_STEPS = 8  # neighbour steps over changed frames before the overlay reads the whole order


def _nearest(
    frames: Iterable[Frame], key: tuple[float, str], after: bool, skip: Mapping[str, object]
) -> Frame | None:
    """The frame of ``frames`` nearest ``key`` (pos, id) on one side, ``skip``'s ids left out."""
    best: Frame | None = None
    for frame in frames:
        if frame.id in skip:
            continue
        mine = (frame.pos, frame.id)
        if not (mine > key if after else mine < key):
            continue
        if best is None or (mine < (best.pos, best.id) if after else mine > (best.pos, best.id)):
            best = frame
    return best
