"""The store's ``-wal`` file, as this process's writer connection has it open.

SQLite opens a store's write-ahead log once per connection and keeps it open. When the file is
deleted while the store is open (a cleanup of "temporary" files, a sync tool), SQLite goes on
writing to the unlinked file: a commit is acknowledged but lives only where no other process
can read it, and a kill of this process then loses it with everything written since the last
checkpoint (other processes meanwhile get "disk I/O error"). So the writer records the file's
identity (device and inode) when it opens it, and every write transaction compares it with the
file at that path before it writes (one ``stat``); when the file was deleted or replaced, the
write is refused, and what this process committed before is copied into the store file first
(a checkpoint), which also lets other processes open the store again.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from morphz.errors import StoreError


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


class WalFile:
    """The ``-wal`` file of the store at ``store``, as the writer opened it."""

    def __init__(self, store: Path) -> None:
        # where SQLite keeps it: beside the file a symlinked store path leads to (a str:
        # os.stat takes it without a conversion)
        self.path = f"{os.path.realpath(store)}-wal"
        self.identity = _identity(self.path)  # the writer has just opened it (WAL mode)

    def replaced(self) -> bool:
        """Whether the file at the ``-wal`` path is no longer the one the writer has open: it
        was deleted, or another was made in its place. (When none was there to record as the
        writer opened, the first file seen is taken as its own.)"""
        now = _identity(self.path)
        if self.identity is None:
            self.identity = now
            return False
        return now != self.identity


def refuse_lost_wal(conn: sqlite3.Connection, store: Path) -> StoreError:
    """The error that refuses a write once the ``-wal`` file was deleted or replaced, after
    rolling back the write transaction ``conn`` holds (nothing of it is written) and copying
    what this process committed before into the store file (a ``TRUNCATE`` checkpoint)."""
    conn.execute("ROLLBACK")
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy == 0 and frames == copied:
        kept = f"what this process wrote before was copied into {store}, "
    else:
        kept = (
            f"only part of what this process wrote before could be copied into {store} "
            f"({copied} of {frames} pages; other readers held the rest): close the store "
            "(which copies it) rather than killing this process, "
        )
    return StoreError(
        f"{store.name}-wal, the store's write-ahead log, was deleted or replaced while this "
        "process had the store open (never delete a store's -wal and -shm files while it is in "
        "use): a write now would be acknowledged and lost, so nothing was written; "
        + kept
        + "and the store must be opened again (restart the command, or morphz.open it again) "
        "to write to it"
    )
