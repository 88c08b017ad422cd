"""The session directory's working set: which sessions the encoding shows, and how much.

The current session comes first, always in full. The others follow by most recent activity;
a session is left out when its attention is retired, when it was last active before the time
window (default 24 hours before the compile's time, or without one before the context's last
activity), or beyond the count (default 50). Within the directory's token budget
sessions are shown in full (their active inbox refs and running work); past it they are demoted
to metadata, and past that omitted. A closing note says what was left out and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from morphz.encoding.tokens import estimate_tokens
from morphz.store.active_base import ActiveObservation, SessionWindow
from morphz.store.base import ActivationRow, SessionRow
from morphz.txlang.sexpr import quote

if TYPE_CHECKING:
    from morphz.encoding.view import View

MAX_REFS = 20  # inbox refs listed for a session shown in full


@dataclass(slots=True)
class SessionPlan:
    entries: list[tuple[str, str, str]] = field(default_factory=list)  # (id, level, rendered)
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> count
    retired_latest: tuple[str, ...] = ()  # retired sessions named (restore-session takes ids)

    def lines(self) -> tuple[str, ...]:
        """The directory's items: one per session shown, then the note of what was left out
        (naming the most recently active retired sessions, which a model may restore)."""
        lines = [text for _, _, text in self.entries]
        if self.excluded:
            why = " ".join(self._reason(reason, n) for reason, n in sorted(self.excluded.items()))
            lines.append(f"(excluded {why})")
        return tuple(lines)

    def _reason(self, reason: str, n: int) -> str:
        if reason == "retired" and self.retired_latest:
            return f"(retired {n} (latest {' '.join(self.retired_latest)}))"
        return f"({reason} {n})"

    def level(self, session_id: str) -> str:
        return next((lvl for sid, lvl, _ in self.entries if sid == session_id), "omitted")

    def to_dict(self) -> dict[str, Any]:
        return {
            "shown": [{"session": sid, "level": lvl} for sid, lvl, _ in self.entries],
            "excluded": dict(sorted(self.excluded.items())),
            "retired_latest": list(self.retired_latest),
        }


def _parse(moment: str | None) -> datetime | None:
    if not moment:
        return None
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _full(row: SessionRow, refs: Sequence[str], running: int) -> str:
    shown = " ".join(refs[-MAX_REFS:])
    more = f" (more-refs {len(refs) - MAX_REFS})" if len(refs) > MAX_REFS else ""
    return (
        f"(session {row.session_id} (level full) (attention {row.attention}) "
        f"(last-active {quote(row.last_time)}) (running {running}) (inbox{' ' if shown else ''}"
        f"{shown}){more})"
    )


def _metadata(row: SessionRow) -> str:
    return (
        f"(session {row.session_id} (level metadata) (attention {row.attention}) "
        f"(last-active {quote(row.last_time)}))"
    )


def plan_sessions(
    window: SessionWindow,
    observations: Sequence[ActiveObservation],
    running: Sequence[ActivationRow],
    current: str,
    view: View,
) -> SessionPlan:
    """The directory for the sessions the store selected (:meth:`ActiveStore.session_window`:
    the current one, then the most recent inside the time window, up to the count), shown in
    full, then as metadata, within the directory's token budget. The current session is always
    shown in full; for the others the level only falls with recency: once one is shown as
    metadata no older one is shown in full, and once one is left out every older one is too."""
    refs: dict[str, list[str]] = {}
    for obs in observations:
        refs.setdefault(obs.session_id, []).append(f"@e{obs.seq}")
    busy: dict[str, int] = {}
    for act in running:
        busy[act.session_id] = busy.get(act.session_id, 0) + 1
    plan = SessionPlan(retired_latest=window.retired_latest)
    others = sum(1 for row in window.rows if row.session_id != current)
    for reason, n in (
        ("retired", window.retired),
        ("inactive-beyond-window", window.inactive),
        ("beyond-count", window.in_window - others),
    ):
        if n > 0:
            plan.excluded[reason] = n
    spent, richest = 0, "full"  # levels only fall with recency: no older session gets more
    for row in window.rows:
        text, level = "", richest
        if row.session_id == current or level == "full":
            text = _full(row, refs.get(row.session_id, []), busy.get(row.session_id, 0))
            level = "full"
            if row.session_id != current and spent + estimate_tokens(text) > view.session_tokens:
                level = richest = "metadata"
        if row.session_id != current and level == "metadata":
            text = _metadata(row)
            if spent + estimate_tokens(text) > view.session_tokens:
                level = richest = "omitted"
        if level == "omitted":
            plan.excluded["over-token-budget"] = plan.excluded.get("over-token-budget", 0) + 1
            continue
        spent += estimate_tokens(text)
        plan.entries.append((row.session_id, level, text))
    return plan


def horizon(view: View, now: str | None, last_active: Callable[[], str | None]) -> str | None:
    """The start of the session time window (ISO, with offset): ``view.session_hours`` before
    ``now``, or, when ``now`` is not a time with an offset (a compile without a clock: free
    text), before the context's last activity (``last_active()``: when its latest event, by
    sequence, was recorded), so the same state gives the same window. None: no window (no
    session yet, or a window starting before year 1)."""
    moment = _parse(now)
    if moment is None:
        moment = _parse(last_active())
    if moment is None:
        return None
    try:
        return (moment - timedelta(hours=view.session_hours)).isoformat()
    except OverflowError:  # the window starts before year 1: every session is inside it
        return None
