"""The storage contract every backend implements (SQLite now; PostgreSQL behind the same shape).

A backend offers read and write units of work scoped to one context. A :class:`WriteTxn` is one
database transaction that holds the context's writer lock from its first statement to commit:
everything one logical step changes (events, projection rows, boundary versions, the context
row) is written inside it, or nothing is. Both unit kinds are :class:`~morphz.mind.MindView`\\ s,
so the pure layer reads the projection through them directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from morphz.events import Event
from morphz.mind.state import Changes, Edge, Frame, MindView, ObsState, SessionState, Snapshot
from morphz.owners import Owner
from morphz.store.active_base import ActiveStore
from morphz.store.recall_base import RecallStore


@dataclass(frozen=True, slots=True)
class ContextRow:
    context_id: str
    created_at: str
    version: int
    clock: int
    last_seq: int
    head: str
    window: int
    initial_window: int
    order_max: float
    barrier: int


@dataclass(frozen=True, slots=True)
class SessionRow:
    session_id: str
    attention: str
    created_seq: int
    last_seq: int
    last_time: str
    running: int  # activations running in it


@dataclass(frozen=True, slots=True)
class ActivationRow:
    activation_id: str
    session_id: str
    root_seq: int | None
    state: str
    started_seq: int
    finished_seq: int | None
    owner: Owner | None = None  # the process running it; None when not recorded
    objective: str | None = None  # what it works on (shown in the kernel); None: not given


@dataclass(frozen=True, slots=True)
class StagedResult:
    """The outcome of one tool call, kept from the moment its call ended until the batch of its
    step's results records it (or the write that ends its activation does): the observation
    that batch records (``kind``, ``text``, ``meta``) and whether it ticks the clock."""

    activation_id: str
    reply_seq: int  # the model_reply that asked for the call
    position: int  # the call's index among that reply's tool calls
    kind: str
    text: str
    meta: dict[str, Any]
    ticks: bool


class ReadTxn(MindView, Protocol):
    """A consistent snapshot of one context."""

    @property
    def row(self) -> ContextRow: ...

    @property
    def recall(self) -> RecallStore: ...

    @property
    def active(self) -> ActiveStore: ...

    def edges_of(self, frame_id: str) -> list[Edge]: ...
    def citing(self, source: str) -> list[str]: ...

    def events(self, after_seq: int = 0, limit: int | None = None) -> Iterator[Event]: ...
    def event(self, seq: int) -> Event | None: ...
    def ordered_frames(self) -> list[Frame]: ...
    def observations(self, active_only: bool = False) -> Iterator[ObsState]: ...
    def sessions(self) -> Iterator[SessionState]: ...
    def session_rows(self) -> list[SessionRow]: ...
    def checkpoint_versions(self) -> list[tuple[str, int]]: ...
    def snapshots(self) -> Iterator[Snapshot]: ...
    def boundary_versions(self) -> Iterator[tuple[str, int]]: ...
    def frame_sources(self) -> Iterator[tuple[str, str]]: ...
    def event_times(self) -> Iterator[tuple[int, str, int | None]]: ...
    def frame_counts(self) -> dict[str, int]: ...
    def observation_counts(self) -> dict[str, int]: ...
    def activations(self, running_only: bool = False) -> list[ActivationRow]: ...
    def latest_activations(self, last: int) -> list[ActivationRow]: ...
    def activation(self, activation_id: str) -> ActivationRow | None: ...

    def staged_results(self, activation_id: str | None = None) -> list[StagedResult]:
        """The staged outcomes of ``activation_id`` (of every activation when None), in
        activation, reply and call order."""
        ...


class WriteTxn(ReadTxn, Protocol):
    """One database transaction holding the context's writer lock."""

    def changed_boundaries(self, boundaries: list[str], since: int) -> dict[str, int]: ...
    def session_busy(self, session_id: str) -> bool: ...
    def causally_protected(self, seq: int) -> bool: ...
    def append_event(self, event: Event) -> None: ...
    def append_events(self, events: list[Event]) -> None: ...
    def write_changes(self, changes: Changes, commit_version: int | None, seq: int) -> int: ...
    def set_row(self, row: ContextRow) -> None: ...
    def touch_session(self, session_id: str, seq: int, time: str) -> None: ...
    def put_activation(self, activation: ActivationRow) -> None: ...
    def stage_result(self, staged: StagedResult) -> None: ...

    def unstage_results(self, activation_id: str, reply_seq: int, positions: list[int]) -> set[int]:
        """Delete the staged outcomes of these calls; the positions whose row was there."""
        ...

    def unstage_activation(self, activation_id: str) -> None: ...


class Store(Protocol):
    """A database holding many contexts."""

    def create_context(self, context_id: str, window: int, created_at: str) -> ContextRow: ...
    def context_ids(self) -> list[str]: ...

    def stale_recall(self) -> list[str]:
        """The contexts whose recall index must be rebuilt: events but no index (a store from
        before recall), one a migration marked stale (tokens of an older kind), or one whose
        rebuild did not finish."""
        ...

    def read(self, context_id: str) -> AbstractContextManager[ReadTxn]: ...
    def write(self, context_id: str) -> AbstractContextManager[WriteTxn]: ...
    def integrity_check(self) -> list[str]: ...

    def check_file(self) -> list[str]:
        """The damage the database itself reports in its files (a quick check), each worded
        with what to do; [] when sound."""
        ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: every later call is a StoreError."""
        ...

    def close(self) -> None: ...
