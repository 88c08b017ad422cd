"""Canonical rendering of the encoding's items as S-expression text (pure, deterministic)."""

from __future__ import annotations

from collections.abc import Sequence

from morphz.graphemes import boundary
from morphz.ids import make_ref
from morphz.mind.lifecycle import (
    DEFAULT_PREVIEW_THRESHOLD,
    HEAD_CHARS,
    TAIL_CHARS,
    remaining_ticks,
)
from morphz.mind.lines import frame_text
from morphz.mind.state import Edge, Frame
from morphz.store.active_base import ActiveObservation
from morphz.txlang.sexpr import quote


def observation(obs: ActiveObservation, threshold: int = DEFAULT_PREVIEW_THRESHOLD) -> str:
    """One inbox entry: immutable content only (so the inbox prefix never changes), including
    the tick of the cognitive clock it arrived at (its age is the kernel's clock minus that):
    mind.lines.Entry, whose whole form the observation's kept units count."""
    entry = obs.entry()
    if len(obs.text) <= threshold:
        return entry.whole(obs.text)
    # head + tail <= 3/4 of the threshold < the text: they never overlap, omitted > 0
    text = obs.text
    first = boundary(text, min(HEAD_CHARS, threshold // 2), -1)
    start = boundary(text, len(text) - min(TAIL_CHARS, threshold // 4), 1)
    omitted = start - first
    ref = make_ref(obs.seq)
    tail = quote(text[start:])
    return (
        f"{entry.head()} (preview (total-chars {len(text)}) (head {quote(text[:first])}) "
        f'(omitted "{omitted} characters: read {ref} with recall for the full text") '
        f"(tail {tail})))"
    )


def observation_state(obs: ActiveObservation, cited: int) -> str | None:
    """The mutable facts of one inbox item, or None when it has none to state (unprotected and
    cited by no frame): listing only exceptions keeps the region small and stable."""
    if not obs.protected and not cited:
        return None
    parts = [make_ref(obs.seq)]
    if obs.protected:
        parts.append("(protected)")
    if cited:
        parts.append(f"(cited-by {cited})")
    return "(" + " ".join(parts) + ")"


def frame(f: Frame, clock: int) -> str:
    """A frame in the mind region; ``(lifecycle ...)`` is stated only when it is not active
    (mind.lines.frame_text, which the kept total's estimate counts)."""
    return frame_text(f, remaining_ticks(f, clock))


def relations(edges: Sequence[Edge], head: str = "relations") -> str:
    """``(head (S RELATION O) ...)``: the mind's relations, or an increment's edges."""
    return f"({head}" + "".join(f" ({s} {r} {o})" for s, r, o in edges) + ")"


def names(head: str, items: Sequence[str]) -> str:
    return f"({head}" + "".join(f" {item}" for item in items) + ")"


def region(name: str, lines: Sequence[str]) -> str:
    """``(name`` then one item per line, closed right after the last item."""
    if not lines:
        return f"({name})"
    return f"({name}\n " + "\n ".join(lines) + ")"
