"""The store's files as this process's writer connection has them open: the store file and
its ``-wal``.

SQLite opens a store's write-ahead log once per connection and keeps it open. When the file is
deleted while the store is open (a cleanup of "temporary" files, a sync tool), SQLite goes on
writing to the unlinked file: a commit is acknowledged but lives only where no other process
can read it, and a kill of this process then loses it with everything written since the last
checkpoint (other processes meanwhile get "disk I/O error"). The store file itself fares worse.
Deleted while open (``rm morphz.db`` to start afresh), every write goes to the unlinked file,
lost when the process ends. Replaced while open (a backup restored with ``mv``), a write's
pages still go to the ``-wal`` beside the path, and SQLite applies them to the file now there
when the store is next opened: the restored backup is overwritten or damaged. SQLite does not
even checkpoint a moved store as it closes, so the pages already in the ``-wal`` are left for
the new file too.

So the writer records both files' identities (device and inode) as it opens them, and every
write transaction compares them with the files at those paths before it writes (two
``stat``). When either was deleted or replaced, the write is refused, after the ``-wal`` is
emptied into the store file this process has open (a ``TRUNCATE`` checkpoint: it writes
through the connection's open file, never the path, and leaves the ``-wal`` empty, which
also lets other processes open the store again). For a moved store file that is done only
when no other connection wrote since this one last did (``PRAGMA data_version``): another
process's pages may belong to the file now at the path, and moving them into the old one
would lose them. Closing the store does the same for a moved store file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from morphz.errors import StoreError
from morphz.store.sqlite_paths import FileKey


def _identity(path: str) -> FileKey | None:
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


class StoreFile:
    """The store file at ``path``, as the writer opened it (``key``: its device and inode),
    and the store's ``data_version`` as the writer's last write (or its opening) saw it."""

    def __init__(self, path: Path, key: FileKey, version: int) -> None:
        self.path, self.key, self.version = path, key, version
        self._at = str(path)  # os.stat takes a str without a conversion
        self.settled = False  # the -wal was dealt with (see settle)
        self.left: str | None = None  # why it may still hold pages of the file opened

    def moved(self) -> str | None:
        """``"deleted"`` or ``"replaced"`` when the file at the path is no longer the one the writer
        has open, else None."""
        now = _identity(self._at)
        if now == self.key:
            return None
        return "deleted" if now is None else "replaced"

    def reader(self, connect: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
        """A new reader connection (``connect``) for a thread, on the store file the writer
        has open. It is opened by path, so once that file was deleted or replaced it would open
        what is at the path now, with this process's pages in the -wal beside it (and write
        them into it as it closes): refused then, checked before and after it connects."""
        moved = self.moved()
        if moved is not None:
            raise refuse_moved_read(self, moved)
        conn = connect()
        moved = self.moved()
        if moved is not None:  # moved while it connected (a window of microseconds)
            conn.close()
            raise refuse_moved_read(self, moved)
        return conn

    def settle(self, conn: sqlite3.Connection) -> str | None:
        """When the store file moved: empty the ``-wal`` into the file the writer ``conn`` has
        open, if no other connection wrote since it last did. Returns why the ``-wal`` may
        still hold pages of that file (for a message), or None when it was emptied or the file
        did not move. Done once: pages written to the ``-wal`` after that are another
        store's (one made at the path since). ``conn`` holds no transaction."""
        if self.settled or self.moved() is None:
            return self.left
        self.settled = True
        now = conn.execute("PRAGMA data_version").fetchone()[0]
        if now != self.version:
            self.left = "another process wrote to the store since this one last did"
            return self.left
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy != 0 or frames != copied:
            self.left = f"{copied} of {frames} pages were moved; other readers held the rest"
        return self.left

    def settle_closing(self, conn: sqlite3.Connection) -> None:
        """:meth:`settle`, as the store closes: SQLite leaves the ``-wal`` of a store file that
        moved as it is, for the file now at the path to take when it is next opened. What may
        be left is not said (a write after the move was refused, saying so), but a ``-wal``
        that cannot be read is: it holds pages that are not the opened file's."""
        try:
            self.settle(conn)
        except sqlite3.Error as exc:
            raise StoreError(
                f"closing {self.path}: its store file was deleted or replaced while this process "
                f"had it open, and reading its -wal failed ({exc}): the -wal was left as it is; "
                "check the store now at that path (`morphz context audit`)"
            ) from exc


def refuse_moved_store(conn: sqlite3.Connection, store: StoreFile, how: str) -> StoreError:
    """The error that refuses a write once the store file was deleted or replaced (``how``),
    after rolling back the write transaction ``conn`` holds (nothing of it is written) and
    emptying the ``-wal`` into the file this process has open (:meth:`StoreFile.settle`)."""
    conn.execute("ROLLBACK")
    left = store.settle(conn)
    path, name = store.path, store.path.name
    if left is not None:
        kept = (
            f"{name}-wal may still hold pages of the file this process opened ({left}), which "
            "SQLite would apply to the file at that path: end every process using the store, "
            "then check it (`morphz context audit`); "
        )
    elif how == "deleted":
        kept = (
            f"this process's pages in {name}-wal were moved into the deleted file (with what "
            "it wrote before, gone when it ends), so a store made anew at that path does not "
            "take them; "
        )
    else:
        kept = (
            f"this process's pages in {name}-wal were moved into the file it opened, so the "
            "file now at that path stays as it was put there; "
        )
    return StoreError(
        f"{path}, the store file, {_MOVED[how]}, so nothing was written (never delete or "
        f"replace a store while it is in use); {kept}open the store again to write to it "
        "(restart the command, or morphz.open it again)"
    )


def refuse_moved_read(store: StoreFile, how: str) -> StoreError:
    """The error that refuses a thread's first read once the store file was deleted or
    replaced (``how``): the thread has no connection yet, and a new one would open what is at
    the path now (threads that read before keep reading the file the process opened)."""
    return StoreError(
        f"{store.path}, the store file, was {how} while this process had it open, so nothing "
        "was read: this thread had not read it yet, and a new connection would open what is at "
        f"that path now, with this process's pages in {store.path.name}-wal; open the store "
        "again (restart the command, or morphz.open it again)"
    )


_MOVED = {
    "deleted": "was deleted while this process had it open: a write now would go to the "
    "deleted file and be lost when this process ends",
    "replaced": "was replaced by another file (a restored backup, a copy) while this process "
    "had it open: a write now would go to the file this process opened and its pages to the "
    "-wal beside the new one",
}


def refuse_lost_wal(conn: sqlite3.Connection, store: Path) -> StoreError:
    """The error that refuses a write once the ``-wal`` file was deleted or replaced, after
    rolling back the write transaction ``conn`` holds (nothing of it is written) and copying
    what this process committed before into the store file (a ``TRUNCATE`` checkpoint). The
    store file is the one the writer opened (:class:`StoreFile` is checked first)."""
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
