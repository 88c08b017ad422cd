"""ContextDelta (opt-in per model): between the tool calls of one activation, each request is the
previous request unchanged plus a structured increment of what arrived since, so a provider's
prefix cache keeps hitting even when it only reuses whole earlier messages.

The first request is a full encoding (the seed). An increment holds new observations, new frames,
the observation states and relations as they now are, and a fresh kernel, then ``(evaluate)``.
When something already sent changes (an observation retired, a frame revised, retired, restored
or moved, a relation removed, a rollback), increments would contradict it: the seed is rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass

from morphz.encoding import render
from morphz.encoding.compile import ActiveState, Encoding


@dataclass(slots=True)
class DeltaState:
    observations: dict[int, bool]  # seq -> protected, as sent
    frames: dict[str, tuple[int, str, bool, float]]  # id -> (revision, lifecycle, protected, pos)
    relations: set[tuple[str, str, str]]
    checkpoints: tuple[str, ...]


def _snapshot(state: ActiveState) -> DeltaState:
    return DeltaState(
        {o.seq: o.protected for o in state.observations},
        {f.id: (f.revision, f.lifecycle, f.protected, f.pos) for f in state.frames},
        set(state.relations),
        state.checkpoints,
    )


class DeltaEncoder:
    """Builds the request sequence of one activation."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.sent: DeltaState | None = None
        self.rebuilds = 0
        self.increments = 0

    def next(self, encoding: Encoding) -> str:
        """The request for ``encoding`` (a fresh compile of the current state)."""
        state = encoding.state
        if self.text is None or self.sent is None or self._contradicts(state):
            self.text = encoding.text
            self.sent = _snapshot(state)
            self.rebuilds += 1
            return self.text
        self.text += self._increment(encoding, self.sent)
        self.sent = _snapshot(state)
        self.increments += 1
        return self.text

    def _contradicts(self, state: ActiveState) -> bool:
        sent = self.sent
        assert sent is not None
        active = {o.seq for o in state.observations}
        if any(seq not in active for seq in sent.observations):
            return True
        frames = {f.id: (f.revision, f.lifecycle, f.protected, f.pos) for f in state.frames}
        for fid, was in sent.frames.items():
            now = frames.get(fid)
            if now is None or now[0] != was[0] or now[1] != was[1] or now[3] != was[3]:
                return True
        if not sent.relations <= set(state.relations):
            return True
        return state.checkpoints != sent.checkpoints and not set(sent.checkpoints) <= set(
            state.checkpoints
        )

    def _increment(self, encoding: Encoding, sent: DeltaState) -> str:
        state = encoding.state
        lines = [f"(mind-version {state.version}) (clock {state.clock})"]
        new_obs = [o for o in state.observations if o.seq not in sent.observations]
        threshold = encoding.options.preview_threshold
        lines.extend(f"(arrived {render.observation(o, threshold)})" for o in new_obs)
        new_frames = [f for f in state.frames if f.id not in sent.frames]
        lines.extend(f"(derived {render.frame(f, state.clock)})" for f in new_frames)
        changed = [
            f for f in state.frames if f.id in sent.frames and sent.frames[f.id][2] != f.protected
        ]
        lines.extend(f"(updated {render.frame(f, state.clock)})" for f in changed)
        lines.append(encoding.region("observation-state"))
        added = sorted(set(state.relations) - sent.relations)
        if added:
            lines.append("(related" + "".join(f" ({s} {r} {o})" for s, r, o in added) + ")")
        lines.append(encoding.region("kernel"))
        return "\n" + render.region("context-delta", lines) + "\n(evaluate)\n"
