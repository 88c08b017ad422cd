"""The embedded SQLite store: WAL, ``BEGIN IMMEDIATE`` writers, busy handling, migrations.

One writer connection per process (guarded by a lock, so threads take turns) and one reader
connection per thread. ``synchronous=NORMAL`` by default: in WAL mode a process crash never
loses a committed transaction; ``FULL`` also survives power loss. A database that stays locked
by other processes longer than ``busy_timeout`` raises :class:`~morphz.errors.StoreBusyError`;
every other driver error becomes a :class:`~morphz.errors.StoreError` here, at one boundary.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from morphz.checks import not_unicode
from morphz.errors import (
    ContextExistsError,
    ContextNotFoundError,
    SchemaError,
    StoreBusyError,
    StoreError,
)
from morphz.mind.state import GENESIS_HEAD
from morphz.store.base import ContextRow
from morphz.store.sqlite_recall import SqliteRecall
from morphz.store.sqlite_txn import SqliteRead, SqliteWrite

_CONTEXT_COLS = (
    "context_id, created_at, version, clock, last_seq, head, window, initial_window, "
    "order_max, barrier"
)


def _migrations() -> list[tuple[int, str, str]]:
    """(number, name, sql) of every bundled migration, in order."""
    out = []
    folder = resources.files("morphz.store") / "migrations"
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            out.append((int(name[:4]), name[:-4], entry.read_text(encoding="utf-8")))
    return sorted(out)


def _statements(sql: str) -> list[str]:
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


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteStore:
    """A SQLite database file holding any number of contexts."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise StoreError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []  # every thread's reader, closed by close()
        self._closed = False
        if not create and not self.path.exists():
            raise StoreError(
                f"no store at {self.path}: check --db / MORPHZ_DB, or create a context there "
                "first (`morphz context create --db PATH`)"
            )
        try:
            self._check_foreign(create)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = self._connect()
            self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc

    def _check_foreign(self, create: bool) -> None:
        """Refuse, before anything is written to it, a file that is not a Morphz store: a SQLite
        database with tables but no ``schema_migrations`` (another application's, a typo in
        --db); and, unless ``create``, an empty one."""
        if not self.path.is_file():
            return
        if self.path.stat().st_size == 0:
            if not create:
                raise StoreError(
                    f"{self.path} is an empty file, not a Morphz store yet: create a context "
                    "there first (`morphz context create --db PATH`)"
                )
            return
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()
        if names and "schema_migrations" not in names:
            raise StoreError(
                f"{self.path} is a SQLite database but not a Morphz store (it has other tables "
                "and no schema_migrations): nothing was changed; check --db / MORPHZ_DB"
            )

    # -- connections

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=min(self.busy_timeout, 5.0),
        )
        conn.execute(f"PRAGMA busy_timeout = {int(min(self.busy_timeout, 5.0) * 1000)}")
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._write_lock:
                self._readers.append(conn)
        return conn

    def _retry(self, action: object) -> sqlite3.Cursor:
        """Run ``action`` until it is not refused as busy, or the busy timeout passes."""
        assert callable(action)
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.001
        while True:
            try:
                result: sqlite3.Cursor = action()
                return result
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"the store {self.path} stayed locked for {self.busy_timeout:.0f}s; "
                        "another process holds it: retry later or raise busy_timeout"
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.05)

    def _migrate(self) -> None:
        conn = self._writer
        with self._write_lock:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
                )
                done = {r[0] for r in conn.execute("SELECT number FROM schema_migrations")}
                known = _migrations()
                newest = max((n for n, _, _ in known), default=0)
                if done and max(done) > newest:
                    raise SchemaError(
                        f"{self.path} has schema {max(done)} but this Morphz knows up to "
                        f"{newest}: upgrade Morphz to open it"
                    )
                for number, name, sql in known:
                    if number in done:
                        continue
                    for statement in _statements(sql):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?, datetime('now'))",
                        (number, name),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def schema_version(self) -> int:
        row = self._reader().execute("SELECT max(number) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- contexts

    def create_context(self, context_id: str, window: int, created_at: str) -> ContextRow:
        with self._begin_write() as conn:
            exists = conn.execute(
                "SELECT 1 FROM contexts WHERE context_id = ?", (context_id,)
            ).fetchone()
            if exists:
                raise ContextExistsError(f"context '{context_id}' already exists")
            conn.execute(
                f"INSERT INTO contexts ({_CONTEXT_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (context_id, created_at, 0, 0, 0, GENESIS_HEAD, window, window, 0.0, 0),
            )
            SqliteRecall(conn, context_id).ensure()
        return ContextRow(context_id, created_at, 0, 0, 0, GENESIS_HEAD, window, window, 0.0, 0)

    def stale_recall(self) -> list[str]:
        rows = self._reader().execute(
            "SELECT c.context_id FROM contexts c "
            "LEFT JOIN recall_meta m ON m.context_id = c.context_id "
            # every event goes through the indexer in its own write: behind only when a
            # migration marked it (-1), or a rebuild from an empty index has not finished
            "WHERE (m.context_id IS NULL AND c.last_seq > 0) OR m.indexed_seq < c.last_seq "
            "ORDER BY c.context_id"
        )
        return [r[0] for r in rows]

    def context_ids(self) -> list[str]:
        try:
            rows = self._reader().execute("SELECT context_id FROM contexts ORDER BY context_id")
            return [r[0] for r in rows]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot list contexts in {self.path}: {exc}") from exc

    @staticmethod
    def _row(conn: sqlite3.Connection, context_id: str) -> ContextRow:
        row = conn.execute(
            f"SELECT {_CONTEXT_COLS} FROM contexts WHERE context_id = ?", (context_id,)
        ).fetchone()
        if row is None:
            raise ContextNotFoundError(
                f"no context '{context_id}' in this store: create it with "
                f"`morphz context create {context_id}` or db.context(..., create=True)"
            )
        return ContextRow(*row)

    # -- units of work

    @contextmanager
    def _begin_write(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise StoreError("the store is closed")
        with self._write_lock:
            conn = self._writer
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
                self._retry(lambda: conn.execute("COMMIT"))
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"write to {self.path} failed: {exc}") from exc
                if isinstance(exc, UnicodeEncodeError):
                    raise not_unicode(exc, "text given to the store") from exc
                raise

    @contextmanager
    def write(self, context_id: str) -> Iterator[SqliteWrite]:
        with self._begin_write() as conn:
            yield SqliteWrite(conn, self._row(conn, context_id))

    @contextmanager
    def read(self, context_id: str) -> Iterator[SqliteRead]:
        if self._closed:
            raise StoreError("the store is closed")
        conn = self._reader()
        try:
            conn.execute("BEGIN")
            try:
                yield SqliteRead(conn, self._row(conn, context_id))
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise StoreBusyError(f"the store {self.path} is locked: {exc}") from exc
            raise StoreError(f"read from {self.path} failed: {exc}") from exc
        except UnicodeEncodeError as exc:
            raise not_unicode(exc, "text given to the store") from exc

    def integrity_check(self) -> list[str]:
        rows = self._reader().execute("PRAGMA integrity_check").fetchall()
        problems = [r[0] for r in rows]
        return [] if problems == ["ok"] else problems

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            self._writer.close()
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._local.conn = None
