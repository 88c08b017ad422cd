"""Long listings printed as they are read: ``morphz context events`` on a history of any length
holds one page of events and one chunk of output at a time, never the whole history (review
17c: a list of every event, then the whole JSON document as one string, took 1 GB for 200,000
events). What it prints is byte for byte what printing the whole list at once printed. Each
format reads the history twice, holding one page at a time: the text table for its columns'
widths, the JSON list to find a damaged event before printing (both passes end at the same
last event, read once at the start). Also ``morphz context list``, which lists a context whose
status cannot be read with why."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import morphz
from morphz.errors import DamagedStoreError, InputError
from morphz.events import Event
from morphz.interfaces import advice, render
from morphz.interfaces.tables import visible
from morphz.results import Status

PAGE = 1_000  # events read at a time (each page in a read of its own)
CHUNK = 64 * 1024  # characters of output written at a time


def last_seq(ctx: morphz.Context) -> int:
    """The seq of the last event there is now: where a listing started now ends (read once by
    the command, so that every pass over the history lists the same events)."""
    with ctx.db.store.read(ctx.id) as r:
        return r.row.last_seq


def history(ctx: morphz.Context, after: int, limit: int | None, last: int) -> Iterator[Event]:
    """The events ``ctx.events(after, limit)`` returns, read a page at a time, each page in a
    read of its own (none stays open however slowly the output is taken) and none past ``last``
    (:func:`last_seq` at the start): events never change once appended, so the pages make the
    list that one read at the start gives."""
    left = limit
    while after < last and (left is None or left > 0):
        size = PAGE if left is None else min(PAGE, left)
        page = [e for e in ctx.events(after, size) if e.seq <= last]
        if not page:
            return
        yield from page
        after = page[-1].seq
        left = None if left is None else left - len(page)


def read_through(events: Iterable[Event]) -> None:
    """Read every event of ``events`` (holding none): a damaged one raises its typed error
    before anything is printed, so the output is one JSON document, the list or the error."""
    deque(events, maxlen=0)


def json_lines(items: Iterable[Any], dump: Callable[[list[Any]], str]) -> Iterator[str]:
    """The lines of ``dump(list(items))``, where ``dump`` writes a list as indented JSON
    (``"[\\n" + elements joined by ",\\n" + "\\n]"``, or ``"[]"``): each element as ``dump``
    writes it in a list of its own, one at a time."""
    held: str | None = None  # the element before, printed once it is known not to be the last
    for item in items:
        one = dump([item])
        assert one.startswith("[\n") and one.endswith("\n]"), one[:20]
        yield "[" if held is None else held + ","
        held = one[2:-2]
    if held is None:
        yield "[]"
        return
    yield held
    yield "]"


def chunks(lines: Iterable[str], size: int = CHUNK) -> Iterator[str]:
    """``lines`` joined by line breaks into texts of about ``size`` characters, each to be
    printed with a line break after it (as ``output.out`` does)."""
    held: list[str] = []
    total = 0
    for line in lines:
        held.append(line)
        total += len(line) + 1
        if total >= size:
            yield "\n".join(held)
            held, total = [], 0
    if held:
        yield "\n".join(held)


# ------------------------------------------------------------------ contexts

# a context's status, or why it cannot be read
Listed = tuple[str, Status | DamagedStoreError | InputError]


def contexts(db: morphz.Database) -> list[Listed]:
    """Every context of ``db`` with its status, in name order: one whose status cannot be read
    (a damaged row: a stored setting, an event of its inbox, a frame) is listed with that
    error, and the others as they are (review 20c: one damaged context listed none); so is one
    whose name this build cannot open (review 21a: a newer Python's letters made one fail the
    whole list; such names now open, and any other refusal still lists the rest)."""
    now = db.local_time()
    listed: list[Listed] = []
    for name in db.contexts():
        try:
            listed.append((name, db.context(name).status(local_time=now)))
        except (DamagedStoreError, InputError) as exc:
            listed.append((name, exc))
    return listed


def contexts_json(listed: list[Listed]) -> list[dict[str, Any]]:
    """Each context's status object, or ``{"context": CTX, "error": {"code", "message"}}``."""
    return [
        status.to_dict()
        if isinstance(status, Status)
        else {"context": name, "error": status.to_dict() | {"message": _here(status.message)}}
        for name, status in listed
    ]


def _here(said: str) -> str:
    """``said`` with the commands it advises run on the listed store (its ``--db``)."""
    return advice.on_this_store(said)


def contexts_text(listed: list[Listed]) -> str:
    """The table of the contexts whose status was read, then a line for each of the others."""
    sound = [status for _, status in listed if isinstance(status, Status)]
    damaged = [(name, exc) for name, exc in listed if not isinstance(exc, Status)]
    parts = [render.contexts(sound)] if sound or not damaged else []
    parts += [
        visible(f"context {name}: its status cannot be read: {_here(str(exc))}")
        for name, exc in damaged
    ]
    return "\n\n".join(parts)
