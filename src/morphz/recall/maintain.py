"""Keep the recall index current inside the write transaction that changes events or mind."""

from __future__ import annotations

from collections.abc import Sequence

from morphz.events import Event
from morphz.mind.state import Changes, Frame
from morphz.recall.documents import NEAR_KINDS, EventDoc, event_doc, event_text, frame_doc, time_us
from morphz.store.base import WriteTxn


def index_events(w: WriteTxn, events: Sequence[Event]) -> None:
    """Index freshly appended events (one session's batch, in seq order)."""
    if not events:
        return
    docs: list[EventDoc] = []
    previous: str | None = None
    looked_up = False
    for event in events:
        text = event_text(event.kind, event.text, event.payload)
        if text is not None:
            if not looked_up and event.kind in NEAR_KINDS:
                previous = w.recall.previous_observation(event.session_id, event.seq, NEAR_KINDS)
                looked_up = True
            docs.append(event_doc(event.seq, text, previous if event.kind in NEAR_KINDS else None))
        if event.kind in NEAR_KINDS and event.text:
            previous, looked_up = event.text, True
    w.recall.add_events(docs, events[-1].seq, events[0].seq)


def frames_to_reindex(w: WriteTxn, changes: Changes) -> dict[str, Frame | None]:
    """Before the changes are written: the frames whose searchable text changes, with their
    old rows (for comparison) — bodies, creation, deletion and relation endpoints."""
    out: dict[str, Frame | None] = {}
    for fid, new in changes.frames.items():
        old = w.frame(fid)
        if new is None or old is None or old.body != new.body:
            out[fid] = old
    for subject, _, obj in changes.edges:
        for fid in (subject, obj):
            if fid not in out:
                out[fid] = w.frame(fid)
    return out


def index_frames(w: WriteTxn, frame_ids: Sequence[str], when: str) -> None:
    """After the changes are written: replace the documents of ``frame_ids``."""
    if not frame_ids:
        return
    when_us = time_us(when)
    docs = []
    for fid in sorted(frame_ids):
        frame = w.frame(fid)
        edges = w.edges_of(fid) if frame is not None else []
        docs.append(frame_doc(frame, fid, edges, when_us))
    w.recall.put_frames(docs)
