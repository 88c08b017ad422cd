"""ContextDelta (opt-in per model): between the tool calls of one activation, each request is the
previous request unchanged plus a structured increment of what arrived since, so a provider's
prefix cache keeps hitting even when it only reuses whole earlier messages.

The first request is a full encoding (the seed). An increment states only what changed since the
last request: new observations, new frames and frames whose rendering changed (protection, or
the remaining ticks of a retiring frame), new relations and checkpoints, and the entries of
observation-state, session-directory, kernel and evaluation-environment that changed, then
``(evaluate)``. The kernel's pressure in an increment is that of the whole request sent (seed
and increments), not of the fresh encoding.

What arrived in an increment may change in a later one: a frame derived since the seed and then
revised or retiring is restated (``updated``); observations and frames that left the view are
named (``retired``), edges removed (``unrelated``), checkpoints dropped
(``dropped-checkpoints``). A change to the seed's own content (one of its observations retired,
one of its frames revised, retired, restored or moved, one of its relations removed, one of its
checkpoints dropped; a frame's body or sources changed without a new revision, as a rollback
does) rebuilds the seed, and so does a new evaluation profile or cognitive-capabilities region,
or a request for another session (the seed's directory lists its session first).
So does a change to the mind order that increments cannot
state (they append new frames at its end): moving a frame an increment brought, or a frame that
comes back, restored or placed, before frames already sent, or an observation restored before
observations already sent. And so does a new preview threshold
(the context's view), which renders the inbox anew.

Increments keep what they brought even after it left the view, so the request grows faster than
the fresh encoding. An increment that would put the request at a higher pressure level than the
fresh encoding's is not sent, and the fresh encoding becomes the new seed; so is one that would
bring the request to critical pressure. So the level the kernel states is always that of the
current state, which the agent's maintenance changes (retiring what an increment brought lowers
it at once), while its tokens are those of the request sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from morphz.capacity import LEVELS, Pressure
from morphz.encoding import render
from morphz.encoding.blocks import CacheLayout, encoding_layout
from morphz.encoding.compile import ActiveState, Encoding, pressure_figures, sent_pressure
from morphz.ids import make_ref
from morphz.mind.state import Frame

# regions whose items an increment restates when they change, and the increment's name for them
_TRACKED = {
    "observation-state": "observation-state-update",
    "session-directory": "session-directory-update",
    "kernel": "kernel-update",
    "evaluation-environment": "environment-update",
}


# a frame as sent: (revision, lifecycle, pos, body, sources). A rollback can bring back another
# body under the same revision number, so the revision alone does not identify what was shown.
# what a frame shows, its place left out: the order is compared by position among the frames
# (a place that leaves it as it was changes the sort key, not what a model reads)
_Shown = tuple[int, str, str, tuple[str, ...]]


def _shown(f: Frame) -> _Shown:
    return (f.revision, f.lifecycle, f.body, f.sources)


@dataclass(slots=True)
class DeltaState:
    observations: dict[int, bool]  # seq -> protected, as sent
    frames: dict[str, _Shown]  # id -> what the seed and increments show of it
    frame_texts: dict[str, str]  # id -> the rendered frame, as sent
    relations: set[tuple[str, str, str]]
    checkpoints: tuple[str, ...]
    items: dict[str, dict[str, str]]  # tracked region -> item key -> canonical item text


def _key(item: str, region: str) -> str:
    """An item's key: its head (a ref, a kernel field), or for a session-directory entry its
    first two words (``session ops``); the kernel's ``(session S)`` is the field ``session``."""
    first = item.find(" ")
    if first < 0:
        return item[1:].rstrip(")")
    head = item[1:first]
    if head != "session" or region != "session-directory":
        return head
    second = item.find(" ", first + 1)
    name = item[first + 1 :] if second < 0 else item[first + 1 : second]
    return f"session {name.rstrip(')')}"


def _snapshot(encoding: Encoding) -> DeltaState:
    """What ``encoding`` shows, from the items its compile rendered (nothing is read again)."""
    state = encoding.state
    return DeltaState(
        {o.seq: o.protected for o in state.observations},
        {f.id: _shown(f) for f in state.frames},
        dict(zip((f.id for f in state.frames), encoding.frame_lines, strict=True)),
        set(state.relations),
        state.checkpoints,
        {name: {_key(item, name): item for item in encoding.items[name]} for name in _TRACKED},
    )


class DeltaEncoder:
    """Builds the request sequence of one activation."""

    def __init__(
        self, message_tokens: int = 0, previous: tuple[str, CacheLayout] | None = None
    ) -> None:
        """``message_tokens``: what a provider adds around each increment when increments
        travel as messages of their own (counted in the pressure of the request sent).
        ``previous``: the last request a provider answered before this sequence (its text and
        layout), which the first seed is anchored on as every later seed is on the request
        before it (a new activation, or a new sequence within one)."""
        self.message_tokens = message_tokens
        self._previous = previous
        self.text: str | None = None
        self.sent: DeltaState | None = None  # what the request shows: the seed and increments
        self.seed: DeltaState | None = None  # what the seed alone shows
        self.rebuilds = 0
        self.increments = 0
        # what the last request was: "increment", or why it was a seed: "first", "seed-changed"
        # (what the seed shows changed, or an order increments cannot state),
        # "preview-threshold", "pressure-level" (an increment would raise it), "critical"
        self.last: str | None = None
        self.pressure: Pressure | None = None  # of the last request, as its kernel states it
        self._seed_layout: CacheLayout | None = None
        self._cuts: list[int] = []  # where each increment of the current request starts
        self._threshold = 0  # the seed's preview threshold
        self._harness: tuple[str | None, str | None, str] = (None, None, "")  # see _harness

    @property
    def layout(self) -> CacheLayout:
        """The cache layout of the last request (see :mod:`morphz.encoding.blocks`)."""
        if self.text is None or self._seed_layout is None:
            raise ValueError("no request was built yet")
        return self._seed_layout.extended(len(self.text), tuple(self._cuts))

    def next(self, encoding: Encoding) -> str:
        """The request for ``encoding`` (a fresh compile of the current state)."""
        if self.text is None or self.sent is None:
            return self._reseed(encoding, "first")
        if self._touches_seed(encoding.state) or _harness(encoding) != self._harness:
            return self._reseed(encoding, "seed-changed")
        if encoding.view.preview_threshold != self._threshold:  # the inbox renders anew
            return self._reseed(encoding, "preview-threshold")
        now = _snapshot(encoding)
        changes = _changes(encoding, self.sent, now)
        # the kernel states the pressure of the request sent, increments included: measured
        # with the figures left out, like the compile does (sent_pressure adds their slack)
        now.items["kernel"]["pressure"] = "(pressure)"
        framing = self.message_tokens * (len(self._cuts) + 1)  # this increment's included
        sent = sent_pressure(encoding, self.text + _increment(changes, self.sent, now), framing)
        now.items["kernel"]["pressure"] = f"(pressure {pressure_figures(sent)})"
        if sent.level == "critical":
            return self._reseed(encoding, "critical")
        if _rank(sent) > _rank(encoding.pressure):
            return self._reseed(encoding, "pressure-level")
        increment = _increment(changes, self.sent, now)
        self.pressure = sent
        self._cuts.append(len(self.text))
        self.text += increment
        self.sent = now
        self.increments += 1
        self.last = "increment"
        return self.text

    def _reseed(self, encoding: Encoding, reason: str) -> str:
        """Start the request again from ``encoding`` (its cache marks anchored to where the
        previous request's bytes still match), for ``reason`` (see :attr:`last`)."""
        self.last = reason
        layout = encoding_layout(encoding, seed=True)
        previous = self._previous
        if self.text is not None and self._seed_layout is not None:
            previous = (self.text, self.layout)
        if previous is not None:
            layout = layout.anchored(encoding.text, previous[0], previous[1].marks)
        self.text, self.pressure = encoding.text, encoding.pressure
        self.sent = self.seed = _snapshot(encoding)
        self._threshold, self._harness = encoding.view.preview_threshold, _harness(encoding)
        self._seed_layout, self._cuts = layout, []
        self.rebuilds += 1
        return self.text

    def _touches_seed(self, state: ActiveState) -> bool:
        """Whether ``state`` changed what the seed shows, or an order increments cannot state
        (a frame sent since moved; a frame restored or placed before what was sent; an
        observation restored before what was sent)."""
        seed, sent = self.seed, self.sent
        assert seed is not None and sent is not None
        active = {o.seq for o in state.observations}
        if any(seq not in active for seq in seed.observations):
            return True
        # an observation new to the request is appended to the inbox: it must be the newest
        newest = max(sent.observations, default=None)
        if newest is not None and any(
            seq < newest for seq in active if seq not in sent.observations
        ):
            return True
        frames = {f.id: _shown(f) for f in state.frames}
        if any(frames.get(fid) != was for fid, was in seed.frames.items()):
            return True
        if _moved([f.id for f in state.frames], sent.frames):
            return True
        if not seed.relations <= set(state.relations):
            return True
        return not set(seed.checkpoints) <= set(state.checkpoints)


def _moved(order: list[str], sent: dict[str, _Shown]) -> bool:
    """Whether the mind ``order`` (ids in projection order) differs from what the request
    shows in a way increments cannot state: a frame sent moved among the others sent, or a
    frame new to the request (appended to the mind) stands before one sent. ``sent`` is in
    the order the request shows."""
    kept = [fid for fid in order if fid in sent]
    present = set(order)
    if kept != [fid for fid in sent if fid in present]:
        return True
    return bool(kept) and any(fid not in sent for fid in order[: order.index(kept[-1])])


def _harness(encoding: Encoding) -> tuple[str | None, str | None, str]:
    """What the seed shows that no increment restates: the evaluation profile, the
    capabilities, and the session the request is for (the directory lists it first)."""
    return encoding.options.profile, encoding.options.capabilities, encoding.options.session


def _changes(encoding: Encoding, sent: DeltaState, now: DeltaState) -> list[str]:
    """What arrived since ``sent``: observations, frames new or re-rendered, relations and
    checkpoints (the increment's lines before the updates of the tracked regions)."""
    state = encoding.state
    threshold = encoding.view.preview_threshold
    lines = [
        f"(arrived {render.observation(o, threshold)})"
        for o in state.observations
        if o.seq not in sent.observations
    ]
    for fid, text in now.frame_texts.items():
        if fid not in sent.frames:
            lines.append(f"(derived {text})")
        elif sent.frame_texts[fid] != text:  # protection, or a retiring frame's ticks
            lines.append(f"(updated {text})")
    added = sorted(set(state.relations) - sent.relations)
    if added:
        lines.append(render.relations(added, "related"))
    had = set(sent.checkpoints)
    new_checkpoints = [c for c in state.checkpoints if c not in had]
    if new_checkpoints:
        lines.append(render.names("checkpointed", new_checkpoints))
    return lines + _removals(sent, now, set(state.relations))


def _removals(sent: DeltaState, now: DeltaState, relations: set[tuple[str, str, str]]) -> list[str]:
    """What an increment brought and is gone now (the seed's own content never is: a change to
    it rebuilds): observations and frames out of view, edges, checkpoints."""
    lines = []
    gone = [make_ref(seq) for seq in sent.observations if seq not in now.observations]
    gone += [fid for fid in sent.frames if fid not in now.frames]
    if gone:
        lines.append(f"(retired {' '.join(gone)})")
    removed = sorted(sent.relations - relations)
    if removed:
        lines.append(render.relations(removed, "unrelated"))
    kept = set(now.checkpoints)
    dropped = [c for c in sent.checkpoints if c not in kept]
    if dropped:
        lines.append(render.names("dropped-checkpoints", dropped))
    return lines


def _increment(changes: list[str], sent: DeltaState, now: DeltaState) -> str:
    """The increment's text: ``changes``, then the items of the tracked regions that differ."""
    lines = list(changes)
    for region, name in _TRACKED.items():
        update = _changed(sent.items[region], now.items[region])
        if update:
            lines.append(f"({name} {' '.join(update)})")
    return "\n" + render.region("context-delta", lines) + "\n(evaluate)\n"


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The items of ``after`` that differ from ``before``; an entry that disappeared (an
    observation no longer protected nor cited, a session no longer shown, the exclusion note)
    is restated as its key alone: ``(@e12)``, ``(session ops)``, ``(excluded)``. Only those
    regions lose entries: the kernel and the environment always have every one, so there an
    entry with nothing after its head, like ``(running-activations)``, is one that is empty."""
    out = [text for key, text in after.items() if before.get(key) != text]
    out.extend(f"({key})" for key in before if key not in after)
    return out


def _rank(pressure: Pressure) -> int:
    return LEVELS.index(pressure.level)
