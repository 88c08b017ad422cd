"""Importing a JSON Lines history into a context (Context.import_history): every line
validated first, then all of them appended in one database transaction, in chunks, as one
batch (one clock tick at most), with the retirements that tick makes due finalized in it."""

from __future__ import annotations

import time as time_module
from pathlib import Path
from typing import IO, TYPE_CHECKING

from morphz import events as ev
from morphz import observe as appending
from morphz.checks import check_id, check_progress
from morphz.mind.lifecycle import CLOCK_KINDS, advances_clock

if TYPE_CHECKING:
    from morphz.contextdb import Context


def import_history(
    ctx: Context,
    source: str | Path | IO[str] | IO[bytes],
    session: str,
    progress: appending.ProgressFn | None,
) -> appending.ImportReport:
    """See :meth:`Context.import_history`."""
    check_id(session, "session id")
    check_progress(progress)
    started = time_module.perf_counter()
    items = appending.parse_all(appending.read_lines(source))
    recorded = ctx.db.timestamp()
    tick = advances_clock([item.kind for item in items])
    events: list[ev.Event] = []
    # the "(ticked)" marker: on the first line of a clock kind, whichever chunk holds it
    marker = next((i for i, item in enumerate(items) if item.kind in CLOCK_KINDS), 0)
    with ctx.db.store.write(ctx.id) as w:
        for start in range(0, len(items), appending.IMPORT_CHUNK):
            chunk = items[start : start + appending.IMPORT_CHUNK]
            mine = tick and start <= marker < start + len(chunk)
            done = appending.append(
                w, session, chunk, recorded, tick and start == 0,
                ticked=marker - start if mine else None, marked=mine,
            )  # fmt: skip
            events.extend((done[0], done[-1]))
            if progress is not None:
                progress(start + len(chunk), len(items))
        if tick:
            ctx._finalize(w, session, recorded)
        w.touch_session(session, w.row.last_seq, recorded)
    seconds = time_module.perf_counter() - started
    return appending.ImportReport(ctx.id, len(items), events[0].ref, events[-1].ref, seconds)
