"""The recall API on a context: ``ctx.recall`` and ``ctx.recall_index``.

Operator reads (:meth:`Recall.search`, :meth:`Recall.read`, :meth:`Recall.frame`) change
nothing. The agent's path, :meth:`Recall.deliver`, runs the same read and appends its result as
a new ``recall_result`` observation (which does not tick the clock); nothing enters the mind until
the agent commits a transaction that derives from it.
"""

from __future__ import annotations

import inspect
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from morphz.checks import check_progress
from morphz.errors import InputError
from morphz.events import Event
from morphz.ids import make_ref
from morphz.observe import Observation
from morphz.recall import maintain
from morphz.recall.documents import time_us
from morphz.recall.read import DEFAULT_READ_CHARS, ReadPage, parse_identity, read
from morphz.recall.search import SearchPage, search
from morphz.recall.traverse import Direction, TraversalPage, traverse

if TYPE_CHECKING:
    from morphz.contextdb import Context
    from morphz.store.recall_base import BuildingTable

CURSOR_KEY = "cursor-key"
REBUILD_BATCH = 5000


class Recall:
    """Search, read and traverse one context's history and mind."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"Recall({self.ctx!r})"

    def search(
        self,
        query: str | None = None,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int = 10,
        cursor: str | None = None,
        kinds: list[str] | None = None,
        lifecycle: list[str] | None = None,
    ) -> SearchPage:
        """Lexical search (BM25), a time range (chronological), or both. ``since`` inclusive,
        ``until`` exclusive, both with a UTC offset; ``limit`` 1-100; pass ``next_cursor`` back
        unchanged for the next page. ``kinds``: observations, frames, replies, transactions or
        event kinds; ``lifecycle``: active, retiring, retired."""
        with self.ctx.db.store.read(self.ctx.id) as r:
            key = r.recall.secret(CURSOR_KEY)
            return search(
                r,
                key,
                query,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
                kinds=kinds,
                lifecycle=lifecycle,
            )

    def read(self, ref: str, *, offset: int = 0, limit: int = DEFAULT_READ_CHARS) -> ReadPage:
        """A page of one event's full content by ``@e42`` or ``<context>:@e42``."""
        with self.ctx.db.store.read(self.ctx.id) as r:
            return read(r, ref, offset, limit)

    def frame(
        self,
        frame_id: str,
        *,
        depth: int = 2,
        direction: Direction | None = None,
        include_events: bool = False,
        include_bodies: bool = False,
        budget: int = 50,
        cursor: str | None = None,
    ) -> TraversalPage:
        """Traverse from a frame, or an event ref, through source and relation links (depth <=
        4); ``direction`` by default ancestors from a frame, descendants (the frames citing it)
        from an event. An event's full identity (``CTX:@e42``, as :meth:`read` takes it) names
        its ref (no frame id holds ``@``)."""
        if isinstance(frame_id, str) and ":@" in frame_id:
            frame_id = make_ref(parse_identity(self.ctx.id, frame_id))
        with self.ctx.db.store.read(self.ctx.id) as r:
            key = r.recall.secret(CURSOR_KEY)
            return traverse(
                r,
                key,
                frame_id,
                depth=depth,
                direction=direction,
                include_events=include_events,
                include_bodies=include_bodies,
                budget=budget,
                cursor=cursor,
            )

    def deliver(
        self,
        op: Literal["search", "read", "frame"],
        *,
        session: str = "default",
        activation: str | None = None,
        **params: Any,
    ) -> tuple[SearchPage | ReadPage | TraversalPage, Event]:
        """The agent's recall: run ``op`` with ``params`` and append the result as a
        ``recall_result`` observation in ``session`` (of ``activation``, when it is an agent's
        call: see Context.observe_batch). Returns the result and the new event."""
        result: SearchPage | ReadPage | TraversalPage
        if op == "search":
            result = self._fitting(_bound(self.search, op, params), params, "limit", 10)
        elif op == "read":
            result = self._read_whole(_bound(self.read, op, params)(**params), params)
        elif op == "frame":
            result = self._fitting(_bound(self.frame, op, params), params, "budget", 50)
        else:
            raise InputError(f"unknown recall operation {op!r}: use search, read or frame")
        text = _delivered(result)
        request = {
            k: v if isinstance(v, str | int | float | bool | list) or v is None else str(v)
            for k, v in params.items()
        }
        meta = {"recall": {"op": op, "params": request}}
        observed = Observation("recall_result", text, meta=meta)
        (event,) = self.ctx.observe_batch([observed], session=session, activation=activation)
        return result, event

    def _fitting(
        self, run: Callable[..., _Page], params: dict[str, Any], size: str, default: int
    ) -> _Page:
        """``run(**params)``, or the same page cut shorter (fewer hits or nodes through
        ``size``; its cursor goes on from there) until its delivered text fits the context's
        preview threshold, so that a delivered search or traversal shows whole; never fewer
        than one item (a single item too long is left to preview)."""
        page = run(**params)
        threshold = self.ctx.view().preview_threshold
        count = params.get(size, default)
        while (text := len(_delivered(page))) > threshold and count > 1 and _items(page) > 1:
            count = max(1, min(_items(page) - 1, _items(page) * threshold // text))
            page = run(**(params | {size: count}))
        return page

    def _read_whole(self, page: ReadPage, params: dict[str, Any]) -> ReadPage:
        """``page``, or a shorter page from the same offset whose delivered text fits the
        context's preview threshold: a read that follows a preview's marker must not arrive as
        a preview itself. Never shorter than MIN_DELIVERED_PAGE characters (a threshold too low
        for that is left to preview the result); the page's next_offset says where to go on."""
        threshold = self.ctx.view().preview_threshold
        floor = min(page.limit, MIN_DELIVERED_PAGE)
        while len(page.text) > floor and (size := len(_delivered(page))) > threshold:
            limit = max(floor, len(page.text) * threshold // size - 1)
            shorter = self.read(**(params | {"limit": limit}))
            if len(shorter.text) >= len(page.text):  # a page ends on a whole character: as short
                break  # as it gets (the result is then previewed)
            page = shorter
        return page


_Page = TypeVar("_Page", SearchPage, TraversalPage)
_Run = TypeVar("_Run", bound=Callable[..., Any])


def _bound(run: _Run, op: str, params: dict[str, Any]) -> _Run:
    """``run``, once ``params`` are checked against what it takes: a missing or unknown
    parameter is an InputError naming them (not a TypeError from the call)."""
    signature = inspect.signature(run)
    try:
        signature.bind(**params)
    except TypeError as exc:
        takes = ", ".join(
            name if p.default is inspect.Parameter.empty else f"{name}={p.default!r}"
            for name, p in signature.parameters.items()
        )
        raise InputError(f"recall {op} takes {takes} ({exc})") from exc
    return run


def _items(page: SearchPage | TraversalPage) -> int:
    return len(page.hits) if isinstance(page, SearchPage) else len(page.nodes)


def _delivered(result: SearchPage | ReadPage | TraversalPage) -> str:
    """A recall result as the recall_result observation's text."""
    return json.dumps(result.to_dict(), ensure_ascii=False, indent=1, default=str)


# characters: the shortest page a delivered read is cut to (a small preview threshold is the
# context's choice; a short page that shows beats a long one previewed)
MIN_DELIVERED_PAGE = 64


@dataclass(frozen=True, slots=True)
class IndexReport:
    context: str
    table: str | None
    documents: dict[str, int]
    event_documents: int
    frame_documents: int
    frames: int
    last_event: int
    indexed_through: int
    current: bool
    # the tables of rebuilds never swapped in: running, or left by a process that died
    building: tuple[BuildingTable, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "table": self.table,
            "documents": self.documents,
            "event_documents": self.event_documents,
            "frame_documents": self.frame_documents,
            "frames": self.frames,
            "last_event": self.last_event,
            "last_indexed_event": self.indexed_through,
            "current": self.current,
            "building": [b.to_dict() for b in self.building],
        }


@dataclass(frozen=True, slots=True)
class CleanReport:
    """What ``recall-index clean`` did: the leftover tables it dropped (their rebuild's process
    provably died, or with ``force`` could not be told alive: those are in ``forced`` too), the
    records it forgot of tables no longer in the store (dropped by hand), and the building
    tables it kept (a rebuild running, or one whose process cannot be told alive)."""

    context: str
    dropped: tuple[str, ...]
    kept: tuple[BuildingTable, ...]
    forgotten: tuple[str, ...] = ()
    forced: tuple[BuildingTable, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "dropped": list(self.dropped),
            "forgotten": list(self.forgotten),
            "forced": [b.to_dict() for b in self.forced],
            "kept": [b.to_dict() for b in self.kept],
        }


class RecallIndex:
    """Inspect and rebuild the derived recall index (events and mind are never touched)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"RecallIndex({self.ctx!r})"

    def inspect(self) -> IndexReport:
        """The index's documents and whether it is current, and the building tables of this
        context's rebuilds (running, or left by a process that died: :meth:`clean`)."""
        with self.ctx.db.store.read(self.ctx.id) as r:
            stats = r.recall.stats()
            frames = sum(r.frame_counts()[k] for k in ("active", "retiring", "retired"))
            last = r.row.last_seq
            building = tuple(r.recall.building())
            if stats is None:
                empty = last == 0
                return IndexReport(self.ctx.id, None, {}, 0, 0, frames, last, 0, empty, building)
            current = stats.indexed_seq == last and stats.frame_docs == frames
            return IndexReport(
                self.ctx.id,
                stats.fts_table,
                stats.docs_by_kind,
                stats.event_docs,
                stats.frame_docs,
                frames,
                last,
                stats.indexed_seq,
                current,
                building,
            )

    def clean(self, *, force: bool = False) -> CleanReport:
        """Drop the tables this context's rebuilds left when their process died (SIGKILL, the
        OOM killer, a reboot), and forget the records of tables dropped by hand, in one write,
        without rebuilding. A table whose rebuild still runs is kept; so is one whose process
        cannot be told alive from here (another host, ``/proc`` hidden) unless ``force``: a
        rebuild that still fills it then fails (run it again); the live index is not affected."""
        with self.ctx.db.store.write(self.ctx.id) as w:
            before = {b.table: b for b in w.recall.building()}
            gone = tuple(w.recall.drop_dead_building(untold=force))
            kept = tuple(w.recall.building())
        found = [before[t] for t in gone]
        return CleanReport(
            self.ctx.id,
            tuple(b.table for b in found if not b.missing),
            kept,
            tuple(b.table for b in found if b.missing),
            tuple(b for b in found if not b.missing and b.owner_alive is None),
        )

    def documents(self) -> list[tuple[str, str, str]]:
        """Every indexed document as (key, body tokens, near tokens), sorted by key."""
        with self.ctx.db.store.read(self.ctx.id) as r:
            return sorted(r.recall.documents())

    def refresh_frames(self) -> int:
        """Rewrite every frame's document from the mind as it is now, reading no event: what a
        rebuild does for the frames, for a context whose events cannot all be read (a damaged
        store keeps its event documents as they were, but its frames' documents follow the
        current rule and the current relations). The number of documents written; 0 when the
        context has no index yet."""
        with self.ctx.db.store.write(self.ctx.id) as w:
            if w.recall.meta() is None:
                return 0
            frame_ids = [f.id for f in w.frames()]
            maintain.index_frames(w, frame_ids, self.ctx.db.timestamp())
            return len(frame_ids)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> IndexReport:
        """Regenerate the index from events and mind into a new table, in batches of
        :data:`REBUILD_BATCH` events (one short write transaction each, so writers are not
        held up), then swap it in. The live index serves searches until the swap; an
        interrupted rebuild leaves it untouched and drops what it built (a killed process leaves
        its table, unused), and running it again starts over."""
        check_progress(progress)
        store, cid = self.ctx.db.store, self.ctx.id
        with store.write(cid) as w:
            target = w.row.last_seq
            building = w.recall.begin_rebuild()
        try:
            self._fill(building, target, progress)
        except BaseException as exc:  # an interrupted rebuild leaves no table behind
            try:
                with store.write(cid) as w:
                    w.recall.drop_building(building)
            except Exception as cleanup:  # the interruption is what to report, with this
                exc.add_note(
                    f"the unfinished recall index table {building} stays ({cleanup}): "
                    f"`morphz context recall-index clean {shlex.quote(cid)}` drops it once "
                    "this process has ended, as the next rebuild does"
                )
            raise
        if progress is not None:
            progress(target, target)
        return self.inspect()

    def _fill(
        self, building: str, target: int, progress: Callable[[int, int], None] | None
    ) -> None:
        """Index the events into ``building`` in batches, then the rest and the frames, and swap
        it in."""
        store, cid = self.ctx.db.store, self.ctx.id
        previous: dict[str, str | None] = {}
        seq = 0
        while seq < target:
            with store.write(cid) as w:
                events = [e for e in w.events(seq, REBUILD_BATCH) if e.seq <= target]
                w.recall.add_to(building, maintain.event_docs(events, previous, None))
            seq = events[-1].seq if events else target
            if progress is not None:
                progress(seq, target)
        with store.write(cid) as w:
            rest = list(w.events(seq))
            w.recall.add_to(building, maintain.event_docs(rest, previous, None))
            now = time_us(self.ctx.db.timestamp())
            frames = maintain.frame_docs(w, [f.id for f in w.frames()], now)
            w.recall.finish_rebuild(building, frames, w.row.last_seq)
