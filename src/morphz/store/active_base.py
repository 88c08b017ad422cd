"""The active-state part of the storage contract (what the Context Encoding reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from morphz.mind.state import Edge, Frame


@dataclass(frozen=True, slots=True)
class ActiveObservation:
    seq: int
    kind: str
    session_id: str
    time: str
    text: str
    protected: bool
    arrival_clock: int  # the cognitive clock right after it arrived


class ActiveStore(Protocol):
    def observations(self) -> list[ActiveObservation]: ...
    def frames(self) -> list[Frame]: ...
    def relations(self) -> list[Edge]: ...
    def checkpoint_names(self) -> list[str]: ...
    def cited_by(self, refs: list[str]) -> dict[str, int]: ...
    def settings(self) -> dict[str, Any]: ...
    def put_setting(self, name: str, value: Any) -> None: ...
