"""SQLite read and write units of work for one context (all SQL of the projection lives here)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from morphz.errors import StoreError
from morphz.events import Event, make_event
from morphz.mind.lifecycle import edge_tokens, in_view, retiring_marks, view_tokens
from morphz.mind.state import Changes, Edge, Frame, ObsState, SessionState, Snapshot
from morphz.recall.documents import time_us
from morphz.store.active_base import damaged_event
from morphz.store.base import ContextRow
from morphz.store.sqlite_active import SqliteActive
from morphz.store.sqlite_recall import SqliteRecall
from morphz.store.sqlite_rows import FRAME_COLS, frame_from_row, read_frames, undecodable_event
from morphz.store.sqlite_runtime import RuntimeRows, RuntimeWrites

# UTC microseconds of an event time ("YYYY-MM-DDTHH:MM:SS[.ffffff]+HH:MM", as Python writes it):
# the whole seconds from the text without its fraction (offset kept), the microseconds from the
# fraction's six digits (SQLite's own fraction arithmetic rounds to the millisecond)
_SQL_TIME_US = (
    "(CAST(strftime('%s', substr(time, 1, 19) || CASE WHEN substr(time, 20, 1) = '.' "
    "THEN substr(time, 27) ELSE substr(time, 20) END) AS INTEGER) * 1000000 + "
    "CASE WHEN substr(time, 20, 1) = '.' THEN CAST(substr(time, 21, 6) AS INTEGER) ELSE 0 END)"
)
EVENT_BATCH = 1000  # events read per query by events()
_EVENT_COLS = (
    "context_id, seq, kind, session_id, time, recorded_at, text, meta, payload, "
    "version, clock, head"
)


def _frame_params(cid: str, f: Frame) -> tuple[Any, ...]:
    return (
        cid,
        f.id,
        f.body,
        " ".join(f.sources),
        f.revision,
        f.lifecycle,
        int(f.protected),
        f.pos,
        f.deadline,
        f.reason,
    )


# What json.loads and json.dumps(..., ensure_ascii=False, separators=(",", ":"),
# sort_keys=True) do, without building a decoder or an encoder for every event.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def _loads(text: str) -> Any:
    """``json.loads(text)``: the scanner alone for a value that fills the text (as every value
    this store writes does); json.loads itself for anything else, errors included."""
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, TypeError):
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _event(row: tuple[Any, ...]) -> Event:
    cid, seq, kind, session, time, recorded, text, meta, payload, version, clock, head = row
    try:
        return make_event(
            cid,
            seq,
            kind,
            session,
            time,
            recorded,
            text,
            None if meta is None else _loads(meta),
            None if payload is None else _loads(payload),
            version,
            clock,
            head,
        )
    except (ValueError, RecursionError) as exc:  # not JSON (a damaged row, a hand edit)
        why = f"its stored meta or payload is not JSON ({exc})"
        raise damaged_event(f"event @e{seq}", cid, why) from exc


def _dumps(value: dict[str, Any] | None) -> str | None:
    return None if value is None else _ENCODE(value)


class SqliteRead(RuntimeRows):
    """A snapshot of one context, inside an open read (or write) transaction (its sessions and
    activations: :mod:`morphz.store.sqlite_runtime`)."""

    def __init__(self, conn: sqlite3.Connection, row: ContextRow) -> None:
        self.conn = conn
        self.cid = row.context_id
        self._row = row
        self._frames: dict[str, Frame | None] = {}
        self.recall = SqliteRecall(conn, self.cid)
        self.active = SqliteActive(conn, self.cid)

    # -- MindView

    @property
    def row(self) -> ContextRow:
        return self._row

    @property
    def version(self) -> int:
        return self._row.version

    @property
    def clock(self) -> int:
        return self._row.clock

    @property
    def window(self) -> int:
        return self._row.window

    @property
    def order_max(self) -> float:
        return self._row.order_max

    @property
    def last_seq(self) -> int:
        return self._row.last_seq

    def frame(self, frame_id: str) -> Frame | None:
        cache = self._frames
        if frame_id in cache:
            return cache[frame_id]
        rows = read_frames(
            self.conn, self.cid, "WHERE context_id = ? AND frame_id = ?", (self.cid, frame_id)
        )
        frame = rows[0] if rows else None
        cache[frame_id] = frame
        return frame

    def edges_of(self, frame_id: str) -> list[Edge]:
        """Relations where ``frame_id`` is the subject or the object."""
        rows = self.conn.execute(
            "SELECT subject, relation, object FROM relations WHERE context_id = ? AND subject = ? "
            "UNION SELECT subject, relation, object FROM relations WHERE context_id = ? "
            "AND object = ? ORDER BY 1, 2, 3",
            (self.cid, frame_id, self.cid, frame_id),
        )
        return [(s, r, o) for s, r, o in rows]

    def subject_edges(self, frame_id: str) -> list[Edge]:
        """Relations whose subject is ``frame_id`` (those the mind region shows with it)."""
        rows = self.conn.execute(
            "SELECT subject, relation, object FROM relations WHERE context_id = ? AND subject = ? "
            "ORDER BY 2, 3",
            (self.cid, frame_id),
        )
        return [(s, r, o) for s, r, o in rows]

    def citing(self, source: str) -> list[str]:
        """Frames that cite ``source`` (a frame id or an @e ref)."""
        rows = self.conn.execute(
            "SELECT frame_id FROM frame_sources WHERE context_id = ? AND source = ? "
            "ORDER BY frame_id",
            (self.cid, source),
        )
        return [r[0] for r in rows]

    def has_edge(self, edge: Edge) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM relations WHERE context_id = ? AND subject = ? AND relation = ? "
            "AND object = ?",
            (self.cid, *edge),
        ).fetchone()
        return row is not None

    def observation(self, seq: int) -> ObsState | None:
        row = self.conn.execute(
            "SELECT seq, kind, lifecycle, protected, chars, units FROM observations "
            "WHERE context_id = ? AND seq = ?",
            (self.cid, seq),
        ).fetchone()
        if row is None:
            return None
        return ObsState(row[0], row[1], row[2], bool(row[3]), row[4], row[5])

    def session(self, session_id: str) -> SessionState | None:
        row = self.conn.execute(
            "SELECT attention FROM sessions WHERE context_id = ? AND session_id = ?",
            (self.cid, session_id),
        ).fetchone()
        return SessionState(session_id, row[0]) if row is not None else None

    def has_checkpoint(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM checkpoints WHERE context_id = ? AND name = ?", (self.cid, name)
        ).fetchone()
        return row is not None

    def checkpoint(self, name: str) -> Snapshot | None:
        row = self.conn.execute(
            "SELECT version FROM checkpoints WHERE context_id = ? AND name = ?", (self.cid, name)
        ).fetchone()
        if row is None:
            return None
        frames = tuple(
            frame_from_row(r)
            for r in self.conn.execute(
                f"SELECT {FRAME_COLS} FROM checkpoint_frames WHERE context_id = ? AND name = ? "
                "ORDER BY frame_id",
                (self.cid, name),
            )
        )
        edges = tuple(
            (s, r, o)
            for s, r, o in self.conn.execute(
                "SELECT subject, relation, object FROM checkpoint_edges "
                "WHERE context_id = ? AND name = ? ORDER BY subject, relation, object",
                (self.cid, name),
            )
        )
        return Snapshot(name, row[0], frames, edges)

    def frames(self) -> Iterator[Frame]:
        """Every frame, read whole (no statement stays open while the caller works on them); a
        frame whose text is not UTF-8 is a DamagedStoreError naming it."""
        yield from read_frames(self.conn, self.cid, "WHERE context_id = ?", (self.cid,))

    def edges(self) -> Iterator[Edge]:
        rows = self.conn.execute(
            "SELECT subject, relation, object FROM relations WHERE context_id = ?", (self.cid,)
        )
        yield from rows  # the rows are (subject, relation, object) tuples already

    def frame_after(self, pos: float, frame_id: str) -> Frame | None:
        return self._neighbour(">", "", pos, frame_id)

    def frame_before(self, pos: float, frame_id: str) -> Frame | None:
        return self._neighbour("<", " DESC", pos, frame_id)

    def _neighbour(self, op: str, desc: str, pos: float, frame_id: str) -> Frame | None:
        """The next frame in projection order (pos, then id) one way from (pos, frame_id): one
        step along ``frames_order`` (migration 0014)."""
        rows = read_frames(
            self.conn,
            self.cid,
            f"INDEXED BY frames_order WHERE context_id = ? AND (pos, frame_id) {op} (?, ?) "
            f"ORDER BY pos{desc}, frame_id{desc} LIMIT 1",
            (self.cid, pos, frame_id),
        )
        return rows[0] if rows else None

    def due_retirements(self, clock: int) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT frame_id FROM frames INDEXED BY frames_retiring WHERE context_id = ? "
                "AND lifecycle = 'retiring' AND deadline <= ? ORDER BY frame_id",
                (self.cid, clock),
            )
        ]

    # -- wider reads

    def events(self, after_seq: int = 0, limit: int | None = None) -> Iterator[Event]:
        """The events after ``after_seq``, read 1,000 at a time, each batch fetched whole: no
        statement stays open while the caller works on them, so one it abandons (an exception,
        Ctrl-C, whose traceback keeps this generator alive) holds no table locked. An event
        whose stored text is not UTF-8 raises DamagedStoreError when its turn comes, naming it,
        after the events before it."""
        left = None if limit is None else min(limit, 2**63 - 1)
        while left is None or left > 0:
            size = EVENT_BATCH if left is None else min(EVENT_BATCH, left)
            rows, damaged = self._event_rows(after_seq, size)
            yield from map(_event, rows)
            if damaged is not None:
                raise damaged
            if not rows:
                return
            after_seq = rows[-1][1]
            left = None if left is None else left - len(rows)
            if len(rows) < size:
                return

    def _event_rows(self, after_seq: int, size: int) -> tuple[list[Any], StoreError | None]:
        """Up to ``size`` event rows after ``after_seq``; where one of them holds text that is
        not UTF-8, the rows before it and the error that names it."""
        query = f"SELECT {_EVENT_COLS} FROM events WHERE context_id = ? AND seq > ? "
        try:
            rows = self.conn.execute(
                query + "ORDER BY seq LIMIT ?", (self.cid, after_seq, size)
            ).fetchall()
            return rows, None
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
            found = undecodable_event(self.conn, self.cid, after_seq, size)
            where = f"an event after @e{after_seq}" if found is None else found[1]
            error = damaged_event(where, self.cid, f"its stored text is not UTF-8 ({exc})")
            error.__cause__ = ValueError(f"{where}: {exc}")
        if found is None:
            return [], error
        before = self.conn.execute(
            query + "AND seq < ? ORDER BY seq", (self.cid, after_seq, found[0])
        )
        return before.fetchall(), error

    def event_times(self) -> Iterator[tuple[int, str, int | None]]:
        """(seq, time, time_us) of the events whose stored microseconds SQLite cannot confirm:
        those that differ from their ISO time as SQLite reads it, and those whose offset has
        seconds, which SQLite cannot read (the audit checks these in Python)."""
        cursor = self.conn.execute(
            f"SELECT seq, time, time_us FROM events WHERE context_id = ? AND (time_us IS NULL "
            f"OR time GLOB '*:*:*:*:*' OR time_us <> {_SQL_TIME_US}) ORDER BY seq",
            (self.cid,),
        )
        while rows := cursor.fetchmany(1000):
            yield from rows

    def event(self, seq: int) -> Event | None:
        row = self.conn.execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE context_id = ? AND seq = ?", (self.cid, seq)
        ).fetchone()
        return _event(row) if row is not None else None

    def ordered_frames(self) -> list[Frame]:
        where = "WHERE context_id = ? ORDER BY pos, frame_id"
        return read_frames(self.conn, self.cid, where, (self.cid,))

    def observations(self, active_only: bool = False) -> Iterator[ObsState]:
        """Every observation in seq order; ``active_only``: the active ones, through their
        partial index (not every observation the context ever had)."""
        source = "observations INDEXED BY observations_active" if active_only else "observations"
        where = " AND lifecycle = 'active'" if active_only else ""
        for seq, kind, life, protected, chars, units in self.conn.execute(
            f"SELECT seq, kind, lifecycle, protected, chars, units FROM {source} "
            f"WHERE context_id = ?{where} ORDER BY seq",
            (self.cid,),
        ):
            yield ObsState(seq, kind, life, bool(protected), chars, units)

    def sessions(self) -> Iterator[SessionState]:
        for sid, attention in self.conn.execute(
            "SELECT session_id, attention FROM sessions WHERE context_id = ? ORDER BY session_id",
            (self.cid,),
        ):
            yield SessionState(sid, attention)

    def checkpoint_versions(self) -> list[tuple[str, int]]:
        """(name, version) of each checkpoint by name, without its copy of the mind."""
        rows = self.conn.execute(
            "SELECT name, version FROM checkpoints WHERE context_id = ? ORDER BY name", (self.cid,)
        )
        return [(name, version) for name, version in rows]

    def snapshots(self) -> Iterator[Snapshot]:
        names = [
            r[0]
            for r in self.conn.execute(
                "SELECT name FROM checkpoints WHERE context_id = ? ORDER BY name", (self.cid,)
            )
        ]
        for name in names:
            snap = self.checkpoint(name)
            if snap is not None:
                yield snap

    def boundary_versions(self) -> Iterator[tuple[str, int]]:
        rows = self.conn.execute(
            "SELECT boundary, version FROM boundary_versions WHERE context_id = ?", (self.cid,)
        )
        yield from rows  # (boundary, version) tuples already

    def frame_sources(self) -> Iterator[tuple[str, str]]:
        """(source, frame id) of every frame's sources, any lifecycle: the reverse index the
        encoding's cited-by counts and recall's descendants read."""
        rows = self.conn.execute(
            "SELECT source, frame_id FROM frame_sources WHERE context_id = ?", (self.cid,)
        )
        yield from rows

    def frame_counts(self) -> dict[str, int]:
        """Frames by lifecycle, plus ``protected``: how many of them (any lifecycle) are
        protected. The lifecycle counts add up to the number of frames."""
        return self._counts("frames", {"active": 0, "retiring": 0, "retired": 0})

    def observation_counts(self) -> dict[str, int]:
        """Observations by state (active, retired), plus ``protected`` across both."""
        return self._counts("observations", {"active": 0, "retired": 0})

    def _counts(self, table: str, counts: dict[str, int]) -> dict[str, int]:
        protected_total = 0
        for life, protected, n in self.conn.execute(
            f"SELECT lifecycle, protected, count(*) FROM {table} WHERE context_id = ? "
            "GROUP BY lifecycle, protected",
            (self.cid,),
        ):
            counts[life] += n
            protected_total += n if protected else 0
        return {**counts, "protected": protected_total}


class SqliteWrite(SqliteRead, RuntimeWrites):
    """The projection writer, inside a ``BEGIN IMMEDIATE`` transaction."""

    def changed_boundaries(self, boundaries: list[str], since: int) -> dict[str, int]:
        if not boundaries:
            return {}
        marks = ",".join("?" * len(boundaries))
        rows = self.conn.execute(
            f"SELECT boundary, version FROM boundary_versions WHERE context_id = ? "
            f"AND version > ? AND boundary IN ({marks})",
            (self.cid, since, *boundaries),
        )
        return dict(rows.fetchall())

    def append_event(self, event: Event) -> None:
        self.append_events([event])

    def append_events(self, events: list[Event]) -> None:
        self.conn.executemany(
            f"INSERT INTO events ({_EVENT_COLS}, time_us) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    self.cid,
                    e.seq,
                    e.kind,
                    e.session_id,
                    e.time,
                    e.recorded_at,
                    e.text,
                    _dumps(e.meta),
                    _dumps(e.payload),
                    e.version,
                    e.clock,
                    e.head,
                    time_us(e.time),
                )
                for e in events
            ],
        )

    def write_changes(self, changes: Changes, commit_version: int | None, seq: int) -> int:
        """Write the rows ``changes`` changes, one statement per table and kind of change where
        it can (the rows of one kind are distinct keys, so their order does not matter).
        Moves the context's kept total (frames in view, their retiring marks and relations) and
        returns how much the frames and relations in view grew, marks aside: a retirement with a
        long reason is no growth to refuse (maintenance must always commit)."""
        cid, conn = self.cid, self.conn
        tokens = marks = 0
        flips: dict[str, tuple[bool, bool]] = {}  # frames whose visibility changed
        if changes.frames:
            cache, upserts, deletes = self._frames, [], []
            for fid, frame in changes.frames.items():
                old = cache[fid] if fid in cache else self.frame(fid)
                cache[fid] = frame
                tokens += view_tokens(frame) - view_tokens(old)
                marks += retiring_marks(frame) - retiring_marks(old)
                if in_view(old) != in_view(frame):
                    flips[fid] = (in_view(old), in_view(frame))
                if old is None or frame is None or old.sources != frame.sources:
                    self._write_sources(fid, old, frame)
                if frame is None:
                    deletes.append((cid, fid))
                else:
                    upserts.append(_frame_params(cid, frame))
            if deletes:
                conn.executemany(
                    "DELETE FROM frames WHERE context_id = ? AND frame_id = ?", deletes
                )
            if upserts:
                conn.executemany(
                    f"INSERT OR REPLACE INTO frames (context_id, {FRAME_COLS}) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)",
                    upserts,
                )
        if flips or changes.edges:
            tokens += self._edge_tokens(changes.edges, flips)
        if changes.edges:
            added = [(cid, *e) for e, present in changes.edges.items() if present]
            removed = [(cid, *e) for e, present in changes.edges.items() if not present]
            if added:
                conn.executemany("INSERT OR IGNORE INTO relations VALUES (?,?,?,?)", added)
            if removed:
                conn.executemany(
                    "DELETE FROM relations WHERE context_id = ? AND subject = ? "
                    "AND relation = ? AND object = ?",
                    removed,
                )
        if tokens + marks:
            conn.execute(
                "INSERT INTO frame_tokens (context_id, n) VALUES (?, ?) "
                "ON CONFLICT (context_id) DO UPDATE SET n = n + excluded.n",
                (cid, tokens + marks),
            )
        if changes.observations:
            conn.executemany(
                "INSERT OR REPLACE INTO observations (context_id, seq, kind, lifecycle, "
                "protected, chars, units) VALUES (?,?,?,?,?,?,?)",
                [
                    (cid, o.seq, o.kind, o.lifecycle, int(o.protected), o.chars, o.units)
                    for o in changes.observations.values()
                ],
            )
        for name, snap in changes.checkpoints.items():
            self._write_checkpoint(name, snap)
        for session in changes.sessions.values():
            conn.execute(
                "INSERT INTO sessions VALUES (?,?,?,?,?,?) ON CONFLICT (context_id, session_id) "
                "DO UPDATE SET attention = excluded.attention",
                (cid, session.id, session.attention, seq, seq, ""),
            )
        if commit_version is not None and changes.written:
            conn.executemany(
                "INSERT INTO boundary_versions VALUES (?,?,?) ON CONFLICT (context_id, boundary) "
                "DO UPDATE SET version = excluded.version",
                [(cid, b, commit_version) for b in changes.written],
            )
        return tokens

    def _edge_tokens(self, edges: dict[Edge, bool], flips: dict[str, tuple[bool, bool]]) -> int:
        """How the tokens of the relations in view move: those of frames that came into or
        left view, and those added or removed (read before the edges are written)."""
        tokens = 0
        for fid, (before, after) in flips.items():
            for edge in self.subject_edges(fid):
                if edge not in edges:
                    tokens += edge_tokens(edge) * (int(after) - int(before))
        for edge, present in edges.items():
            existed = self.has_edge(edge)
            before, after = flips.get(edge[0]) or (self._shown(edge[0]),) * 2
            tokens += edge_tokens(edge) * (int(present and after) - int(existed and before))
        return tokens

    def _shown(self, fid: str) -> bool:
        return in_view(self._frames[fid] if fid in self._frames else self.frame(fid))

    def _write_sources(self, fid: str, old: Frame | None, new: Frame | None) -> None:
        before = set(old.sources) if old is not None else set()
        after = set(new.sources) if new is not None else set()
        if before == after:
            return
        if gone := before - after:
            self.conn.executemany(
                "DELETE FROM frame_sources WHERE context_id = ? AND source = ? AND frame_id = ?",
                [(self.cid, s, fid) for s in sorted(gone)],
            )
        if added := after - before:
            self.conn.executemany(
                "INSERT INTO frame_sources VALUES (?, ?, ?)",
                [(self.cid, s, fid) for s in sorted(added)],
            )

    def _write_checkpoint(self, name: str, snap: Snapshot | None) -> None:
        cid, conn = self.cid, self.conn
        for table in ("checkpoints", "checkpoint_frames", "checkpoint_edges"):
            conn.execute(f"DELETE FROM {table} WHERE context_id = ? AND name = ?", (cid, name))
        if snap is None:
            return
        conn.execute("INSERT INTO checkpoints VALUES (?,?,?)", (cid, name, snap.version))
        conn.executemany(
            f"INSERT INTO checkpoint_frames (context_id, name, {FRAME_COLS}) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [(cid, name, *_frame_params(cid, f)[1:]) for f in snap.frames],
        )
        conn.executemany(
            "INSERT INTO checkpoint_edges VALUES (?,?,?,?,?)",
            [(cid, name, *edge) for edge in snap.edges],
        )

    def set_row(self, row: ContextRow) -> None:
        self.conn.execute(
            "UPDATE contexts SET version = ?, clock = ?, last_seq = ?, head = ?, window = ?, "
            "order_max = ?, barrier = ? WHERE context_id = ?",
            (
                row.version,
                row.clock,
                row.last_seq,
                row.head,
                row.window,
                row.order_max,
                row.barrier,
                self.cid,
            ),
        )
        self._row = row
