"""What SQLite says about a store's files, worded with what to do next: a folder given as the
store, files or a folder that cannot be written, a read-only file system (WAL mode keeps
``-wal`` and ``-shm`` files beside the store, and creates them even to read it), a file that is
not a database or is damaged, and the damage SQLite's ``PRAGMA quick_check`` finds (the audit's
check of the file itself)."""

from __future__ import annotations

import os
import resource
import shlex
import sqlite3
from pathlib import Path

from morphz.errors import StoreError

# SQLite's primary result codes (the low byte of an extended code)
_CORRUPT, _READONLY, _CANTOPEN, _NOTADB, _IOERR, _FULL = 11, 8, 14, 26, 10, 13
# Below this much free space, an I/O error is taken for a full file system: opening a store in
# WAL mode makes its 32 KiB -shm file (SQLITE_IOERR_SHMSIZE when it cannot), and a write needs
# room for its pages in the -wal.
LOW_SPACE = 1 << 20
NOT_A_STORE = (
    "the file is not a Morphz store or is damaged: check --db / MORPHZ_DB, or restore it "
    "from a backup; nothing was changed"
)
DAMAGED = (
    "the store file is damaged: run `morphz context audit` to see where, and restore the "
    "store from a backup"
)


def advice(exc: sqlite3.Error, path: Path, *, opening: bool = False, alone: bool = True) -> str:
    """What to do about the driver error ``exc`` on the store at ``path`` (``opening`` it, or
    reading or writing it once open), or "" when there is nothing to add to SQLite's message.
    ``alone``: the failed read or write is all the command did, so nothing was changed (an
    agent run's write is not: the run's steps before it stand)."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in (_CORRUPT, _NOTADB):
        return NOT_A_STORE if opening else _unchanged(DAMAGED, alone)
    if code == _CANTOPEN:
        return a_folder(path) or read_only_media(path) or unreadable(path) or unwritable(path)
    if code == _READONLY or "readonly" in str(exc):
        return read_only_media(path) or unwritable(path)
    if code == _FULL or (code == _IOERR and _low_space(path)):
        return _unchanged(full(path), alone, ": run the command again once there is room")
    if code == _IOERR:
        refused = _unchanged(io_refused(path), alone)
        return f"{LOST_WAL}; otherwise {refused}" if _lost_wal(path) else refused
    return ""


def _unchanged(said: str, alone: bool, then: str = "") -> str:
    """``said``, and when the failure is the command's only write (``alone``), that nothing
    was changed (and ``then``, what to do next)."""
    return f"{said}; nothing was changed{then}" if alone else said


def os_advice(path: Path) -> str:
    """What to do when the store at ``path`` or its folder cannot be made (an OSError before
    SQLite opens it), or "" when there is nothing to add to the system's reason."""
    if not path.parent.is_dir():  # a folder above could not be made: the reason names it
        return read_only_media(path)
    return read_only_media(path) or unwritable(path)


LOST_WAL = (
    "when another process has the store open and its -wal file was deleted meanwhile, that "
    "process's next write copies what it wrote into the store and lets it open again (or end "
    "that process)"
)
_SHM_SIZE = 32 * 1024  # the -shm file of a store some process has open


def _lost_wal(path: Path) -> bool:
    """Whether the store's files look as they do when another process has it open and its
    -wal was deleted: a whole -shm file (that process's), and no -wal or an empty one (made
    by this open). A -shm cut short by a file size limit is smaller."""
    shm, wal = Path(f"{path}-shm"), Path(f"{path}-wal")
    try:
        return shm.stat().st_size >= _SHM_SIZE and (not wal.exists() or not wal.stat().st_size)
    except OSError:  # gone meanwhile: not that case
        return False


def io_refused(path: Path) -> str:
    """That the system refused to read or write the store's files though their file system has
    room (an I/O error there, such as EFBIG or EDQUOT), what may have refused it, and what to
    do."""
    free = free_space(path)
    room = "" if free is None else f" ({free:,} bytes free)"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        cause = (
            f"this process may not write files past {limit:,} bytes (a file size limit: ulimit "
            "-f, systemd's LimitFSIZE): raise it, or check for a disk quota"
        )
    else:
        cause = "check for a disk quota or a file size limit (ulimit -f), then the disk itself"
    return (
        f"the system refused to read or write the store's files though the file system holding "
        f"{path} has room{room}: {cause}"
    )


def _file_system(path: Path) -> os.statvfs_result | None:
    """What the file system holding ``path`` (its nearest folder that exists) says of itself,
    or None when that cannot be read."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.statvfs(folder)
    except OSError:
        return None


def free_space(path: Path) -> int | None:
    """The bytes free for this user on the file system holding ``path``, or None when that
    cannot be read."""
    found = _file_system(path)
    return None if found is None else found.f_bavail * found.f_frsize


def read_only_media(path: Path) -> str:
    """That the file system holding the store is mounted read-only (a backup on read-only
    media, a container's read-only layer), and what to do; "" when it is not (or cannot be
    told). No file mode can help there: SQLite's WAL mode writes the -shm file even to read."""
    found = _file_system(path)
    if found is None or not found.f_flag & getattr(os, "ST_RDONLY", 1):
        return ""
    if not path.exists():
        return (
            f"{path} is on a read-only file system, where no store can be made: give a store "
            "path on a writable one (--db / MORPHZ_DB)"
        )
    return (
        f"{path} is on a read-only file system, and SQLite's WAL mode writes {path.name}-shm "
        f"(and {path.name}-wal) beside the store even to read it: copy {path.name} (with its "
        "-wal file, if there is one) to a writable folder and open the copy there"
    )


def _low_space(path: Path) -> bool:
    free = free_space(path)
    return free is not None and free < LOW_SPACE


def full(path: Path) -> str:
    """That the file system holding the store has no room left, and what to do."""
    free = free_space(path)
    left = "" if free is None else f" ({free:,} bytes free)"
    return (
        f"the file system holding {path} is full{left}: free some space on it (or move the "
        "store to a file system with room)"
    )


def explained(
    message: str, exc: sqlite3.Error, path: Path, *, opening: bool = False, alone: bool = True
) -> str:
    """``message`` (which ends with the driver's), followed by :func:`advice` when there is
    some."""
    more = advice(exc, path, opening=opening, alone=alone)
    return f"{message}: {more}" if more else message


def write_failed(message: str, exc: sqlite3.Error, path: Path) -> StoreError:
    """The StoreError of a write to the store at ``path`` that failed with the driver error
    ``exc`` (``message`` ends with it): the message is worded for a command that made only
    this write, its ``cause`` for one whose earlier writes stand (an agent run)."""
    return StoreError(
        explained(message, exc, path), cause=explained(message, exc, path, alone=False)
    )


def _denied(path: Path, mode: int) -> list[Path]:
    """Those of the store's files (itself, its -wal and -shm) that exist and deny ``mode``."""
    files = (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
    return [p for p in files if p.exists() and not os.access(p, mode)]


def _named(files: list[Path]) -> str:
    return ", ".join(str(p) for p in files)


def _them(files: list[Path]) -> str:
    return "it" if len(files) == 1 else "them"


def _quoted(files: list[Path]) -> str:
    return " ".join(shlex.quote(str(p)) for p in files)


def a_folder(path: Path) -> str:
    """That ``path`` is a folder and the store is a file, with one to name; "" when it is no
    folder (``--db ''`` is the current folder, and MORPHZ_DB may name the folder the stores
    are kept in)."""
    if not path.is_dir():
        return ""
    return (
        f"{path} is a folder: --db / MORPHZ_DB must name the store's file, e.g. "
        f"{shlex.quote(str(path / 'morphz.db'))}"
    )


def unreadable(path: Path) -> str:
    """Which of the store's files cannot be read or written, and what to do; "" when all can
    (SQLite opens the store and its -wal and -shm for reading and writing)."""
    files = _denied(path, os.R_OK | os.W_OK)
    if not files:
        return ""
    return f"{_named(files)} cannot be read and written: make {_them(files)} readable and " + (
        f"writable (chmod u+rw {_quoted(files)})"
    )


def unwritable(path: Path) -> str:
    """Which of the store's files and folder cannot be written, and what to do; "" when all of
    them can (the cause is elsewhere)."""
    files = _denied(path, os.W_OK)
    notes = []
    if files:
        notes.append(
            f"{_named(files)} cannot be written: make {_them(files)} writable "
            f"(chmod u+w {_quoted(files)})"
        )
        if path not in files:
            notes[-1] += (
                f"; a read of the store while {path.name} was read-only leaves its -wal and -shm "
                "files with the store's mode"
            )
    folder = path.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        notes.append(
            f"its folder {folder} cannot be written: SQLite's WAL mode creates "
            f"{path.name}-wal and {path.name}-shm beside the store, even to read it: make the "
            "folder writable, or copy the store to a folder that is"
        )
    return "; ".join(notes)


def damage(conn: sqlite3.Connection) -> list[str]:
    """SQLite's ``PRAGMA quick_check`` of the whole file on ``conn`` (one pass over it, inside
    the read open on it), worded with what to do: one problem naming the damaged tables, or
    none when the file is sound. A busy or interrupted check is raised."""
    try:
        rows = _check(conn, "")
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError as exc:  # SQLite stops at damage it cannot step over; the
        try:  # check of one problem may still say which page
            rows = _check(conn, "(1)")
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            rows = [str(exc)]
    if rows == ["ok"]:
        return []
    hit = _damaged_tables(conn)
    found = f"PRAGMA quick_check: {'; '.join(rows[:3])}".replace("\n", " ")
    where = f" in the table{'s' if len(hit) > 1 else ''} {', '.join(hit)}" if hit else ""
    owners = _index_owners(conn, hit)
    if hit and all(name.startswith("recall_") for name in hit) and owners:
        rebuild = " and ".join(
            f"`morphz context recall-index rebuild {shlex.quote(c)}`" for c in owners
        )
        todo = (
            "the damage is in the recall index alone (events and mind are intact): run "
            f"{rebuild}, and if that fails too, restore the store from a backup"
        )
    else:
        todo = "restore the store from a backup (keep a copy of this file first)"
    return [f"store file: SQLite reports it damaged{where} ({found}): {todo}"]


def _index_owners(conn: sqlite3.Connection, hit: list[str]) -> list[str]:
    """The contexts whose recall index the damaged tables ``hit`` are, when every one of them
    is a context's FTS table (or one of its shadow tables); [] when any is not."""
    tables = {r[1]: r[0] for r in conn.execute("SELECT context_id, fts_table FROM recall_meta")}
    owners: list[str] = []
    for name in hit:
        base = next((t for t in tables if name == t or name.startswith(f"{t}_")), None)
        if base is None:
            return []
        if tables[base] not in owners:
            owners.append(tables[base])
    return owners


def _check(conn: sqlite3.Connection, argument: str) -> list[str]:
    return [r[0] for r in conn.execute(f"PRAGMA quick_check{argument}")]


def _damaged_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables whose own check (with their indexes) fails; run only once the whole file's
    check failed, to say where."""
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 ORDER BY name"
        )
    ]
    hit = []
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            sound = _check(conn, f"({quoted})") == ["ok"]
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            sound = False
        if not sound:
            hit.append(name)
    return hit
