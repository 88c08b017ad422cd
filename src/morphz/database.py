"""Opening a store: :func:`open` and the :class:`Database` of contexts it returns."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from morphz.checks import (
    check_new_context_id,
    check_progress,
    check_stored_id,
    check_window,
    utc_now,
)
from morphz.contextdb import DEFAULT_CONTEXT, Context
from morphz.errors import (
    ContextExistsError,
    DamagedStoreError,
    InputError,
    StoreBusyError,
    StoreError,
)
from morphz.mind import DEFAULT_WINDOW
from morphz.store.base import Store
from morphz.store.sqlite import CLOSED, SqliteStore


class Database:
    """A Morphz store holding many contexts. Use :func:`morphz.open` to get one."""

    def __init__(self, store: Store, *, now: Callable[[], datetime] | None = utc_now) -> None:
        self.store = store
        self.now = _clock(now)

    def __repr__(self) -> str:
        path = getattr(self.store, "path", None)
        where = f"'{path}'" if path is not None else type(self.store).__name__
        return f"Database({where}{', closed' if self.store.closed else ''})"

    def timestamp(self) -> str:
        """The store's clock read now, in UTC (what the store records)."""
        return self._reading().isoformat()

    def local_time(self) -> str:
        """The store's clock read now, in this machine's time zone to the second: the local
        time the runtime's requests state (the kernel's local-time, the session window's
        end), so they agree with the times the store records. A reading the zone cannot hold
        (within hours of year 1 or 9999) is shown in UTC."""
        reading = self._reading()
        try:
            local = reading.astimezone()
        except OverflowError:  # past the years the zone's time can state: the same instant
            local = reading
        return local.isoformat(timespec="seconds")

    def _reading(self) -> datetime:
        """The store's clock read now, in UTC. A reading without a UTC offset is refused:
        ``astimezone`` would read it as the machine's local time, and the stored times (and
        the encoding that shows them) would then depend on the time zone; so is one whose UTC
        time is outside the years 1-9999, which no stored time can state."""
        reading = self.now()
        if not isinstance(reading, datetime) or reading.utcoffset() is None:
            raise InputError(
                f"the store's clock must return times with a UTC offset, not {reading!r}: give "
                "morphz.open(now=...) a clock such as lambda: datetime.now(UTC)"
            )
        try:
            return reading.astimezone(UTC)
        except OverflowError as exc:
            raise InputError(
                f"the store's clock returned {reading.isoformat()}, whose UTC time is outside "
                "the years 1-9999 a stored time can state: give morphz.open(now=...) a clock "
                "that returns the current time, such as lambda: datetime.now(UTC)"
            ) from exc

    def context(
        self, context_id: str = DEFAULT_CONTEXT, *, create: bool = False, window: int | None = None
    ) -> Context:
        """The context named ``context_id``; ``create=True`` makes it when it does not exist.
        ``window`` is the new context's; for one that exists it must be its window (or None):
        ``Context.set_window`` changes a window. An existing context opens whatever Python
        named it (:func:`~morphz.checks.check_stored_id`); a new one's id keeps the rules for new
        ids (``create_context``)."""
        check_stored_id(context_id, "context id")
        if window is not None:
            check_window(window)
        if create and context_id not in self.store.context_ids():
            try:
                return self.create_context(context_id, window=window)
            except ContextExistsError:
                pass  # another opener created it meanwhile: open it, as asked

        with self.store.read(context_id) as r:  # ContextNotFoundError with a hint when absent
            stored = r.row.window
        if window is not None and window != stored:
            raise InputError(
                f"context '{context_id}' exists with a window of {stored} ticks, not {window}: "
                f"leave window out to open it, or change it with "
                f"db.context('{context_id}').set_window({window})"
            )
        return Context(self, context_id)

    def create_context(self, context_id: str, *, window: int | None = None) -> Context:
        check_new_context_id(context_id)  # no leading '-': a command line could not name it
        size = DEFAULT_WINDOW if window is None else window
        check_window(size)
        self.store.create_context(context_id, size, self.timestamp())
        return Context(self, context_id)

    def contexts(self) -> list[str]:
        return self.store.context_ids()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Database:
        if self.store.closed:
            raise StoreError(CLOSED)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _clock(now: object) -> Callable[[], datetime]:
    """The store's clock: ``now``, or the default one (UTC now) for None."""
    if now is None:
        return utc_now
    if not callable(now):
        raise InputError(
            f"now is the store's clock, a function returning the time, not {now!r}: e.g. "
            "lambda: datetime.now(UTC), or None for the default"
        )
    return now


_EXAMPLE = "a path such as ~/.morphz/morphz.db"


def store_path(target: str | os.PathLike[str]) -> Path:
    """The file a store target names: a path (``~`` and ``~user`` expanded), or a ``file:``
    URI of a local file (``file:///home/me/morphz.db``, as SQLite and other tools take it).
    Refused with what to give instead: a PostgreSQL DSN (not in this release), ``:memory:``
    (a store keeps a writer and a reader per thread, each a connection of its own, and the
    recall index's rebuild and WAL mode need a file), a URI with a query or of another host, and
    a ``~user`` whose home is unknown."""
    if not isinstance(target, str | os.PathLike):
        raise InputError(f"a store is a file path, not {target!r}: pass {_EXAMPLE}")
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        raise StoreError(
            f"this Morphz release stores contexts in SQLite only: pass {_EXAMPLE} (the "
            "PostgreSQL backend is a separate, planned issue)"
        )
    name = _file_uri(text) if text[:5].lower() == "file:" else text
    if name == ":memory:":
        raise InputError(
            "a store is a file: :memory: (SQLite's in-memory database) cannot hold one, since a "
            "store opens a connection per thread and keeps its log beside the file; for a "
            "throwaway store, give a file in a temporary folder (made by mktemp -d, or "
            "tempfile.mkdtemp() in Python)"
        )
    if name.endswith(("/", os.sep)):  # a folder's name: a file would be made under it
        raise InputError(
            f"{text!r} names a folder: a store is a file, e.g. {name.rstrip('/' + os.sep)}"
            f"{os.sep}morphz.db (--db / MORPHZ_DB must name the store's file)"
        )
    try:
        return Path(name).expanduser()
    except RuntimeError as exc:  # ~user of no user, or no home folder to expand ~ to
        head = name.split("/", 1)[0]
        raise InputError(
            f"{text!r} starts with {head}, but no home folder is known for it: give the "
            "store's path in full, e.g. /home/NAME/.morphz/morphz.db"
        ) from exc


def _file_uri(text: str) -> str:
    """The local file a ``file:`` URI names (percent-escapes decoded)."""
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        raise InputError(
            f"a store's file: URI takes no query or fragment ({text!r}): give the file alone, "
            "e.g. file:///home/me/morphz.db or /home/me/morphz.db"
        )
    if parts.netloc not in ("", "localhost"):
        raise InputError(
            f"{text!r} names a file on the host {parts.netloc!r}: a store is a local file; "
            "write file:///path/to/morphz.db (three slashes) or the path alone"
        )
    if not parts.path:
        raise InputError(f"{text!r} names no file: give one, e.g. file:///home/me/morphz.db")
    return url2pathname(parts.path)


def open(
    target: str | os.PathLike[str],
    *,
    synchronous: str = "NORMAL",
    busy_timeout: float = 30.0,
    create: bool = True,
    now: Callable[[], datetime] | None = utc_now,
    progress: Callable[[str, int, int], None] | None = None,
) -> Database:
    """Open a store: a filesystem path opens an embedded SQLite database, creating the file
    (and its folder) unless ``create=False``. ``synchronous`` is NORMAL (a process crash loses
    nothing committed) or FULL (power loss neither). A store from an older release may need its
    recall indexes rebuilt as it opens (once, before it is returned): ``progress(context, done,
    total)`` reports each rebuild's events. A context whose events cannot all be read (a
    damaged store) keeps its event documents as they were, marked stale (searchable;
    ``recall_index.inspect()`` says it is not current), and has its frames' documents rewritten
    (they need no event): the store still opens, so that
    the audit can report the damage, and the next open tries again; so does a context with a
    frame that cannot be read (its frames' documents stay as they were too). ``busy_timeout``
    is the seconds a write waits for another writer of the store, another process's or another
    thread's of this one, before it is refused (StoreBusyError). ``now`` is the store's clock
    (None: UTC now)."""
    path = store_path(target)
    clock = _clock(now)
    check_progress(progress, "(context, done, total)")
    store = SqliteStore(path, synchronous=synchronous, busy_timeout=busy_timeout, create=create)
    db = Database(store, now=clock)
    try:  # a recall index missing (a store from before recall) or made the old way: rebuild
        for context_id in store.stale_recall():  # it stays marked until its rebuild completes
            report = None if progress is None else functools.partial(progress, context_id)
            _rebuild_unless_damaged(db.context(context_id), report)
    except BaseException:
        db.close()
        raise
    return db


def _rebuild_unless_damaged(ctx: Context, progress: Callable[[int, int], None] | None) -> None:
    """Rebuild ``ctx``'s stale recall index at open. When an event or a frame cannot be read
    (DamagedStoreError), leave the index stale (its event documents as they were) but rewrite
    its frames' documents, which need no event (review 17l), if they can be read (review 20c).
    Refusing to open would leave no way to audit or export the store (review 14)."""
    try:
        ctx.recall_index.rebuild(progress=progress)
    except DamagedStoreError:
        # stale still (inspect says so); the audit reports the damage
        _refresh_frames_unless_damaged(ctx)


def _refresh_frames_unless_damaged(ctx: Context) -> None:
    """Rewrite ``ctx``'s frame documents (the index stays stale); a frame that cannot be read
    either leaves them as they were: the store must still open for the audit (review 17m)."""
    try:
        ctx.recall_index.refresh_frames()
    except StoreBusyError:
        raise
    except StoreError:  # a damaged frame row: the audit names it; the index says it is stale
        return
