"""Reads of the active state for the Context Encoding: every query here is bounded by what is in
view (active observations, frames not retired), never by the length of the history."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from morphz.mind.state import Edge, Frame
from morphz.store.active_base import (
    ActiveObservation,
    SessionWindow,
    StoredSettings,
    decode_setting,
    meta_items,
)
from morphz.store.base import SessionRow
from morphz.store.sqlite_rows import read_frames

RETIRED_NAMED = 5  # retired sessions the directory names (the latest by sequence)


class SqliteActive:
    def __init__(self, conn: sqlite3.Connection, cid: str) -> None:
        self.conn = conn
        self.cid = cid

    def observations(self) -> list[ActiveObservation]:
        """Active observations in sequence order, with their mutable attributes."""
        rows = self.conn.execute(
            "SELECT o.seq, e.kind, e.session_id, e.time, e.text, o.protected, e.clock, e.meta "
            "FROM observations o INDEXED BY observations_active "
            "JOIN events e ON e.context_id = o.context_id AND e.seq = o.seq "
            "WHERE o.context_id = ? AND o.lifecycle = 'active' ORDER BY o.seq",
            (self.cid,),
        )
        cid = self.cid
        return [
            ActiveObservation(
                seq,
                kind,
                session,
                time,
                text or "",
                bool(protected),
                clock,
                meta_items(cid, seq, meta),
            )
            for seq, kind, session, time, text, protected, clock, meta in rows
        ]

    def session_window(self, current: str, horizon: str | None, count: int) -> SessionWindow:
        """At most ``count`` sessions: the current one, then others whose attention is active
        and that were last active at or after ``horizon`` (ISO with offset; None: no window),
        most recent first; and the counts of the rest. Bounded by the sessions inside the
        window, not by all the context ever had: the window is a range of ``sessions_recent``,
        and the totals per attention are kept by triggers in ``session_counts``. Without a
        window (None) every active session is a candidate."""
        since = _utc(horizon)
        # named parameters bound from a mapping: Python 3.12 deprecates binding numbered ones
        # (?1) from a sequence, and 3.14 refuses it
        inside = "" if since is None else "AND last_time >= :since "
        columns = "session_id, attention, created_seq, last_seq, last_time"
        mine = self.conn.execute(
            f"SELECT {columns} FROM sessions WHERE context_id = :cid AND session_id = :current",
            {"cid": self.cid, "current": current},
        ).fetchall()
        others = self.conn.execute(
            f"SELECT {columns} FROM sessions WHERE context_id = :cid AND attention = 'active' "
            f"AND session_id <> :current {inside}ORDER BY last_seq DESC, session_id LIMIT :n",
            {"cid": self.cid, "since": since, "current": current, "n": max(0, count - len(mine))},
        ).fetchall()
        totals = self.session_counts()
        for _, attention, *_ in mine:  # the counts are of the other sessions
            totals[attention] = totals.get(attention, 0) - 1
        active = totals.get("active", 0)
        in_window = active
        if since is not None:
            (in_window,) = self.conn.execute(
                "SELECT count(*) FROM sessions WHERE context_id = :cid AND attention = 'active' "
                "AND session_id <> :current AND last_time >= :since",
                {"cid": self.cid, "since": since, "current": current},
            ).fetchone()
        found = [
            SessionRow(sid, att, first, last, time, 0)
            for sid, att, first, last, time in mine + others
        ]
        latest = self.conn.execute(
            "SELECT session_id FROM sessions WHERE context_id = :cid AND attention = 'retired' "
            "AND session_id <> :current ORDER BY last_seq DESC, session_id LIMIT :n",
            {"cid": self.cid, "current": current, "n": RETIRED_NAMED},
        ).fetchall()
        retired = totals.get("retired", 0)
        named = tuple(sid for (sid,) in latest)
        return SessionWindow(found, retired, active - in_window, in_window, named)

    def session_counts(self) -> dict[str, int]:
        """Sessions per attention, as the triggers of migration 0006 keep them (the session
        directory's totals; the audit checks them against the sessions)."""
        rows = self.conn.execute(
            "SELECT attention, n FROM session_counts WHERE context_id = ? AND n <> 0", (self.cid,)
        )
        return dict(rows.fetchall())

    def last_active(self) -> str | None:
        """The context's last activity: when the store recorded its latest event (the
        ``last_time`` of the session that wrote last, by sequence, not the latest
        ``last_time``, which one write while the clock ran ahead would hold for as long as its
        session stays untouched). One step down the events' (context_id, seq) index; None
        without events."""
        row = self.conn.execute(
            "SELECT recorded_at FROM events WHERE context_id = ? ORDER BY seq DESC LIMIT 1",
            (self.cid,),
        ).fetchone()
        return None if row is None else str(row[0])

    def frames(self) -> list[Frame]:
        """Active and retiring frames in projection order."""
        where = "INDEXED BY frames_visible WHERE context_id = ? AND lifecycle <> 'retired' "
        return read_frames(self.conn, self.cid, where + "ORDER BY pos, frame_id", (self.cid,))

    def frame_tokens(self) -> int:
        """The estimated tokens of the frames in view, their retiring marks and their relations
        (mind.lifecycle.kept_tokens and edge_tokens, summed), as write_changes keeps the total
        (migrations 0009, 0012 and 0013)."""
        row = self.conn.execute(
            "SELECT n FROM frame_tokens WHERE context_id = ?", (self.cid,)
        ).fetchone()
        return int(row[0]) if row else 0

    def frames_and_budget(self) -> tuple[int, dict[str, Any] | None]:
        """The frame tokens in view and the stored budget setting (None: the default), in one
        statement: what a growing commit checks (the budget refusal)."""
        n, budget = self.conn.execute(
            "SELECT (SELECT n FROM frame_tokens WHERE context_id = :cid), (SELECT value FROM "
            "context_settings WHERE context_id = :cid AND name = 'budget')",
            {"cid": self.cid},
        ).fetchone()
        return int(n or 0), None if budget is None else decode_setting(self.cid, "budget", budget)

    def relations(self) -> list[Edge]:
        """Edges whose subject is in view (CROSS JOIN keeps the frames outer: the planner
        would otherwise scan the visible frames once per relation)."""
        rows = self.conn.execute(
            "SELECT r.subject, r.relation, r.object FROM frames f INDEXED BY frames_visible "
            "CROSS JOIN relations r ON r.context_id = f.context_id AND r.subject = f.frame_id "
            "WHERE f.context_id = ? AND f.lifecycle <> 'retired' "
            "ORDER BY r.subject, r.relation, r.object",
            (self.cid,),
        )
        return [(s, r, o) for s, r, o in rows]

    def checkpoint_names(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT name FROM checkpoints WHERE context_id = ? ORDER BY name", (self.cid,)
        )
        return [r[0] for r in rows]

    def cited_by(self, refs: list[str]) -> dict[str, int]:
        """How many frames cite each of ``refs``."""
        out: dict[str, int] = {}
        for start in range(0, len(refs), 500):
            chunk = refs[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(
                f"SELECT source, count(*) FROM frame_sources WHERE context_id = ? "
                f"AND source IN ({marks}) GROUP BY source",
                (self.cid, *chunk),
            )
            out.update((source, count) for source, count in rows)
        return out

    def settings(self) -> StoredSettings:
        """Every setting, each decoded as it is read (a row that is not a JSON object: a
        StoreError for that setting's readers)."""
        return StoredSettings(self.cid, self.setting_rows())

    def setting_rows(self) -> list[tuple[str, str]]:
        """Every setting as stored: (name, JSON text)."""
        rows = self.conn.execute(
            "SELECT name, value FROM context_settings WHERE context_id = ? ORDER BY name",
            (self.cid,),
        )
        return [(name, value) for name, value in rows]

    def put_setting(self, name: str, value: Any) -> None:
        self.conn.execute(
            "INSERT INTO context_settings VALUES (?, ?, ?) ON CONFLICT (context_id, name) "
            "DO UPDATE SET value = excluded.value",
            (self.cid, name, json.dumps(value, sort_keys=True)),
        )


def _utc(moment: str | None) -> str | None:
    """``moment`` (ISO with offset) as the store writes times: UTC, ``isoformat``. Past the
    years a datetime holds, it is before every time (None: no window) or after every time."""
    if moment is None:
        return None
    parsed = datetime.fromisoformat(moment)
    try:
        return parsed.astimezone(UTC).isoformat()
    except OverflowError:
        return None if parsed.year == 1 else f"{datetime.max.isoformat()}+00:00~"
