"""Giving up waiting for a store another process holds.

A write waits up to ``busy_timeout`` for another process's write lock. A caller that is being
stopped (an activation recording its interruption when the person presses Ctrl-C again) can
stop those waits: it puts a :class:`threading.Event` in :data:`GIVE_UP` (a context variable,
which the worker threads of asyncio's ``to_thread`` and the runtime's jobs inherit) and sets it;
a write then waiting for the lock gives up at its next try (StoreBusyError), and every later
write of that context gives up at once when the store is locked. A write that holds the lock
is not stopped.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar

# SQLite's own wait for the lock, per try, of a write whose caller may give up: it cannot be
# told to stop, so the tries are short and the waiting is done between them
GIVING_UP_TRY_MS = 50
GIVE_UP: ContextVar[threading.Event | None] = ContextVar("morphz_give_up_waiting", default=None)


def given_up() -> bool:
    """Whether the caller's context gave up waiting for a locked store."""
    event = GIVE_UP.get()
    return event is not None and event.is_set()
