"""The recall rebuilds in progress: which process fills each building table (``recall_builders``,
migration 0018), so that a rebuild drops the tables of rebuilds whose process provably died (a
SIGKILL, the OOM killer, a reboot) and never one that a live process still fills.

A building table is ``<the live table>_rebuild_<random>`` (``SqliteRecall.begin_rebuild``); its
owner is recorded in the transaction that creates it and forgotten in the one that swaps it in or
drops it. Liveness is :func:`morphz.owners.owner_alive`'s: a rebuild run on another host (a store
on a shared file system) cannot be told dead, and its table stays.
"""

from __future__ import annotations

import sqlite3

from morphz.owners import Owner, current_owner, owner_alive

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


def drop_dead_builders(conn: sqlite3.Connection) -> list[str]:
    """Drop the building tables (of any context) whose rebuild's process provably died; the
    tables dropped. Runs inside the caller's write transaction."""
    rows = conn.execute("SELECT fts_table, host, pid, started FROM recall_builders").fetchall()
    dead = [table for table, *owner in rows if owner_alive(Owner(*owner)) is False]
    for table in dead:
        drop_building_table(conn, table)
    return dead


def drop_building_table(conn: sqlite3.Connection, table: str) -> None:
    """Drop the building table ``table`` (its FTS5 shadow tables go with it) and its owner."""
    if REBUILD_INFIX not in table or not table.replace("_", "").isalnum():
        raise ValueError(f"{table!r} is not a recall index's building table")
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    forget_builder(conn, table)


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
