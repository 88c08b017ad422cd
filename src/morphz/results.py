"""What the ContextDB API returns: receipts, status, the mind as shown, audit reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from morphz.mind.state import Edge, OpEffect


@dataclass(frozen=True, slots=True)
class Receipt:
    """A committed transaction."""

    tx_id: str
    event: str  # ref of the context_tx_committed event, e.g. "@e7"
    seq: int
    session: str
    base_version: int
    before_version: int
    after_version: int
    rebased: bool
    effects: tuple[OpEffect, ...]
    head: str

    @property
    def tokens_immediate(self) -> int:
        return sum(e.immediate for e in self.effects)

    @property
    def tokens_eventual(self) -> int:
        return sum(e.eventual for e in self.effects)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "tx_id": self.tx_id,
            "event": self.event,
            "seq": self.seq,
            "session": self.session,
            "base_version": self.base_version,
            "before_version": self.before_version,
            "after_version": self.after_version,
            "rebased": self.rebased,
            "changes": [e.to_dict() for e in self.effects],
            "tokens": {"immediate": self.tokens_immediate, "eventual": self.tokens_eventual},
            "head": self.head,
        }


@dataclass(frozen=True, slots=True)
class Status:
    context: str
    version: int
    clock: int
    last_seq: int
    window: int
    head: str
    frames: dict[str, int]  # by lifecycle: active, retiring, retired
    observations: dict[str, int]  # by state: active, retired
    protected: dict[str, int]  # {"frames": n, "observations": m}, across lifecycles
    sessions: int
    checkpoints: int
    running_activations: int
    pressure: dict[str, Any]  # level, tokens, figure kind and thresholds of the encoding

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "version": self.version,
            "clock": self.clock,
            "last_seq": self.last_seq,
            "window": self.window,
            "head": self.head,
            "frames": self.frames,
            "observations": self.observations,
            "protected": self.protected,
            "sessions": self.sessions,
            "checkpoints": self.checkpoints,
            "running_activations": self.running_activations,
            "pressure": self.pressure,
        }


@dataclass(frozen=True, slots=True)
class FrameView:
    id: str
    body: str
    revision: int
    lifecycle: str
    remaining_ticks: int | None
    sources: tuple[str, ...]
    protected: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "body": self.body,
            "revision": self.revision,
            "lifecycle": self.lifecycle,
            "remaining_ticks": self.remaining_ticks,
            "sources": list(self.sources),
            "protected": self.protected,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ObservationView:
    ref: str
    kind: str
    lifecycle: str
    protected: bool
    chars: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "kind": self.kind,
            "lifecycle": self.lifecycle,
            "protected": self.protected,
            "chars": self.chars,
        }


@dataclass(frozen=True, slots=True)
class Mind:
    """The mind of a context as an operator sees it (``morphz context show``)."""

    context: str
    version: int
    clock: int
    frames: tuple[FrameView, ...]  # in projection order
    relations: tuple[Edge, ...]
    checkpoints: tuple[tuple[str, int], ...]  # (name, version)
    observations: tuple[ObservationView, ...]
    sessions: tuple[tuple[str, str], ...]  # (id, attention)

    @property
    def order(self) -> list[str]:
        return [f.id for f in self.frames]

    def frame(self, frame_id: str) -> FrameView | None:
        return next((f for f in self.frames if f.id == frame_id), None)

    def observation(self, ref: str) -> ObservationView | None:
        return next((o for o in self.observations if o.ref == ref), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "version": self.version,
            "clock": self.clock,
            "frames": [f.to_dict() for f in self.frames],
            "relations": [list(e) for e in self.relations],
            "order": self.order,
            "checkpoints": [{"name": n, "version": v} for n, v in self.checkpoints],
            "observations": [o.to_dict() for o in self.observations],
            "sessions": [{"id": s, "attention": a} for s, a in self.sessions],
        }


@dataclass(slots=True)
class AuditReport:
    context: str
    events: int = 0
    commits: int = 0
    stored_head: str = ""
    replayed_head: str = ""
    differences: list[str] = field(default_factory=list)
    # findings that are no difference of the mind (the replay still equals the store), each
    # with what to do: the tables killed recall rebuilds left
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "ok": self.ok,
            "events": self.events,
            "commits": self.commits,
            "stored_head": self.stored_head,
            "replayed_head": self.replayed_head,
            "differences": self.differences,
            "warnings": self.warnings,
        }
