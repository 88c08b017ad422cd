"""Paged reads of one event's full content, by short ref (``@e42``) or full identity
(``<context>:@e42``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from morphz.checks import check_whole
from morphz.errors import InputError, RecordNotFoundError
from morphz.events import TX_COMMITTED, Event
from morphz.graphemes import boundary
from morphz.ids import is_ref, ref_seq
from morphz.recall.documents import COMMIT_BODY_KEYS, COMMIT_EDGE_KEY
from morphz.store.base import ReadTxn

DEFAULT_READ_CHARS = 4000
MAX_READ_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class ReadPage:
    ref: str
    identity: str
    kind: str
    time: str
    session: str
    text: str
    offset: int
    limit: int
    total_chars: int
    next_offset: int | None
    meta: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "identity": self.identity,
            "kind": self.kind,
            "time": self.time,
            "session": self.session,
            "offset": self.offset,
            "limit": self.limit,
            "total_chars": self.total_chars,
            "next_offset": self.next_offset,
            "text": self.text,
            "meta": self.meta,
        }


def parse_identity(context_id: str, ref: str) -> int:
    """The seq named by ``@e42`` or ``<context>:@e42`` (which must be this context)."""
    if not isinstance(ref, str):
        raise InputError(f"{ref!r} is not an event ref: use @e42 or {context_id}:@e42")
    owner, sep, short = ref.rpartition(":")
    if sep and owner != context_id:
        raise InputError(f"{ref} belongs to context '{owner}', not '{context_id}'")
    if not is_ref(short):
        raise InputError(f"{ref!r} is not an event ref: use @e42 or {context_id}:@e42")
    return ref_seq(short)


def event_content(event: Event) -> str:
    """The full text of an event; events without text show their payload as JSON. A committed
    transaction that undid or replaced frame bodies, or removed relations, shows them after its
    text, one comment line each (``; replaced plan/route: BODY``, ``; unrelated plan/a blocks
    plan/b``): a search for their words finds this event, so reading it shows what matched."""
    if event.text is None:
        return json.dumps(event.payload or {}, ensure_ascii=False, sort_keys=True)
    if event.kind != TX_COMMITTED or not event.payload:
        return event.text
    lines = [event.text]
    for key in COMMIT_BODY_KEYS:
        bodies = event.payload.get(key) or {}
        # a body's own line breaks (inside its strings) continue the comment
        lines += [f"; {key} {fid}: " + body.replace("\n", "\n;   ") for fid, body in bodies.items()]
    edges = event.payload.get(COMMIT_EDGE_KEY) or ()
    lines += [f"; {COMMIT_EDGE_KEY} {' '.join(edge)}" for edge in edges]
    return "\n".join(lines)


def read(r: ReadTxn, ref: str, offset: int = 0, limit: int = DEFAULT_READ_CHARS) -> ReadPage:
    context_id = r.row.context_id
    seq = parse_identity(context_id, ref)
    check_whole(offset, "offset", 0, unit="characters")
    check_whole(limit, "limit", 1, MAX_READ_CHARS, unit="characters")
    event = r.event(seq)
    if event is None:
        raise RecordNotFoundError(
            f"no event @e{seq} in context '{context_id}': the latest is @e{r.row.last_seq}"
        )
    text = event_content(event)
    total = len(text)
    if offset > total:
        raise InputError(f"offset {offset} is past the end: @e{seq} has {total} characters")
    end = min(total, offset + limit)
    if end < total:  # a page ends where a character a reader sees ends (not inside a flag)
        whole = boundary(text, end, -1)
        end = whole if whole > offset else boundary(text, end, 1)
    return ReadPage(
        ref=event.ref,
        identity=f"{context_id}:{event.ref}",
        kind=event.kind,
        time=event.time,
        session=event.session_id,
        text=text[offset:end],
        offset=offset,
        limit=limit,
        total_chars=total,
        next_offset=end if end < total else None,
        meta=event.meta,
    )
