"""What the recall index holds for each event and frame (pure: no I/O).

- Observations (except recall results, which copy other evidence), model replies and committed
  transactions (their reason, and the bodies and relations they took out of the mind) are event
  documents: ``body`` is their text, ``near`` the text of the
  previous observation in the same session (a question's words are often in the turn before the
  answer; see :mod:`morphz.recall.tokenize` for the measured effect).
- Frames are documents of their id, body, sources (the refs of the events and the ids of the
  frames they cite: a search for ``@e12`` among frames finds the frames derived from it) and
  the relations they are the subject of (``y part-of hub`` is in ``y``'s document, which names
  ``hub``: a search for ``hub`` finds the frames relating to it). Not those they are the object
  of: a relation changes one document, so a commit on a frame many relate to costs what it
  changes, not that frame's degree (review 17c; migration 0026 rebuilt the indexes written by
  the earlier rule). Their lifecycle is read at query time, so retiring or restoring a frame
  does not touch the index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from morphz import events as ev
from morphz.mind.lifecycle import OBSERVATION_KINDS
from morphz.mind.state import Changes, Edge, Frame
from morphz.recall.tokenize import index_text

NEAR_CHARS = 2000  # how much of the previous observation feeds the near column
# a recall result copies evidence that is indexed already; an agent reply is the text of the
# model_reply event that delivered it, which is indexed (as kind model_reply)
NOT_INDEXED_KINDS: frozenset[str] = frozenset({"recall_result", "agent_reply"})
NEAR_KINDS: frozenset[str] = OBSERVATION_KINDS - NOT_INDEXED_KINDS
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EventDoc:
    seq: int
    body: str  # token string (index_text output)
    near: str


@dataclass(frozen=True, slots=True)
class FrameDoc:
    frame_id: str
    body: str | None  # token string; None removes the frame's document
    time_us: int


def time_us(iso: str) -> int:
    """UTC microseconds since the epoch of an ISO 8601 time with offset."""
    moment = datetime.fromisoformat(iso)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# the kinds whose text, when not empty, is their document (a committed tx's is its reason)
TEXT_KINDS: frozenset[str] = (OBSERVATION_KINDS - NOT_INDEXED_KINDS) | {ev.MODEL_REPLY}
# every event kind that can have a document: what a search's kinds filter may name
INDEXED_KINDS: frozenset[str] = TEXT_KINDS | {ev.TX_COMMITTED}
# a committed transaction's payload keys holding the bodies of frames it undid or replaced (by
# id), the one holding the relations it removed (a list of [subject, relation, object]), and all
# those that feed its document (the reason too): without one of them it has none
COMMIT_BODY_KEYS: tuple[str, ...] = ("undone", "replaced")
COMMIT_EDGE_KEY = "unrelated"
COMMIT_REMOVED_KEYS: tuple[str, ...] = (*COMMIT_BODY_KEYS, COMMIT_EDGE_KEY)
COMMIT_TEXT_KEYS: tuple[str, ...] = ("reason", *COMMIT_REMOVED_KEYS)


def event_text(kind: str, text: str | None, payload: dict[str, Any] | None) -> str | None:
    """The searchable text of an event, or None when the event is not indexed."""
    if kind in TEXT_KINDS:
        return text or None
    if kind == ev.TX_COMMITTED:  # its reason, the bodies it undid or replaced (with ids), and
        data = payload or {}  # the relations it removed
        parts = [str(data["reason"])] if data.get("reason") else []
        for key in COMMIT_BODY_KEYS:
            parts += [f"{fid} {body}" for fid, body in (data.get(key) or {}).items()]
        parts += [edge_text(*edge) for edge in data.get(COMMIT_EDGE_KEY) or ()]
        return "\n".join(parts) or None
    return None


def removed_content(
    changes: Changes, old: Callable[[str], Frame | None], had: Callable[[Edge], bool]
) -> dict[str, Any]:
    """What ``changes`` take out of the mind, as a commit's event records it (the payload keys
    :data:`COMMIT_REMOVED_KEYS`, each left out when empty): ``undone``, the bodies of frames
    removed (only a rollback removes any), ``replaced``, the earlier bodies of frames that stay
    (a revise, or a rollback to an older revision), by frame id; and ``unrelated``, the
    relations removed (an unrelate, or a rollback), sorted. ``old(id)`` is a frame's row before
    the changes (None: created, or not needed since its body does not change) and ``had(edge)``
    whether the relation was there: the live commit and the audit's replay both come through
    here, so they record the same."""
    undone: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for fid in sorted(changes.frames):
        before = old(fid)
        if before is None:
            continue
        new = changes.frames[fid]
        if new is None:
            undone[fid] = before.body
        elif new.body != before.body:
            replaced[fid] = before.body
    unrelated = [list(e) for e in sorted(changes.edges) if not changes.edges[e] and had(e)]
    found: dict[str, Any] = {"undone": undone, "replaced": replaced, COMMIT_EDGE_KEY: unrelated}
    return {key: value for key, value in found.items() if value}


def event_doc(seq: int, text: str, previous: str | None) -> EventDoc:
    near = index_text(previous[:NEAR_CHARS]) if previous else ""
    return EventDoc(seq, index_text(text), near)


def edge_text(subject: str, relation: str, obj: str) -> str:
    """A relation as searchable text, its words as a frame's document writes them."""
    return f"{subject.replace('/', ' ')} {relation.replace('-', ' ')} {obj.replace('/', ' ')}"


def frame_text(frame: Frame, edges: list[Edge]) -> str:
    """Id, body, sources and relations of a frame (``edges``: those it is the subject of), as
    one searchable text (a source ``@e12`` gives the token ``e12``, as the query ``@e12``
    does)."""
    parts = [frame.id.replace("/", " "), frame.body]
    parts += [source.replace("/", " ") for source in frame.sources]
    for _, relation, obj in edges:
        parts.append(f"{relation.replace('-', ' ')} {obj.replace('/', ' ')}")
    return " ".join(parts)


def frame_doc(frame: Frame | None, frame_id: str, edges: list[Edge], when_us: int) -> FrameDoc:
    if frame is None:
        return FrameDoc(frame_id, None, when_us)
    return FrameDoc(frame_id, index_text(frame_text(frame, edges)), when_us)
