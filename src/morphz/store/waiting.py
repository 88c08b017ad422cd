"""Giving up waiting for a store another process holds.

A write waits up to ``busy_timeout`` for another process's write lock. A caller that is being
stopped (an activation recording its interruption when the person presses Ctrl-C again) can
stop those waits: it puts a :class:`threading.Event` in :data:`GIVE_UP` (a context variable,
which the worker threads of asyncio's ``to_thread`` and the runtime's jobs inherit) and sets it;
a write then waiting for the lock gives up at its next try (StoreBusyError), and every later
write of that context gives up at once when the store is locked. A write that holds the lock
is not stopped. The same goes for a write waiting for another thread of the process to finish
its write (the store's in-process writer lock, :func:`holding`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from morphz.errors import StoreBusyError

# SQLite's own wait for the lock, per try, of a write whose caller may give up: it cannot be
# told to stop, so the tries are short and the waiting is done between them
GIVING_UP_TRY_MS = 50
GIVE_UP: ContextVar[threading.Event | None] = ContextVar("morphz_give_up_waiting", default=None)


def given_up() -> bool:
    """Whether the caller's context gave up waiting for a locked store."""
    event = GIVE_UP.get()
    return event is not None and event.is_set()


def take(lock: threading.RLock, deadline: float) -> bool:
    """Take ``lock`` by ``deadline`` (a ``time.monotonic()`` reading): whether it was taken.
    A caller that may give up waiting (:data:`GIVE_UP`) waits in short tries, between which it
    looks at whether it gave up (then it stops waiting: False)."""
    short = GIVE_UP.get() is not None
    depth = lock._recursion_count()  # type: ignore[attr-defined]
    try:
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            if short:
                left = min(left, GIVING_UP_TRY_MS / 1000)
            if lock.acquire(timeout=min(left, threading.TIMEOUT_MAX)):
                return True
            if given_up() or time.monotonic() >= deadline:
                return False
    except BaseException:  # a Ctrl-C as the lock was granted: the caller never holds it
        if lock._recursion_count() > depth:  # type: ignore[attr-defined]
            lock.release()
        raise


@contextmanager
def holding(lock: threading.RLock, busy_timeout: float, path: Path) -> Iterator[float]:
    """Hold the writer lock of the store at ``path`` (a process's, shared by its threads),
    waiting for another thread's write to end until ``busy_timeout`` passes or the caller gives
    up waiting: then a StoreBusyError, as for another process's write (review 20c: a write
    waited for ever). Yields the deadline of the wait, which SQLite's wait then shares."""
    deadline = time.monotonic() + busy_timeout
    if not take(lock, deadline):
        raise StoreBusyError(
            f"gave up waiting for the store {path}: another thread of this process writes to it"
            if given_up()
            else f"the store {path} stayed locked for {busy_timeout:g}s; another thread of this "
            "process writes to it (such as a long import): retry later or "
            f"{StoreBusyError.WAIT_LONGER}"
        )
    try:
        yield deadline
    finally:
        lock.release()
