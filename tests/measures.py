"""Measures of work for scale tests that assert no timing: SQLite virtual-machine steps."""

from __future__ import annotations

from collections.abc import Callable

import morphz


def vm_steps(db: morphz.Database, action: Callable[[], object]) -> int:
    """SQLite virtual-machine instructions ``action`` runs on the store's writer and on this
    thread's reader (the connections every ctx call of this thread uses)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    conns = (db.store._writer, db.store._reader())  # type: ignore[attr-defined]
    for conn in conns:
        conn.set_progress_handler(count, 1)
    try:
        action()
    finally:
        for conn in conns:
            conn.set_progress_handler(None, 0)
    return steps[0]
