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
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from morphz.checks import how_to_create, not_unicode
from morphz.errors import (
    ContextExistsError,
    ContextNotFoundError,
    SchemaError,
    StoreBusyError,
    StoreError,
)
from morphz.mind.state import GENESIS_HEAD
from morphz.store.base import ContextRow
from morphz.store.sqlite_files import damage, explained, os_advice, write_failed
from morphz.store.sqlite_migrations import (
    WRITER_GUARD,
    applied,
    bundled,
    morphz_migrations,
    run_migration,
    statements,
    writer_guard,
)
from morphz.store.sqlite_paths import (
    check_options,
    create_private_file,
    file_key,
    files_written,
    make_private_folders,
    owned,
    remove_unwritten,
    writing,
)
from morphz.store.sqlite_readers import Reader, begin_read, drop_reader
from morphz.store.sqlite_recall import SqliteRecall
from morphz.store.sqlite_rows import release_statements, undecodable_row
from morphz.store.sqlite_txn import SqliteRead, SqliteWrite
from morphz.store.sqlite_wal import StoreFile, WalFile, refuse_lost_wal, refuse_moved_store
from morphz.store.waiting import GIVE_UP, GIVING_UP_TRY_MS, given_up, holding

_CONTEXT_COLS = (
    "context_id, created_at, version, clock, last_seq, head, window, initial_window, "
    "order_max, barrier"
)
# what a write reads once it holds the lock: the schema, and the data version (store/sqlite_wal)
_CHECKED = (
    "SELECT max(number), (SELECT data_version FROM pragma_data_version) FROM schema_migrations"
)
CLOSED = "the store is closed: open it again with morphz.open(path)"
_migrations, _statements = bundled, statements  # the names tools and tests import from here


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _close_writer(conn: sqlite3.Connection) -> None:
    """The finalizer of a store collected without ``close()``: no thread can use its writer."""
    conn.close()


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
        check_options(path, synchronous, busy_timeout)
        self.path = Path(path).absolute()  # the same file after a chdir (readers, the audit)
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[weakref.ref[Reader]] = []  # every live thread's reader
        self._readers_lock = threading.RLock()  # a finalizer may run inside (the GC)
        self._closed = False
        self._broken: str | None = None  # why writes are refused: the writer closed (_roll_back)
        if not create and not self.path.exists():
            raise StoreError(
                f"no store at {self.path}: check --db / MORPHZ_DB, or create a context there "
                "first (`morphz context create --db PATH`)"
            )
        writer: sqlite3.Connection | None = None
        made = None
        try:
            self._check_foreign(create)
            make_private_folders(self.path.parent)
            made = create_private_file(self.path)  # 0600: SQLite's -wal and -shm take it
            self._writer = writer = self._connect()
            self._file = file_key(self.path)
            self._close_writer = weakref.finalize(self, _close_writer, writer)
            self._wal = WalFile(self.path)  # the writer has just opened it
            version = writer.execute("PRAGMA data_version").fetchone()[0]  # (its own writes
            self._store_file = StoreFile(self.path, self._file, version)  # do not change it)
            self._migrate()
        except BaseException as exc:
            if writer is not None:  # a store that does not open keeps no connection
                writer.close()
            remove_unwritten(self.path, made)  # nor the empty file made for it
            if isinstance(exc, sqlite3.Error):
                message = f"cannot open the store at {self.path}: {exc}"
                raise StoreError(explained(message, exc, self.path, opening=True)) from exc
            if isinstance(exc, OSError):  # its folder or file cannot be made, or the file read
                message = f"cannot open the store at {self.path}: {exc.strerror or exc}"
                more = os_advice(self.path)
                raise StoreError(f"{message}: {more}" if more else message) from exc
            raise

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
        names, ours = self._read_tables()
        if names and not ours:
            raise StoreError(
                f"{self.path} is a SQLite database but not a Morphz store (its tables are not "
                "Morphz's): nothing was changed; check --db / MORPHZ_DB"
            )
        if not names and not create:  # another process creating it: wait for its migrations
            names = self._tables_after_writers()
        if not names and not create:  # another tool's new database, or a creation cut short
            raise StoreError(
                f"{self.path} is a SQLite database without tables, not a Morphz store yet: "
                "nothing was changed; check --db / MORPHZ_DB, or create a context there first "
                "(`morphz context create --db PATH`)"
            )

    def _read_tables(self) -> tuple[set[str], bool]:
        """The file's tables, and whether they are a Morphz store's, read without writing.
        A reader waits only for a process that holds the file exclusively (``locking_mode =
        EXCLUSIVE``, or WAL recovery after a crash): up to ``busy_timeout``, then
        StoreBusyError."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=min(self.busy_timeout, 86_400.0))
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return names, "schema_migrations" in names and morphz_migrations(conn, names)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise self._locked(exc) from exc
            raise
        finally:
            conn.close()

    def _tables_after_writers(self) -> set[str]:
        """The file's tables once no process writes it: a creator holds its write lock from
        the first migration to the last, so this waits for it (StoreBusyError past
        ``busy_timeout``), reads, and writes nothing."""
        # SQLite takes the wait in milliseconds as an int: past about 24 days (inf too) it
        # would read 0, no wait at all
        wait = min(self.busy_timeout, 86_400.0)
        conn = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise StoreBusyError(
                    f"the store at {self.path} stayed locked for {self.busy_timeout} s while "
                    "another process was creating it: try again"
                ) from exc
            raise
        finally:
            conn.close()

    # -- connections

    def _connect(self, *, read_only: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro" if read_only else self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=min(self.busy_timeout, 5.0),
            uri=read_only,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(min(self.busy_timeout, 5.0) * 1000)}")
        # The writer guard's triggers (0023, 0024) call a function of Morphz's, which a build
        # of SQLite that distrusts schemas (SQLITE_TRUSTED_SCHEMA=0) refuses there ("unsafe
        # use"): Morphz's own functions do nothing or only count, so trusting is safe
        conn.execute("PRAGMA trusted_schema = ON")
        if read_only:  # a store that is open is in WAL mode already
            return conn
        conn.create_function(WRITER_GUARD, 0, writer_guard, deterministic=True)
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextmanager
    def _using_reader(self) -> Iterator[Reader]:
        """This thread's reader connection, marked in use for the block; made on first use and
        closed when the thread ends (its holder goes with the thread's local storage) or when
        the store closes. StoreError when the store is closed, before or during the block."""
        holder, counted = self._reader_holder(), False
        try:
            with self._readers_lock:
                if self._closed or holder.closed:
                    raise StoreError(CLOSED)
                holder.busy += 1
                counted = True  # (no Ctrl-C can come between: no call)
            yield holder
        finally:
            with self._readers_lock:
                holder.busy -= counted
                closed = self._closed
                if closed and not holder.busy and not holder.closed:
                    holder.closed = True  # close() left it to this thread, which used it
                    holder.conn.close()
        if closed:  # the block ended, but what it read is not returned: the store closed
            raise StoreError(
                "the store was closed during this read: open it again with morphz.open(path)"
            )

    def _reader(self) -> sqlite3.Connection:
        """This thread's reader connection (tests and benchmarks inspect it)."""
        return self._reader_holder().conn

    def _reader_holder(self) -> Reader:
        holder: Reader | None = getattr(self._local, "reader", None)
        if holder is not None:
            return holder
        if self._closed:
            raise StoreError(CLOSED)
        conn = self._store_file.reader(self._connect)  # refused once the file moved
        holder = Reader(conn)
        with self._readers_lock:
            if self._closed:  # closed while this thread connected
                conn.close()
                raise StoreError(CLOSED)
            self._readers.append(weakref.ref(holder))
        self._local.reader = holder
        weakref.finalize(holder, drop_reader, weakref.ref(self), conn)
        return holder

    def _retry(self, action: object, deadline: float | None = None) -> sqlite3.Cursor:
        """Run ``action`` until it is not refused as busy, or the busy timeout passes (or
        ``deadline``, a ``time.monotonic()`` reading), or the caller gives up waiting
        (:mod:`morphz.store.waiting`)."""
        assert callable(action)
        if deadline is None:
            deadline = time.monotonic() + self.busy_timeout
        delay = 0.001
        while True:
            try:
                result: sqlite3.Cursor = action()
                return result
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if given_up():  # the caller is being stopped (store/waiting.py)
                    raise StoreBusyError(
                        f"gave up waiting for the store {self.path}: another process holds it"
                    ) from exc
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"the store {self.path} stayed locked for {self.busy_timeout:g}s; "
                        f"another process holds it: retry later or {StoreBusyError.WAIT_LONGER}"
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.05)

    def _begin(self, conn: sqlite3.Connection, deadline: float | None = None) -> None:
        """BEGIN IMMEDIATE on the writer, waiting while another process writes (until the busy
        timeout, or ``deadline``); a transaction an interrupt left open on it is rolled back
        first."""
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if GIVE_UP.get() is None:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
            return
        # a caller that may give up waiting (store/waiting.py) waits in _retry's loop, which
        # looks at it between tries, not seconds at a time in SQLite's busy handler
        conn.execute(f"PRAGMA busy_timeout = {GIVING_UP_TRY_MS}")
        try:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(min(self.busy_timeout, 5.0) * 1000)}")

    def _migrate(self) -> None:
        """Apply the migrations this store lacks, in one write transaction; an up-to-date store
        is only read (so opening it never waits for a writer)."""
        known = _migrations()
        self._newest = max(n for n, _, _ in known)
        if self._applied() >= {n for n, _, _ in known}:
            self._check_newest(self._applied(), known)
            return
        conn = self._writer
        with self._write_lock:
            try:
                self._begin(conn)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
                )
                done = applied(conn.execute("SELECT number, name FROM schema_migrations"))
                self._check_newest(done, known)
                for number, name, sql in known:
                    if number not in done:
                        run_migration(conn, number, name, sql)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _applied(self) -> set[int]:
        """The migrations this store has (none when it has no migrations table yet)."""
        conn = self._writer
        try:
            rows = self._retry(lambda: conn.execute("SELECT number, name FROM schema_migrations"))
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return set()
            raise
        return applied(rows)

    def _check_newest(self, done: set[int], known: list[tuple[int, str, str]]) -> None:
        newest = max((n for n, _, _ in known), default=0)
        if done and max(done) > newest:
            raise SchemaError(
                f"{self.path} has schema {max(done)} but this Morphz knows up to "
                f"{newest}: upgrade Morphz to open it"
            )

    def _query(self, sql: str, what: str) -> list[Any]:
        """Rows of ``sql`` on this thread's reader; driver errors are StoreErrors."""
        try:
            with self._using_reader() as holder:
                return holder.conn.execute(sql).fetchall()
        except sqlite3.Error as exc:
            message = f"cannot {what} in {self.path}: {exc}"
            raise StoreError(explained(message, exc, self.path)) from exc

    def schema_version(self) -> int:
        rows = self._query("SELECT max(number) FROM schema_migrations", "read the schema")
        return int(rows[0][0] or 0)

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
        rows = self._query(
            "SELECT c.context_id FROM contexts c "
            "LEFT JOIN recall_meta m ON m.context_id = c.context_id "
            # every event goes through the indexer in its own write: behind only when a
            # migration marked it (-1), or a rebuild from an empty index has not finished;
            # and every frame has its document, which a damaged index may have lost
            "WHERE (m.context_id IS NULL AND c.last_seq > 0) OR m.indexed_seq < c.last_seq "
            "OR (SELECT count(*) FROM recall_frames rf WHERE rf.context_id = c.context_id) "
            "<> (SELECT count(*) FROM frames f WHERE f.context_id = c.context_id) "
            "ORDER BY c.context_id",
            "read the recall index's state",
        )
        return [r[0] for r in rows]

    def context_ids(self) -> list[str]:
        rows = self._query("SELECT context_id FROM contexts ORDER BY context_id", "list contexts")
        return [r[0] for r in rows]

    @staticmethod
    def _row(conn: sqlite3.Connection, context_id: str) -> ContextRow:
        row = conn.execute(
            f"SELECT {_CONTEXT_COLS} FROM contexts WHERE context_id = ?", (context_id,)
        ).fetchone()
        if row is None:
            raise ContextNotFoundError(
                f"no context '{context_id}' in this store: {how_to_create(context_id)}"
            )
        return ContextRow(*row)

    # -- units of work

    @contextmanager
    def _begin_write(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise StoreError(CLOSED)
        if self._broken is not None:
            raise StoreError(self._broken)
        if writing(self._file):  # this thread's, through any Database: it would wait for ever
            raise StoreError(
                "a write is already open on this thread (through this Database or another "
                "opened on the same file): a callback run inside a write (such as "
                "import_history's progress) must not write to the store; write after it returns"
            )
        with holding(self._write_lock, self.busy_timeout, self.path) as deadline:  # both waits
            if self._closed:  # closed by another thread while this one waited for the lock
                raise StoreError(CLOSED)
            if self._broken is not None:  # another thread's rollback failed meanwhile
                raise StoreError(self._broken)
            conn, written = self._writer, files_written()
            try:  # everything it sets is inside: an interrupt anywhere leaves nothing set
                written[self._file] = self._write_lock
                self._begin(conn, deadline)  # inside the try: an interrupt as it is granted
                self._check_writable(conn)
                yield conn
                self._retry(lambda: conn.execute("COMMIT"))
            except BaseException as exc:
                if conn.in_transaction:
                    self._roll_back(conn, exc)
                if isinstance(exc, sqlite3.Error) and self._broken is not None:
                    raise StoreError(self._broken) from exc
                if isinstance(exc, sqlite3.Error):
                    message = f"write to {self.path} failed: {exc}"
                    raise write_failed(message, exc, self.path) from exc
                if isinstance(exc, UnicodeEncodeError):
                    raise not_unicode(exc, "text given to the store") from exc
                raise
            finally:
                written.pop(self._file, None)  # (writing() drops it if this line is skipped)

    def _roll_back(self, conn: sqlite3.Connection, exc: BaseException) -> None:
        """Roll back the write ``exc`` ended. When the ROLLBACK fails too, the writer is closed,
        which ends its transaction (nothing of the write is kept) and lets other writers in:
        kept, its BEGIN IMMEDIATE would hold every other process's write off until this one
        wrote again. This Database's later writes are refused; its reads go on."""
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as failed:
            conn.close()
            self._broken = (
                f"a write to {self.path} failed ({exc or type(exc).__name__}) and so did its "
                f"rollback ({failed}): nothing of it was kept, and this Database writes no more; "
                "open the store again (morphz.open) to write"
            )
            exc.add_note(self._broken)

    def _check_writable(self, conn: sqlite3.Connection) -> None:
        """What a write checks once it holds the lock: the store file and its ``-wal`` are
        still the files the writer has open (see store/sqlite_wal.py), and no newer Morphz
        migrated the store since it was opened (its rules are not this process's). Two
        ``stat`` and one indexed read of a one-page table (with the data version)."""
        moved = self._store_file.moved()
        if moved is not None:
            raise refuse_moved_store(conn, self._store_file, moved)
        if self._wal.replaced():
            raise refuse_lost_wal(conn, self.path)
        schema, version = conn.execute(_CHECKED).fetchone()
        self._store_file.version = version  # no other connection can write until this ends
        if schema > self._newest:
            raise SchemaError(
                f"{self.path} was upgraded to schema {schema} by a newer Morphz while this "
                f"process had it open (this one knows up to {self._newest}): nothing was "
                "written; upgrade Morphz here and start this process again"
            )

    @contextmanager
    def write(self, context_id: str) -> Iterator[SqliteWrite]:
        with self._begin_write() as conn:
            try:
                yield SqliteWrite(conn, self._row(conn, context_id))
            except BaseException as exc:  # rolled back as it leaves _begin_write
                release_statements(exc)
                if (damaged := undecodable_row(exc, context_id)) is None:
                    raise
                raise damaged from damaged.__cause__  # a ValueError, whose cause is exc

    @contextmanager
    def read(self, context_id: str) -> Iterator[SqliteRead]:
        try:
            with self._using_reader() as holder:
                conn = holder.conn
                nested = owned(holder.reading)  # a read inside a read (a callback): same snapshot
                with holder.reading:
                    if not nested:
                        begin_read(conn)
                    try:
                        yield SqliteRead(conn, self._nested_row(conn, context_id) if nested else
                                         self._row(conn, context_id))  # fmt: skip
                    except BaseException as exc:
                        release_statements(exc)
                        raise
                    finally:
                        if not nested and conn.in_transaction:
                            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise self._locked(exc) from exc
            if self._closed:  # another thread closed the store during this read
                raise StoreError(CLOSED) from exc
            if (damaged := undecodable_row(exc, context_id)) is not None:
                raise damaged from damaged.__cause__  # a ValueError, whose cause is exc
            message = f"read from {self.path} failed: {exc}"
            raise StoreError(explained(message, exc, self.path)) from exc
        except UnicodeEncodeError as exc:
            raise not_unicode(exc, "text given to the store") from exc

    def _nested_row(self, conn: sqlite3.Connection, context_id: str) -> ContextRow:
        """The context's row for a read inside a read on this thread: that read's snapshot,
        which cannot see what was written since it began."""
        try:
            return self._row(conn, context_id)
        except ContextNotFoundError as exc:
            if self._broken is not None:  # no writer to ask what is committed now
                raise
            with holding(self._write_lock, self.busy_timeout, self.path):  # what is committed now
                now = self._writer.execute(
                    "SELECT 1 FROM contexts WHERE context_id = ?", (context_id,)
                ).fetchone()
            if now is None:
                raise
            raise StoreError(
                f"no context '{context_id}' in the snapshot of the read this one runs inside "
                "(a callback of an audit, on this thread): it may have been created since; "
                "read it after the outer read ends"
            ) from exc

    def integrity_check(self) -> list[str]:
        rows = self._query("PRAGMA integrity_check", "check integrity")
        problems = [r[0] for r in rows]
        return [] if problems == ["ok"] else problems

    def check_file(self) -> list[str]:
        """SQLite's quick check of the whole file: the damage found, worded with what to do;
        [] when sound. On a connection of its own: after damage, SQLite fails the end of the
        transaction that met it, which must not be a read of the caller's."""
        if self._closed:
            raise StoreError(CLOSED)
        try:
            conn = self._connect(read_only=True)
            try:
                return damage(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise self._locked(exc) from exc
            message = f"cannot check the file {self.path}: {exc}"
            raise StoreError(explained(message, exc, self.path)) from exc

    def _locked(self, exc: sqlite3.OperationalError) -> StoreBusyError:
        """What a read or a file check says when another process holds the store too long."""
        return StoreBusyError(
            f"the store {self.path} is locked ({exc}): another process holds it; retry later "
            f"or {StoreBusyError.WAIT_LONGER}"
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the writer (after a write another thread is making ends) and every reader
        no call is using; a reader in use is closed by its own thread as its read ends. Every
        later call of any thread is a StoreError, "the store is closed" (:data:`CLOSED`)."""
        if writing(self._file, self._write_lock):  # a callback run inside this thread's write
            raise StoreError(
                "the store cannot close while this thread writes to it (a callback run inside "
                "a write, such as import_history's progress): close it after that call returns"
            )
        with self._readers_lock:
            if self._closed:
                return
            self._closed = True
            holders = [h for h in (ref() for ref in self._readers) if h is not None]
            for holder in holders:
                if not holder.busy:
                    holder.closed = True
                    holder.conn.close()
            self._readers = []  # the busy ones are closed by their threads as their reads end
        with self._write_lock:
            try:  # SQLite leaves a moved store's -wal to the file now at the path
                if self._broken is None:  # (a broken writer is closed already)
                    self._store_file.settle_closing(self._writer)
            finally:
                self._close_writer()
