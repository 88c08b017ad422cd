"""An in-memory mind: the audit replay's state, and a reference model for tests.

:class:`MindState` implements :class:`~morphz.mind.state.MindView` over plain dictionaries and
applies :class:`~morphz.mind.state.Changes` exactly as the store writes them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

from morphz.mind.lifecycle import DEFAULT_WINDOW
from morphz.mind.state import (
    GENESIS_HEAD,
    Changes,
    Edge,
    Frame,
    ObsState,
    SessionState,
    Snapshot,
    chain_head,
)


class MindState:
    """A whole context projection held in memory."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self._version = 0
        self._clock = 0
        self._window = window
        self._order_max = 0.0
        self._last_seq = 0
        self.head = GENESIS_HEAD
        self.barrier = 0
        self.frames_by_id: dict[str, Frame] = {}
        self.edge_set: set[Edge] = set()
        # built at first use, then kept current: a replay needs neither unless a receipt reads a
        # frame's relations (the audit computes none) or a place reads the order
        self._by_subject: dict[str, set[Edge]] | None = None
        self.obs: dict[int, ObsState] = {}
        self.sessions: dict[str, SessionState] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.boundary_versions: dict[str, int] = {}
        self._retiring: dict[str, int] = {}
        self._order: list[tuple[float, str]] | None = None  # (pos, id) of every frame, sorted

    # -- MindView

    @property
    def version(self) -> int:
        return self._version

    @property
    def clock(self) -> int:
        return self._clock

    @property
    def window(self) -> int:
        return self._window

    @property
    def order_max(self) -> float:
        return self._order_max

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def frame(self, frame_id: str) -> Frame | None:
        return self.frames_by_id.get(frame_id)

    def has_edge(self, edge: Edge) -> bool:
        return edge in self.edge_set

    def observation(self, seq: int) -> ObsState | None:
        return self.obs.get(seq)

    def session(self, session_id: str) -> SessionState | None:
        return self.sessions.get(session_id)

    def has_checkpoint(self, name: str) -> bool:
        return name in self.snapshots

    def checkpoint(self, name: str) -> Snapshot | None:
        return self.snapshots.get(name)

    def frames(self) -> Iterable[Frame]:
        return list(self.frames_by_id.values())

    def edges(self) -> Iterable[Edge]:
        return list(self.edge_set)

    def subject_edges(self, frame_id: str) -> list[Edge]:
        by_subject = self._by_subject
        if by_subject is None:
            by_subject = self._by_subject = {}
            for edge in self.edge_set:
                by_subject.setdefault(edge[0], set()).add(edge)
        return sorted(by_subject.get(frame_id, ()))

    def due_retirements(self, clock: int) -> list[str]:
        return sorted(fid for fid, deadline in self._retiring.items() if deadline <= clock)

    def frame_after(self, pos: float, frame_id: str) -> Frame | None:
        order = self._ordered()
        at = bisect_right(order, (pos, frame_id))
        return self.frames_by_id[order[at][1]] if at < len(order) else None

    def frame_before(self, pos: float, frame_id: str) -> Frame | None:
        order = self._ordered()
        at = bisect_left(order, (pos, frame_id))
        return self.frames_by_id[order[at - 1][1]] if at > 0 else None

    def _ordered(self) -> list[tuple[float, str]]:
        if self._order is None:
            self._order = sorted((f.pos, fid) for fid, f in self.frames_by_id.items())
        return self._order

    # -- mutation

    def note_event(self, seq: int) -> None:
        self._last_seq = max(self._last_seq, seq)

    def apply(self, changes: Changes, *, commit: bool) -> None:
        """Apply ``changes``; ``commit`` bumps the mind version (a tx or runtime commit)."""
        if commit:
            self._version = version = self._version + 1
            boundary_versions = self.boundary_versions
            for boundary in changes.written:
                boundary_versions[boundary] = version
            if changes.barrier:
                self.barrier = version
        if changes.frames:
            if self._order is not None:
                self._reorder(changes.frames, self._order)
            frames, retiring = self.frames_by_id, self._retiring
            for fid, frame in changes.frames.items():
                if frame is None:
                    frames.pop(fid, None)
                    retiring.pop(fid, None)
                    continue
                frames[fid] = frame
                if frame.lifecycle == "retiring" and frame.deadline is not None:
                    retiring[fid] = frame.deadline
                else:
                    retiring.pop(fid, None)
        if changes.edges:
            edge_set, by_subject = self.edge_set, self._by_subject
            for edge, present in changes.edges.items():
                if present:
                    edge_set.add(edge)
                    if by_subject is not None:
                        by_subject.setdefault(edge[0], set()).add(edge)
                elif edge in edge_set:
                    edge_set.discard(edge)
                    if by_subject is not None:
                        by_subject[edge[0]].discard(edge)
        if changes.observations:
            self.obs.update(changes.observations)
        if changes.checkpoints:
            for name, snap in changes.checkpoints.items():
                if snap is None:
                    self.snapshots.pop(name, None)
                else:
                    self.snapshots[name] = snap
        if changes.sessions:
            self.sessions.update(changes.sessions)
        if changes.order_max is not None:
            self._order_max = changes.order_max
        if changes.window is not None:
            self._window = changes.window
        if changes.clock is not None:
            self._clock = changes.clock
        self.head = chain_head(self.head, changes)

    def _reorder(self, changed: dict[str, Frame | None], order: list[tuple[float, str]]) -> None:
        """Keep ``order`` (``_order``) sorted through ``changed`` (before it is applied): a few
        moves by bisection, many (a renumber, a rollback) by sorting again."""
        frames = self.frames_by_id
        moves = []
        for fid, frame in changed.items():
            old = frames.get(fid)
            if old is None or frame is None or old.pos != frame.pos:
                moves.append((old, frame))
        if len(moves) > 64:
            kept = {fid: f.pos for fid, f in frames.items() if fid not in changed}
            kept.update((fid, f.pos) for fid, f in changed.items() if f is not None)
            self._order = sorted((pos, fid) for fid, pos in kept.items())
            return
        for old, new in moves:
            if old is not None:
                del order[bisect_left(order, (old.pos, old.id))]
            if new is not None:
                insort(order, (new.pos, new.id))
