"""Long listings printed as they are read: ``morphz context events`` on a history of any length
holds one page of events and one chunk of output at a time, never the whole history (review
17c: a list of every event, then the whole JSON document as one string, took 1 GB for 200,000
events). What it prints is byte for byte what printing the whole list at once printed. Each
format reads the history twice, holding one page at a time: the text table for its columns'
widths, the JSON list to find a damaged event before printing (both passes end at the same
last event, read once at the start)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import morphz
from morphz.events import Event

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
