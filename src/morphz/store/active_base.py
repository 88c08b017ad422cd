"""The active-state part of the storage contract (what the Context Encoding reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from morphz.mind.state import Edge, Frame

if TYPE_CHECKING:
    from morphz.store.base import SessionRow


@dataclass(frozen=True, slots=True)
class ActiveObservation:
    seq: int
    kind: str
    session_id: str
    time: str
    text: str
    protected: bool
    arrival_clock: int  # the cognitive clock right after it arrived


@dataclass(frozen=True, slots=True)
class SessionWindow:
    """The sessions the session directory may show, most recent first (the current one
    first of all), and the counts of the others, made in SQL without building their rows."""

    rows: list[SessionRow]
    retired: int  # other sessions whose attention is retired
    inactive: int  # other active sessions last active before the time window
    in_window: int  # other active sessions inside the window, shown or not
    retired_latest: tuple[str, ...] = ()  # the most recently active retired ones (restorable)


class ActiveStore(Protocol):
    def observations(self) -> list[ActiveObservation]: ...
    def session_window(self, current: str, horizon: str | None, count: int) -> SessionWindow: ...
    def last_active(self) -> str | None: ...
    def session_counts(self) -> dict[str, int]: ...
    def frames(self) -> list[Frame]: ...
    def frame_tokens(self) -> int: ...
    def frames_and_budget(self) -> tuple[int, dict[str, Any] | None]: ...
    def relations(self) -> list[Edge]: ...
    def checkpoint_names(self) -> list[str]: ...
    def cited_by(self, refs: list[str]) -> dict[str, int]: ...
    def settings(self) -> dict[str, Any]: ...
    def put_setting(self, name: str, value: Any) -> None: ...
