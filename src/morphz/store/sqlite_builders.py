"""The recall rebuilds in progress: which process fills each building table (``recall_builders``,
migration 0018), so that a rebuild drops the tables of rebuilds whose process provably died (a
SIGKILL, the OOM killer, a reboot) and never one that a live process still fills.

A building table is ``<the live table>_rebuild_<random>`` (``SqliteRecall.begin_rebuild``); its
owner is recorded in the transaction that creates it and forgotten in the one that swaps it in or
drops it. Liveness is :func:`morphz.owners.owner_alive`'s: a rebuild run on another host (a store
on a shared file system) cannot be told dead, and its table stays. ``recall-index inspect`` and
the audit report a context's building tables (:func:`building_tables`), and ``recall-index
clean`` drops the dead ones of one context without a rebuild.
"""

from __future__ import annotations

import sqlite3

from morphz.owners import Owner, current_owner, owner_alive
from morphz.store.recall_base import BuildingTable

REBUILD_INFIX = "_rebuild_"


def record_builder(conn: sqlite3.Connection, context_id: str, table: str) -> None:
    """Record this process as the one filling ``table``."""
    owner = current_owner()
    conn.execute(
        "INSERT INTO recall_builders VALUES (?, ?, ?, ?, ?)",
        (table, context_id, owner.host, owner.pid, owner.started),
    )


def forget_builder(conn: sqlite3.Connection, table: str) -> None:
    """``table`` was swapped in or dropped: no rebuild fills it any more."""
    conn.execute("DELETE FROM recall_builders WHERE fts_table = ?", (table,))


def _owners(conn: sqlite3.Connection, context_id: str | None) -> list[tuple[str, Owner]]:
    """The building tables recorded (of ``context_id``, or of every context for None) and their
    owners, by table name."""
    sql = "SELECT fts_table, host, pid, started FROM recall_builders"
    if context_id is None:
        rows = conn.execute(f"{sql} ORDER BY fts_table").fetchall()
    else:
        where = f"{sql} WHERE context_id = ? ORDER BY fts_table"
        rows = conn.execute(where, (context_id,)).fetchall()
    return [(table, Owner(*owner)) for table, *owner in rows]


def building_tables(conn: sqlite3.Connection, context_id: str) -> list[BuildingTable]:
    """The building tables of ``context_id``'s rebuilds, each with its owner, whether that
    process lives, and its documents (a count over the table: a leftover can be a whole
    index). A table recorded but no longer in the store (dropped by hand) is reported missing,
    with no documents."""
    found = []
    for table, owner in _owners(conn, context_id):
        if not _exists(conn, table):
            found.append(BuildingTable(table, owner, owner_alive(owner), 0, missing=True))
            continue
        documents = conn.execute(f"SELECT count(*) FROM {_checked(table)}").fetchone()[0]
        found.append(BuildingTable(table, owner, owner_alive(owner), int(documents)))
    return found


def drop_dead_builders(
    conn: sqlite3.Connection, context_id: str | None = None, *, untold: bool = False
) -> list[str]:
    """Drop the building tables (of ``context_id``, or of any context for None) whose
    rebuild's process provably died, and forget those recorded but missing (dropped by hand);
    with ``untold``, also those whose process cannot be told alive (another host, or ``/proc``
    hidden). The tables dropped or forgotten. Runs inside the caller's write transaction."""
    dropped = []
    for table, owner in _owners(conn, context_id):
        alive = owner_alive(owner)
        if alive is False or (untold and alive is None) or not _exists(conn, table):
            drop_building_table(conn, table)
            dropped.append(table)
    return dropped


def _exists(conn: sqlite3.Connection, table: str) -> bool:
    """Whether the store has the table ``table``."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


def drop_building_table(conn: sqlite3.Connection, table: str) -> None:
    """Drop the building table ``table`` (its FTS5 shadow tables go with it) and its owner."""
    conn.execute(f"DROP TABLE IF EXISTS {_checked(table)}")
    forget_builder(conn, table)


def _checked(table: str) -> str:
    """``table``, once it is known to name a building table (it is put into SQL text)."""
    if REBUILD_INFIX not in table or not table.replace("_", "").isalnum():
        raise ValueError(f"{table!r} is not a recall index's building table")
    return table


def drop_unrecorded_builders(conn: sqlite3.Connection) -> None:
    """Migration 0018's step: drop the building tables rebuilds left before owners were recorded.
    Rebuilds of this release record theirs, so any unrecorded one is of a killed rebuild (or of
    an older Morphz still running beside the upgrade, whose rebuild then fails and is retried)."""
    tables = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' "
        "AND name GLOB 'recall_fts_*_rebuild_*'"
    ).fetchall()
    for (table,) in tables:
        drop_building_table(conn, table)
