"""The recall part of the storage contract: value types and the :class:`RecallStore` protocol
a backend's read and write units expose as ``.recall``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from morphz.owners import Owner
from morphz.recall.documents import EventDoc, FrameDoc


@dataclass(frozen=True, slots=True)
class Pin:
    """The evidence set of a search: events up to ``max_seq``, frame documents up to
    ``max_frame_doc`` (as positive counts)."""

    max_seq: int
    max_frame_doc: int


@dataclass(frozen=True, slots=True)
class Filters:
    since_us: int | None = None
    until_us: int | None = None
    event_kinds: frozenset[str] | None = None  # None: any indexed event kind
    frames: bool = True  # include frame documents
    events: bool = True  # include event documents
    lifecycles: frozenset[str] | None = None

    @property
    def needs_join(self) -> bool:
        return (
            self.since_us is not None
            or self.until_us is not None
            or self.event_kinds is not None
            or self.lifecycles is not None
            or not (self.frames and self.events)
        )


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    kind: str
    session_id: str
    time: str
    text: str | None
    meta: str | None  # JSON
    payload: str | None  # JSON
    lifecycle: str | None  # observations, and model replies that were delivered


@dataclass(frozen=True, slots=True)
class FrameRow:
    ord: int  # minus the frame's stable key
    frame_id: str
    time_us: int
    body: str
    sources: str
    lifecycle: str
    revision: int
    protected: int


@dataclass(frozen=True, slots=True)
class BuildingTable:
    """A recall rebuild's table that was never swapped in: its owner (the process filling
    it), whether that process lives (True), provably died (False: the table is a leftover) or
    cannot be told (None: another host, or ``/proc`` hidden), and how many documents it holds.
    ``missing``: the table is recorded but no longer in the store (dropped by hand); ``clean``
    forgets it."""

    table: str
    owner: Owner
    owner_alive: bool | None
    documents: int
    missing: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "owner": self.owner.to_dict(),
            "owner_alive": self.owner_alive,
            "documents": self.documents,
            "missing": self.missing,
        }


@dataclass(frozen=True, slots=True)
class IndexStats:
    fts_table: str
    indexed_seq: int
    event_docs: int
    frame_docs: int
    docs_by_kind: dict[str, int]


class RecallStore(Protocol):
    """Recall index access for one context inside an open read or write unit."""

    def table(self) -> str: ...
    def ensure(self, indexed_seq: int = 0) -> str: ...
    def add_events(self, docs: Iterable[EventDoc], through_seq: int, first_seq: int) -> None: ...
    def put_frames(self, docs: Iterable[FrameDoc]) -> None: ...
    def previous_observation(
        self, session_id: str, before_seq: int, kinds: frozenset[str]
    ) -> str | None: ...
    def doc_frequency(self, term_query: str, cap: int) -> int: ...
    def ranked(
        self, match: str, pin: Pin, filters: Filters, limit: int
    ) -> list[tuple[int, float]]: ...
    def chronological(
        self, pin: Pin, filters: Filters, after: tuple[int, int] | None, limit: int
    ) -> list[tuple[int, int]]: ...
    def events_by_seq(self, seqs: list[int]) -> dict[int, EventRow]: ...
    def frames_by_ord(self, ords: list[int]) -> dict[int, FrameRow]: ...
    def secret(self, name: str) -> bytes: ...
    def pin(self, last_seq: int) -> Pin: ...
    def stats(self) -> IndexStats | None: ...
    def meta(self) -> tuple[str, int, int] | None: ...
    def event_doc_count(self) -> int: ...
    def frame_doc_counts(self) -> tuple[int, int]: ...
    def begin_rebuild(self) -> str: ...
    def drop_building(self, building: str) -> None: ...
    def building(self) -> list[BuildingTable]: ...
    def drop_dead_building(self, *, untold: bool = False) -> list[str]: ...
    def add_to(self, table: str, docs: Iterable[EventDoc]) -> None: ...
    def finish_rebuild(self, building: str, frames: list[FrameDoc], indexed_seq: int) -> None: ...
    def documents(self) -> Iterator[tuple[str, str, str]]: ...
