"""Event records: the immutable history of a context.

Events are numbered per context (``seq`` 1, 2, 3...). Observations are the events that enter the
agent's inbox; their short ref is ``@e<seq>``. Every event records the session it belongs to and,
after it, the mind version, the cognitive clock and the head hash of the projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from morphz.ids import make_ref
from morphz.mind.lifecycle import OBSERVATION_KINDS

TX_COMMITTED = "context_tx_committed"
RETIREMENTS_FINALIZED = "retirements_finalized"
SESSION_CREATED = "session_created"
SETTINGS_CHANGED = "settings_changed"
ACTIVATION_STARTED = "activation_started"
ACTIVATION_FINISHED = "activation_finished"
MODEL_REPLY = "model_reply"
TOOL_CALL = "tool_call"
APPROVAL_REQUEST = "approval_request"

RECORD_KINDS: frozenset[str] = frozenset({MODEL_REPLY, TOOL_CALL, APPROVAL_REQUEST})
RUNTIME_KINDS: frozenset[str] = frozenset(
    {
        TX_COMMITTED,
        RETIREMENTS_FINALIZED,
        SESSION_CREATED,
        SETTINGS_CHANGED,
        ACTIVATION_STARTED,
        ACTIVATION_FINISHED,
    }
)


@dataclass(frozen=True, slots=True)
class Event:
    """One immutable event of a context."""

    context_id: str
    seq: int
    kind: str
    session_id: str
    time: str  # when it happened, ISO 8601 with offset
    recorded_at: str  # when the store recorded it, ISO 8601 UTC
    text: str | None
    meta: dict[str, Any] | None
    payload: dict[str, Any] | None
    version: int  # mind version after this event
    clock: int  # cognitive clock after this event
    head: str  # projection head hash after this event

    @property
    def ref(self) -> str:
        return make_ref(self.seq)

    @property
    def is_observation(self) -> bool:
        return self.kind in OBSERVATION_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "seq": self.seq,
            "context": self.context_id,
            "kind": self.kind,
            "session": self.session_id,
            "time": self.time,
            "recorded_at": self.recorded_at,
            "text": self.text,
            "meta": self.meta,
            "payload": self.payload,
            "version": self.version,
            "clock": self.clock,
            "head": self.head,
        }
