"""The text of the encoding's lines the kept total and receipts count: a frame as the mind region
shows it (encoding.render.frame prints this), a relation, and an observation's inbox entry
(encoding.render.observation prints its head and whole form). The estimate (token_estimate.
text_units) is taken per line, so counting each line alone counts what the region shows
(docs/decisions.md, "The estimate counts chunks")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from morphz.graphemes import boundary
from morphz.ids import is_stored_id, make_ref
from morphz.mind.state import Frame
from morphz.token_estimate import text_units
from morphz.txlang.sexpr import quote

REASON_SHOWN = 200  # characters of a retiring frame's reason the mind region shows


def shown_reason(reason: str) -> str:
    """A retiring frame's reason as the mind region shows it: up to REASON_SHOWN characters,
    cut on a whole character and marked with an ellipsis (the whole one is in its tx event)."""
    if len(reason) <= REASON_SHOWN:
        return reason
    return reason[: boundary(reason, REASON_SHOWN - 1, -1)] + "…"


def frame_text(frame: Frame, left: int | None, marks: bool = True) -> str:
    """``frame`` in the mind region: ``(lifecycle ...)`` when it is not active, and while it
    retires ``left`` ticks and its reason; without ``marks`` the line as if it were active."""
    parts = [f"(frame {frame.id} (revision {frame.revision})"]
    if marks and frame.lifecycle != "active":
        parts.append(f"(lifecycle {frame.lifecycle})")
    if marks and left is not None:
        parts.append(f"(remaining-ticks {left})")
        if frame.reason:
            parts.append(f"(reason {quote(shown_reason(frame.reason))})")
    if frame.protected:
        parts.append("(protected)")
    if frame.sources:
        parts.append(f"(sources {' '.join(frame.sources)})")
    parts.append(f"(body {frame.body}))")
    return " ".join(parts)


def line_units(text: str) -> int:
    """The units a line counts where the region shows it: one space before it, a line break
    after it."""
    return text_units(f" {text}\n")


def edge_units(edge: tuple[str, str, str]) -> int:
    """The units of `` (S R O)`` in the mind region's relations."""
    subject, relation, obj = edge
    return text_units(f" ({subject} {relation} {obj})")


# the most characters an observation's meta takes in the inbox; a longer one is named, not shown
META_SHOWN = 1_000


def meta_text(seq: int, meta: Sequence[tuple[str, str]]) -> str:
    """What was kept with observation ``seq`` as meta (a tool result's tool, call and error; an
    import's speaker), as its inbox entry shows it, or nothing: each key with its value, or a
    note naming its size when it is longer than META_SHOWN characters (recall reads an event
    with its whole meta)."""
    if not meta:
        return ""
    items = " ".join(f"({k if is_stored_id(k) else quote(k)} {quote(v)})" for k, v in meta)
    if len(items) <= META_SHOWN:
        return f" (meta {items})"
    ref = make_ref(seq)
    return f' (meta-omitted "{len(items)} characters: read {ref} with recall for its meta")'


@dataclass(frozen=True, slots=True)
class Entry:
    """What an observation's inbox entry shows besides its text (encoding.render.observation
    prints it; its kept units count it): ``meta`` as (key, value text) in key order."""

    seq: int
    kind: str
    session: str
    time: str
    tick: int
    meta: Sequence[tuple[str, str]] = ()

    def head(self) -> str:
        return (
            f"(observation {make_ref(self.seq)} (kind {self.kind}) (session {self.session}) "
            f"(time {quote(self.time)}) (tick {self.tick}){meta_text(self.seq, self.meta)}"
        )

    def whole(self, text: str) -> str:
        """The entry showing ``text`` whole."""
        return f"{self.head()} (text {quote(text)}))"


def observation_units(entry: Entry, text: str) -> int:
    """What ``entry``'s line counts when its ``text`` is shown whole: kept with the observation
    (``observations.units``)."""
    return line_units(entry.whole(text))


def framing_units(seq: int, kind: str) -> int:
    """About what an entry counts besides its text: its framing with a typical session, time
    and tick (a preview's entry is counted from its text's units and this)."""
    return observation_units(Entry(seq, kind, "s1", "2026-01-01T00:00:00.000000+00:00", 100), "")
