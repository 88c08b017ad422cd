"""A thread's reader connection to a SQLite store (store/sqlite.py keeps one per thread)."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from morphz.store.sqlite import SqliteStore


class Reader:
    """Holds a thread's reader connection; when the thread ends, its local storage and so this
    holder go, and the finalizer closes the connection. ``busy`` counts the reads and queries
    of its thread in progress on it (a read inside a read counts twice): ``close()`` from
    another thread closes only a connection no call is using, and a busy one is closed by its
    own thread as its last read ends. Both are changed only under the store's readers lock."""

    __slots__ = ("__weakref__", "busy", "closed", "conn", "reading")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.busy = 0
        self.closed = False
        # held by the thread's reads (re-entered by a read inside a read): whether a read is
        # nested is whether its thread holds it, which an interrupt cannot leave wrong (the
        # interpreter releases it as the read's `with` ends), unlike the connection's
        # transaction, which a failed or interrupted COMMIT leaves open
        self.reading = threading.RLock()


def drop_reader(store: weakref.ref[SqliteStore], conn: sqlite3.Connection) -> None:
    """The finalizer of a thread's reader: its thread (and so every use of it) has ended."""
    alive = store()
    if alive is not None:
        with alive._readers_lock:
            alive._readers = [ref for ref in alive._readers if ref() is not None]
    conn.close()


def begin_read(conn: sqlite3.Connection) -> None:
    """Start a read's snapshot on a thread's reader, first ending one an earlier read left
    open (its COMMIT failed, or an interrupt came before it): kept, it would be every later
    read's snapshot, the store as it was then."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.execute("BEGIN")
