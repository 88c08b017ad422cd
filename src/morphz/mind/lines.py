"""The text of the encoding's lines the kept total and receipts count: a frame as the mind region
shows it (encoding.render.frame prints this), a relation, and an observation's inbox entry as
its token estimate stands it in. The estimate (token_estimate.text_units) is taken per line, so
counting each line alone counts what the region shows (docs/decisions.md, "The estimate counts
chunks")."""

from __future__ import annotations

from morphz.graphemes import boundary
from morphz.ids import make_ref
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


def observation_units(seq: int, kind: str, text: str, *, session: str, time: str, tick: int) -> int:
    """What ``seq``'s inbox entry counts when its ``text`` is shown whole (encoding.render.
    observation): kept with the observation (``observations.units``). A tool's meta, which the
    entry shows too, is not counted."""
    head = f"(observation {make_ref(seq)} (kind {kind}) (session {session}) (time {quote(time)})"
    return line_units(f"{head} (tick {tick}) (text {quote(text)}))")


def framing_units(seq: int, kind: str) -> int:
    """About what an entry counts besides its text: its framing with a typical session, time
    and tick (a preview's entry is counted from its text's units and this)."""
    return observation_units(
        seq, kind, "", session="s1", time="2026-01-01T00:00:00.000000+00:00", tick=100
    )
