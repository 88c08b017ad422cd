"""Event records: the immutable history of a context.

Events are numbered per context (``seq`` 1, 2, 3...). Observations are the events that enter the
agent's inbox; their short ref is ``@e<seq>``. Every event records the session it belongs to and,
after it, the mind version, the cognitive clock and the head hash of the projection.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
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

    def __hash__(self) -> int:
        """Equal events hash equal: their context, place and head say which event it is (the
        meta and payload dicts cannot be hashed)."""
        return hash((self.context_id, self.seq, self.head))

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


# Setting a slot through its descriptor skips the frozen dataclass's __setattr__ detour
# (object.__setattr__ for every field): half the cost of Event(...), for the many events a store
# reads back (the audit replays every one). Same slots, same values: the same event.
assert Event.__slots__ == tuple(f.name for f in fields(Event))
(
    _set_context_id,
    _set_seq,
    _set_kind,
    _set_session_id,
    _set_time,
    _set_recorded_at,
    _set_text,
    _set_meta,
    _set_payload,
    _set_version,
    _set_clock,
    _set_head,
) = (getattr(Event, name).__set__ for name in Event.__slots__)
_new_event = object.__new__


def make_event(  # noqa: PLR0917 - the fields of Event, in order
    context_id: str,
    seq: int,
    kind: str,
    session_id: str,
    time: str,
    recorded_at: str,
    text: str | None,
    meta: dict[str, Any] | None,
    payload: dict[str, Any] | None,
    version: int,
    clock: int,
    head: str,
) -> Event:
    """``Event(context_id, seq, ...)``, built at half the cost (see above)."""
    event = _new_event(Event)
    _set_context_id(event, context_id)
    _set_seq(event, seq)
    _set_kind(event, kind)
    _set_session_id(event, session_id)
    _set_time(event, time)
    _set_recorded_at(event, recorded_at)
    _set_text(event, text)
    _set_meta(event, meta)
    _set_payload(event, payload)
    _set_version(event, version)
    _set_clock(event, clock)
    _set_head(event, head)
    return event
