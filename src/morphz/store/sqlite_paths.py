"""A store's files as Morphz makes them, the store files this thread is writing, and the
options a store is opened with (checked before anything is opened).

A store holds the user's conversations, tool output and the agent's memory, so a new one is
private to its owner: the folders Morphz makes for it (``~/.morphz`` by default) are created
0700 and the file 0600, before SQLite opens it (SQLite gives the ``-wal`` and ``-shm`` files the
store's mode). A folder or store that exists keeps its mode: one its owner shared stays shared.

A store file is known by its device and inode, so that Databases opened on one file (by one path
or by two, through a link) are seen as one: a thread that is writing the file through one of
them must not begin a write through another, which would wait for the lock the thread holds
itself (``busy_timeout``, then a StoreBusyError blaming another process). Each thread keeps the
files it is writing in :func:`files_written`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from morphz.errors import InputError, StoreError

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600

FileKey = tuple[int, int]  # (st_dev, st_ino) of a store file
_thread = threading.local()


def make_private_folders(folder: Path) -> None:
    """Make ``folder`` and the folders above it that do not exist, each 0700 (less the umask);
    those that exist are left as they are. Another process making one at the same moment is
    no error."""
    missing: list[Path] = []
    while not folder.is_dir() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=PRIVATE_FOLDER)
        except FileExistsError:
            if not made.is_dir():  # a file is in the way: say so as mkdir does
                raise


def create_private_file(path: Path) -> FileKey | None:
    """Create the store file ``path`` empty and 0600 (less the umask) when nothing is there,
    and return its identity (None when nothing was made); a file (or anything else) already
    there is left alone, whoever created it just now. A symbolic link to a file not there yet
    is followed: the file it names is made 0600."""
    flags = os.O_CREAT | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        if not (path.is_symlink() and not path.exists()):
            return None  # SQLite opens what is there (and names a folder or a foreign file)
        try:  # a link to a file not there yet (a store kept on another volume): make it
            descriptor = os.open(path, flags, PRIVATE_FILE)
        except OSError:  # (its folder is missing, say): SQLite's open says so, by name
            return None
    try:
        made = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    return made.st_dev, made.st_ino


def remove_unwritten(path: Path, made: FileKey | None) -> None:
    """Remove the store file ``path`` that :func:`create_private_file` made (``made``) when a
    store could not be created in it and it is still that file, empty: a failed create then
    leaves nothing behind (a full disk left an empty file, which later commands took for "not
    a Morphz store yet"). A file that was there before, or that has content, stays."""
    if made is None:
        return
    try:
        found = os.stat(path)
        if (found.st_dev, found.st_ino) == made and found.st_size == 0:
            os.unlink(path)
    except OSError:  # gone, or not ours to remove: the error being raised says what failed
        return


def file_key(path: Path) -> FileKey:
    """The identity of the store file ``path`` (it exists: its writer has it open)."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


def files_written() -> dict[FileKey, threading.RLock]:
    """The store files this thread is writing now (one write open on each), by
    :func:`file_key`, each with the writer lock of the Database writing it: this thread's
    record, shared by every Database of the process it writes through. An entry whose lock
    this thread does not hold is a write that ended without clearing it (an interrupt as it
    ended): see :func:`writing`."""
    held: dict[FileKey, threading.RLock] | None = getattr(_thread, "files", None)
    if held is None:
        held = _thread.files = {}
    return held


def writing(file: FileKey, through: threading.RLock | None = None) -> bool:
    """Whether this thread has a write open on ``file`` (through any Database of the process,
    or only through the one whose writer lock is ``through``); an entry a write left behind as
    it was interrupted is dropped here."""
    written = files_written()
    lock = written.get(file)
    if lock is None:
        return False
    if not owned(lock):
        del written[file]
        return False
    return through is None or lock is through


def owned(lock: threading.RLock) -> bool:
    """Whether this thread holds ``lock``."""
    return bool(lock._is_owned())  # type: ignore[attr-defined]


def check_options(path: str | Path, synchronous: object, busy_timeout: object) -> None:
    """Refuse, before anything is opened, options SQLite would fail on later or misread."""
    if not isinstance(synchronous, str) or synchronous.upper() not in ("NORMAL", "FULL"):
        raise StoreError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
    if (
        isinstance(busy_timeout, bool)
        or not isinstance(busy_timeout, int | float)
        or not busy_timeout >= 0  # NaN too
    ):
        raise InputError(
            f"busy_timeout is the seconds to wait for a store another process holds: a number "
            f"of at least 0, not {busy_timeout!r}"
        )
    if "\x00" in str(path):
        raise InputError(f"a store path cannot hold a NUL character: {str(path)!r}")
