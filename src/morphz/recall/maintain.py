"""Keep the recall index current inside the write transaction that changes events or mind."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from morphz.events import Event
from morphz.mind.state import Changes, Frame
from morphz.recall.documents import (
    NEAR_KINDS,
    EventDoc,
    FrameDoc,
    event_doc,
    event_text,
    frame_doc,
    time_us,
)
from morphz.store.base import ReadTxn, WriteTxn

PreviousLookup = Callable[[str, int], str | None]


def event_docs(
    events: Sequence[Event], previous: dict[str, str | None], lookup: PreviousLookup | None
) -> list[EventDoc]:
    """Documents of ``events`` (in seq order). ``previous`` maps a session to the text of its
    latest observation so far and is updated; ``lookup(session, seq)`` fills a session not in it.
    Live appends and the rebuild both come through here, so they index identically."""
    docs: list[EventDoc] = []
    for event in events:
        session = event.session_id
        near_kind = event.kind in NEAR_KINDS
        text = event_text(event.kind, event.text, event.payload)
        if text is not None:
            before: str | None = None
            if near_kind:
                if session not in previous:
                    previous[session] = lookup(session, event.seq) if lookup else None
                before = previous[session]
            docs.append(event_doc(event.seq, text, before))
        if near_kind:
            previous[session] = event.text or ""
    return docs


def index_events(w: WriteTxn, events: Sequence[Event]) -> None:
    """Index freshly appended events."""
    if not events:
        return

    def lookup(session: str, seq: int) -> str | None:
        return w.recall.previous_observation(session, seq, NEAR_KINDS)

    docs = event_docs(events, {}, lookup)
    w.recall.add_events(docs, events[-1].seq, events[0].seq)


def frames_to_reindex(w: WriteTxn, changes: Changes) -> dict[str, Frame | None]:
    """Before the changes are written: the frames whose searchable text changes (bodies,
    sources, creation, deletion, and the subjects of the relations changed: a frame's document
    holds the relations it is the subject of only), with their old rows."""
    out: dict[str, Frame | None] = {}
    for fid, new in changes.frames.items():
        old = w.frame(fid)
        if new is None or old is None or (old.body, old.sources) != (new.body, new.sources):
            out[fid] = old
    for subject, _, _ in changes.edges:
        if subject not in out:
            out[subject] = w.frame(subject)
    return out


def frame_docs(r: ReadTxn, frame_ids: Sequence[str], when_us: int) -> list[FrameDoc]:
    """Documents of ``frame_ids`` as they stand in ``r`` (None bodies for deleted frames)."""
    docs = []
    for fid in sorted(frame_ids):
        frame = r.frame(fid)
        edges = r.subject_edges(fid) if frame is not None else []
        docs.append(frame_doc(frame, fid, edges, when_us))
    return docs


def index_frames(w: WriteTxn, frame_ids: Sequence[str], when: str) -> None:
    """After the changes are written: replace the documents of ``frame_ids``."""
    if frame_ids:
        w.recall.put_frames(frame_docs(w, frame_ids, time_us(when)))
