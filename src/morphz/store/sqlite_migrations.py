"""The store's schema migrations: the bundled ``migrations/NNNN_*.sql`` scripts and the Python
steps some of them need (``AFTER``, run right after their SQL in the same transaction).

A migration that has landed is never edited: a store that ran it records its number and never
runs it again, so an edit reaches only new stores and leaves the others with another schema
under the same number. A change is a new migration; one that repairs what an edit left behind
inspects the schema it finds (0017).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from importlib import resources

from morphz.errors import SchemaError
from morphz.mind.lifecycle import edge_tokens, kept_tokens
from morphz.mind.lines import Entry, observation_units
from morphz.recall.documents import time_us
from morphz.store.active_base import json_object, meta_pairs
from morphz.store.sqlite_builders import drop_unrecorded_builders
from morphz.store.sqlite_rows import FRAME_COLS, frame_from_row
from morphz.token_estimate import ASCII_UNITS, byte_units


def bundled() -> list[tuple[int, str, str]]:
    """(number, name, sql) of every bundled migration, in order."""
    out = []
    folder = resources.files("morphz.store") / "migrations"
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            out.append((int(name[:4]), name[:-4], entry.read_text(encoding="utf-8")))
    return sorted(out)


def statements(sql: str) -> list[str]:
    """Split a migration script into complete statements (comments may follow a ``;``)."""
    out: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer)
            buffer = ""
    if buffer.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()
    ):
        raise SchemaError(f"incomplete statement at the end of a migration: {buffer[:80]!r}")
    return out


def _count_frame_tokens(conn: sqlite3.Connection) -> None:
    """Migration 0009's backfill: each context's frames in view, counted as the mind layer
    counts them (mind.lifecycle.frame_tokens)."""
    totals: dict[str, int] = {}
    rows = conn.execute(f"SELECT context_id, {FRAME_COLS} FROM frames WHERE lifecycle <> 'retired'")
    for context_id, *frame in rows:
        totals[context_id] = totals.get(context_id, 0) + kept_tokens(frame_from_row(frame))
    shown = conn.execute(  # the relations whose subject is in view (0012 on)
        "SELECT r.context_id, r.subject, r.relation, r.object FROM relations r JOIN frames f "
        "ON f.context_id = r.context_id AND f.frame_id = r.subject WHERE f.lifecycle <> 'retired'"
    )
    for context_id, *edge in shown:
        totals[context_id] = totals.get(context_id, 0) + edge_tokens((edge[0], edge[1], edge[2]))
    conn.executemany("INSERT INTO frame_tokens (context_id, n) VALUES (?, ?)", totals.items())


def _exact_event_times(conn: sqlite3.Connection) -> None:
    """Migration 0011: time_us again for the event times SQLite could not read (an offset
    with seconds has four colons in all)."""
    rows = conn.execute(
        "SELECT context_id, seq, time FROM events WHERE time_us IS NULL OR time GLOB '*:*:*:*:*'"
    ).fetchall()
    conn.executemany(
        "UPDATE events SET time_us = ? WHERE context_id = ? AND seq = ?",
        [(time_us(time), context_id, seq) for context_id, seq, time in rows],
    )


# recall_frames as 0002 creates it since ab9e50c (which added ``key`` to 0002 in place)
_RECALL_FRAMES = """
CREATE TABLE recall_frames_keyed (
    context_id TEXT NOT NULL,
    frame_id   TEXT NOT NULL,
    doc_id     INTEGER NOT NULL,
    key        INTEGER NOT NULL,
    time_us    INTEGER NOT NULL,
    PRIMARY KEY (context_id, frame_id)
) WITHOUT ROWID
"""
_RECALL_FRAMES_INDEXES = (
    "CREATE UNIQUE INDEX recall_frames_doc ON recall_frames (context_id, doc_id)",
    "CREATE UNIQUE INDEX recall_frames_key ON recall_frames (context_id, key)",
    "CREATE INDEX recall_frames_time ON recall_frames (context_id, time_us, key)",
)


def _repair_landed_schema(conn: sqlite3.Connection) -> None:
    """Migration 0017: what edits of landed migrations left stores of the first versions with.
    0002 as it first landed (88d98b6..c443a29) made ``recall_frames`` without ``key``: it is
    made again with each frame's key its document's number (-doc_id, unique, and below the
    frame_docs counter that hands out new keys), and the indexes marked stale to be rebuilt.
    0001 as it first landed (before 3e57788) made ``frames_order`` on (context_id, pos), which
    0014's ``IF NOT EXISTS`` kept instead of its (context_id, pos, frame_id)."""
    columns = [r[1] for r in conn.execute("PRAGMA table_info(recall_frames)")]
    if "key" not in columns:
        conn.execute(_RECALL_FRAMES)
        conn.execute(
            "INSERT INTO recall_frames_keyed SELECT context_id, frame_id, doc_id, -doc_id, "
            "time_us FROM recall_frames"
        )
        conn.execute("DROP TABLE recall_frames")  # and its indexes
        conn.execute("ALTER TABLE recall_frames_keyed RENAME TO recall_frames")
        for statement in _RECALL_FRAMES_INDEXES:
            conn.execute(statement)
        conn.execute("UPDATE recall_meta SET indexed_seq = -1")
    order = [r[2] for r in conn.execute("PRAGMA index_info(frames_order)")]
    if order != ["context_id", "pos", "frame_id"]:
        conn.execute("DROP INDEX IF EXISTS frames_order")
        conn.execute("CREATE INDEX frames_order ON frames (context_id, pos, frame_id)")


def _count_observation_units(conn: sqlite3.Connection) -> None:
    """Migration 0022: ``observations.units`` (unless the table has it), each observation's
    token units from its event's text, counted by the rule of the time (what its characters
    cost: 0029 counts them again by today's), in one UPDATE that SQLite streams row by row (a
    store's whole history is never in memory). An observation without its event, or whose
    event's text cannot be read (not UTF-8: a damaged store, which the audit reports), counts as
    before, a quarter of a token a character."""
    if "units" not in [r[1] for r in conn.execute("PRAGMA table_info(observations)")]:
        conn.execute("ALTER TABLE observations ADD COLUMN units INTEGER NOT NULL DEFAULT 0")
    conn.create_function("morphz_token_units", 1, _stored_text_units, deterministic=True)
    try:
        conn.execute(  # the text as bytes: sqlite3 cannot hand a function undecodable text
            "UPDATE observations SET units = coalesce((SELECT morphz_token_units(CAST(coalesce("
            "e.text, '') AS BLOB)) FROM events e WHERE e.context_id = observations.context_id "
            f"AND e.seq = observations.seq), {ASCII_UNITS} * chars)"
        )
    finally:
        conn.create_function("morphz_token_units", 1, None)


def _stored_text_units(stored: bytes) -> int | None:
    """What an event's stored text's characters cost, or None when it is not UTF-8 (the caller
    then counts the observation by its characters, and the audit reports the event)."""
    try:
        text = stored.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return byte_units(text)


def _recount_tokens(conn: sqlite3.Connection) -> None:
    """Migration 0029: each observation's units and each context's kept total of the frames in
    view, counted again by the estimate that counts a line's chunks."""
    _recount_units(conn)
    _count_frame_tokens(conn)


def _recount_units(conn: sqlite3.Connection) -> None:
    """Migrations 0029 and 0030: each observation's units, its whole inbox entry's (mind.lines.
    observation_units: since 0030 with its meta), from its event's stored columns, in one
    UPDATE that SQLite streams row by row. An observation whose event's text, session, time or
    meta cannot be read keeps its units (the audit reports the event)."""
    conn.create_function("morphz_entry_units", 7, _stored_entry_units, deterministic=True)
    try:
        conn.execute(  # texts as bytes: sqlite3 cannot hand a function undecodable text
            "UPDATE observations SET units = coalesce((SELECT morphz_entry_units(observations.seq,"
            " observations.kind, CAST(e.session_id AS BLOB), CAST(e.time AS BLOB), e.clock, "
            "CAST(e.meta AS BLOB), CAST(coalesce(e.text, '') AS BLOB)) FROM events e WHERE "
            "e.context_id = observations.context_id AND e.seq = observations.seq), units)"
        )
    finally:
        conn.create_function("morphz_entry_units", 7, None)


def _stored_entry_units(  # noqa: PLR0917 - an SQL function's arguments are positional
    seq: int, kind: str, session: bytes, time: bytes, tick: int, meta: bytes | None, text: bytes
) -> int | None:
    """An observation's units from its event's stored columns; None when one of them cannot be
    read (not UTF-8, a meta that is no JSON object)."""
    try:
        pairs: tuple[tuple[str, str], ...] = ()
        if meta is not None:
            value, _ = json_object(meta.decode("utf-8"))
            if value is None:
                return None
            pairs = meta_pairs(value)
        entry = Entry(seq, kind, session.decode("utf-8"), time.decode("utf-8"), tick, pairs)
        return observation_units(entry, text.decode("utf-8"))
    except UnicodeDecodeError:
        return None


# Python steps of a migration, run right after its SQL in the same transaction
AFTER: dict[int, Callable[[sqlite3.Connection], None]] = {
    9: _count_frame_tokens,
    11: _exact_event_times,
    12: _count_frame_tokens,
    13: _count_frame_tokens,
    15: _count_frame_tokens,
    20: _count_frame_tokens,
    17: _repair_landed_schema,
    18: drop_unrecorded_builders,
    22: _count_observation_units,
    29: _recount_tokens,
    30: _recount_units,
}


# Names a number was recorded under before the migrations were renumbered (thirteenth session:
# 0017_recall_replies_and_pins was on main for minutes before it became 0019): a store that
# recorded one lacks the migration bundled under that number, which is written to run again
SUPERSEDED: dict[int, frozenset[str]] = {17: frozenset({"0017_recall_replies_and_pins"})}


def morphz_migrations(conn: sqlite3.Connection, names: set[str]) -> bool:
    """Whether ``schema_migrations`` is Morphz's (other tools name a table so too): its columns
    are Morphz's, and once the first migration is recorded the contexts table exists."""
    columns = [r[1] for r in conn.execute("PRAGMA table_info(schema_migrations)")]
    if columns != ["number", "name", "applied_at"]:
        return False
    first = conn.execute("SELECT 1 FROM schema_migrations WHERE number = 1").fetchone()
    return first is None or "contexts" in names


def applied(rows: Iterable[tuple[int, str]]) -> set[int]:
    """The migrations a store has, from its ``schema_migrations`` rows (number, name): a row
    recorded under a superseded name does not count."""
    return {number for number, name in rows if name not in SUPERSEDED.get(number, ())}


WRITER_GUARD = "morphz_upgraded_store_guard"


def writer_guard() -> None:
    """The SQL function ``morphz_upgraded_store_guard`` that migration 0023's trigger calls
    before every event is written: registered on this Morphz's writer connections only, so a
    process of a Morphz older than 0023 (which does not check the schema before it writes)
    cannot append to a store upgraded beside it."""
    return None


def run_migration(conn: sqlite3.Connection, number: int, name: str, sql: str) -> None:
    """Apply migration ``number`` (its SQL, then its Python step) and record it, inside the
    caller's write transaction."""
    for statement in statements(sql):
        conn.execute(statement)
    if number in AFTER:
        AFTER[number](conn)
    conn.execute(  # OR REPLACE: a row of a superseded name (SUPERSEDED) is replaced
        "INSERT OR REPLACE INTO schema_migrations VALUES (?, ?, datetime('now'))", (number, name)
    )
