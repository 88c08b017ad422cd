"""Lexical and time-range search over a context's events and frames.

- A query is ranked by BM25 (FTS5) over each document's own text and, at weight 0.5, the text of
  the observation before it in the same session; ties go to the newer document.
- Very common words are handled in two steps: stopwords never reach the index, and among the
  remaining query words those found in more than :data:`COMMON_DOCS` documents are left out of
  the match when rarer words remain (they would add little to the ranking and cost a scan of a
  huge posting list). When every word of a query of two or more words is common, documents must
  contain all of them in their own text: the ``near`` column (the previous observation) is
  context for ranking, not evidence that a document holds the words, and its words neither
  match nor score in that case (see docs/decisions.md, "Recall"). When no document of the index
  holds them all, any of them is enough (in the document's own text, still). With a time window,
  such a broad match is bounded by the window's range of event seqs (``SqliteRecall.ranked``).
  The match is chosen on the first page, and its cursors keep it.
- A time range alone pages chronologically (``since`` inclusive, ``until`` exclusive).
- Paging: the first page pins the evidence set (events up to the current seq, frame documents
  up to the current count). A ranked cursor carries the ids already returned, so every document of
  the evidence set is returned at most once and none is skipped even when events arrive between
  pages; a chronological cursor carries the last (time, id) key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from morphz import events as ev
from morphz.checks import check_text, check_whole
from morphz.errors import InputError
from morphz.graphemes import boundary
from morphz.ids import make_ref
from morphz.mind.lifecycle import OBSERVATION_KINDS
from morphz.recall import cursors
from morphz.recall.documents import (
    COMMIT_BODY_KEYS,
    COMMIT_EDGE_KEY,
    INDEXED_KINDS,
    NOT_INDEXED_KINDS,
    time_us,
)
from morphz.recall.tokenize import (
    BODY_ONLY,
    all_in_body,
    any_in_body,
    number_phrases,
    query_terms,
    query_words,
    quote_term,
    quoted_phrases,
)
from morphz.store.base import ReadTxn
from morphz.store.recall_base import EventRow, Filters, FrameRow, Pin

MAX_LIMIT = 100
MAX_PAGED_RESULTS = 2000  # documents one ranked cursor can walk through
COMMON_DOCS = 10_000
PREVIEW_CHARS = 240

KIND_GROUPS: dict[str, frozenset[str]] = {
    "observations": OBSERVATION_KINDS,
    "replies": frozenset({ev.MODEL_REPLY}),
    "transactions": frozenset({ev.TX_COMMITTED}),
}
# what a search's kinds filter takes: a group, "frames", or an event kind that is indexed
SEARCH_KINDS: list[str] = sorted({*KIND_GROUPS, "frames", *INDEXED_KINDS})
LIFECYCLES = frozenset({"active", "retiring", "retired"})


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: an event (``ref``) or a frame (``frame_id``)."""

    kind: str
    ref: str | None
    frame_id: str | None
    time: str | None
    score: float | None  # higher is more relevant; None in chronological paging
    preview: str
    lifecycle: str | None
    meta: dict[str, Any] | None
    session: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "frame_id": self.frame_id,
            "kind": self.kind,
            "time": self.time,
            "score": self.score,
            "preview": self.preview,
            "lifecycle": self.lifecycle,
            "meta": self.meta,
            "session": self.session,
        }


@dataclass(frozen=True, slots=True)
class SearchPage:
    hits: tuple[Hit, ...]
    next_cursor: str | None
    order: str  # "relevance" or "time"
    terms: tuple[str, ...] = field(default=())  # the words that were matched
    # a ranked walk stopped at MAX_PAGED_RESULTS with matches left (no cursor, yet not the end)
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "hits": [h.to_dict() for h in self.hits],
            "next_cursor": self.next_cursor,
            "order": self.order,
            "terms": list(self.terms),
            "truncated": self.truncated,
        }


def _time_arg(value: datetime | str | None, name: str) -> int | None:
    if value is None:
        return None
    from morphz.checks import normalize_time

    iso = normalize_time(value, name)
    assert iso is not None
    return time_us(iso)


def _texts(values: Iterable[object], what: str, known: list[str]) -> None:
    """``values`` is a list of names (not one name, which would be read letter by letter)."""
    if not isinstance(values, list | tuple | set | frozenset) or not all(
        isinstance(v, str) for v in values
    ):
        raise InputError(f"{what} is a list of names from {known}, not {values!r:.80}")


def _filters(
    since: int | None, until: int | None, kinds: list[str] | None, lifecycle: list[str] | None
) -> Filters:
    if since is not None and until is not None and since >= until:
        raise InputError("since must be before until (since is inclusive, until exclusive)")
    lives = None
    if lifecycle is not None:
        _texts(lifecycle, "lifecycle", sorted(LIFECYCLES))
    if kinds is not None:
        _texts(kinds, "kinds", SEARCH_KINDS)
    if lifecycle:
        unknown = set(lifecycle) - LIFECYCLES
        if unknown:
            raise InputError(f"unknown lifecycle {sorted(unknown)}: use {sorted(LIFECYCLES)}")
        lives = frozenset(lifecycle)
    if not kinds:
        return Filters(since, until, None, True, True, lives)
    event_kinds: set[str] = set()
    frames = False
    for kind in kinds:
        if kind in NOT_INDEXED_KINDS:
            raise InputError(
                f"{kind} is not searchable: it copies what is indexed already (recall results "
                "the evidence they found, agent replies the model_reply that delivered them); "
                "search for that instead"
            )
        if kind in ("frames", "frame"):
            frames = True
        elif kind in KIND_GROUPS:
            event_kinds |= KIND_GROUPS[kind]
        elif kind in INDEXED_KINDS:
            event_kinds.add(kind)
        else:
            raise InputError(f"unknown kind {kind!r}: use one of {SEARCH_KINDS}")
    return Filters(since, until, frozenset(event_kinds) or None, frames, bool(event_kinds), lives)


def _match(r: ReadTxn, terms: list[str], query: str) -> str:
    """The FTS5 expression: rare words OR-ed; common words dropped while rarer ones remain; all
    of them required in the document's own text when every word is common, or any of them when
    no document of the index holds them all (each word alone finds thousands: returning none
    would read as "nothing holds these words"). Numbers written with separators (1.2.3,
    2026-08-04) add their groups as a phrase (:func:`number_phrases`), and each passage the
    query quotes its words as one (:func:`quoted_phrases`): a text holding them as written
    ranks first (in its own text, not in the next turn's context), and the words still match
    apart."""
    quoted = [quote_term(t) for t in terms]
    if len(quoted) == 1:
        return quoted[0]
    # in the document's own text only: the next turn, whose near column holds this text, must
    # not rank as if it held the passage
    phrases = [
        BODY_ONLY + phrase
        for phrase in dict.fromkeys([*quoted_phrases(query), *number_phrases(query)])
    ]
    rare = [q for q in quoted if r.recall.doc_frequency(q, COMMON_DOCS + 1) <= COMMON_DOCS]
    if rare:
        return " OR ".join(rare + phrases)
    # every group common: the numbers as written, or all the words
    match = " OR ".join([*phrases, all_in_body(quoted)])
    return match if r.recall.doc_frequency(match, 1) else any_in_body(quoted)


def search(
    r: ReadTxn,
    key: bytes,
    query: str | None = None,
    *,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    limit: int = 10,
    cursor: str | None = None,
    kinds: list[str] | None = None,
    lifecycle: list[str] | None = None,
) -> SearchPage:
    """Search one context (``r`` is an open read of it). See the module docstring."""
    check_whole(limit, "limit", 1, MAX_LIMIT)
    since_us, until_us = _time_arg(since, "since"), _time_arg(until, "until")
    filters = _filters(since_us, until_us, kinds, lifecycle)
    if query is not None and not isinstance(query, str):
        raise InputError(f"the query is text, not {query!r}")
    if query is not None and not check_text(query, "the query").strip():
        query = None  # "" or only blanks: no query (a time range alone, if one is given)
    terms = query_terms(query) if query else []
    if query and not terms:  # (with a time range too: the range alone is not what was asked)
        raise InputError(
            f"nothing searchable in {query!r} (only very common words, symbols or emoji): add "
            "specific words, or search the time range without a query"
        )
    if not terms and since_us is None and until_us is None:
        raise InputError("give a query, a time range (since/until), or both")
    params = {
        "context": r.row.context_id,
        "query": query or "",
        "since": since_us,
        "until": until_us,
        "kinds": sorted(kinds or []),
        "lifecycle": sorted(lifecycle or []),
    }
    digest = cursors.fingerprint(params)
    state = cursors.decode(key, cursor, digest) if cursor is not None else None
    pin = Pin(state["s"], state["f"]) if state else r.recall.pin(r.row.last_seq)
    page = _Page(r, key, filters, pin, limit, digest, state)
    if terms:
        return page.ranked(terms, query_words(query or ""), query or "")
    return page.chronological()


@dataclass(frozen=True, slots=True)
class _Page:
    """One page being served: the read, the cursor key, what to return and where it starts."""

    r: ReadTxn
    key: bytes
    filters: Filters
    pin: Pin
    limit: int
    digest: str
    state: dict[str, Any] | None

    def _cursor(self, extra: dict[str, Any]) -> str:
        payload = {"q": self.digest, "s": self.pin.max_seq, "f": self.pin.max_frame_doc}
        return cursors.encode(self.key, {**payload, **extra})

    def ranked(self, terms: list[str], words: list[str], query: str) -> SearchPage:
        seen = cursors.unpack_ids(self.state["seen"]) if self.state else set()
        room = MAX_PAGED_RESULTS - len(seen)
        want = min(self.limit, room)
        # the match chosen on the first page is kept: a word turning common later must not
        # change which documents the pinned evidence set holds
        match = self.state["m"] if self.state else _match(self.r, terms, query)
        rows = self.r.recall.ranked(match, self.pin, self.filters, len(seen) + want + 1)
        fresh = [(rowid, score) for rowid, score in rows if rowid not in seen]
        page = fresh[:want]
        next_cursor = None
        if len(fresh) > want and room > want:
            ids = [*seen, *(rowid for rowid, _ in page)]
            next_cursor = self._cursor({"seen": cursors.pack_ids(ids), "m": match})
        scores = {rowid: -score for rowid, score in page}
        hits = _hydrate(self.r, [rowid for rowid, _ in page], scores)
        truncated = len(fresh) > want and next_cursor is None  # more, beyond the walk's cap
        found = tuple(self._found(words))
        return SearchPage(tuple(hits), next_cursor, "relevance", found, truncated)

    def _found(self, words: list[str]) -> list[str]:
        """The query words some document of the index holds (the others matched nothing)."""
        df = self.r.recall.doc_frequency
        return [w for w in words if any(df(quote_term(t), 1) for t in query_terms(w))]

    def chronological(self) -> SearchPage:
        after = (self.state["t"], self.state["i"]) if self.state else None
        rows = self.r.recall.chronological(self.pin, self.filters, after, self.limit + 1)
        page = rows[: self.limit]
        next_cursor = None
        if len(rows) > self.limit:
            last_time, last_id = page[-1]
            next_cursor = self._cursor({"t": last_time, "i": last_id})
        # a frame revised since the pin is shown at the time the walk places it (its document's
        # as of the pin), so the pages' times stay in order
        times = {rowid: when for when, rowid in page}
        hits = _hydrate(self.r, [rowid for _, rowid in page], {}, times)
        return SearchPage(tuple(hits), next_cursor, "time")


def _hydrate(
    r: ReadTxn, rowids: list[int], scores: dict[int, float], times: dict[int, int] | None = None
) -> list[Hit]:
    events = r.recall.events_by_seq([i for i in rowids if i > 0])
    frames = r.recall.frames_by_ord([i for i in rowids if i < 0])
    out: list[Hit] = []
    for rowid in rowids:
        score = float(f"{scores[rowid]:.6g}") if rowid in scores else None
        if rowid > 0 and rowid in events:
            out.append(_event_hit(events[rowid], score))
        elif rowid < 0 and rowid in frames:
            row = frames[rowid]
            out.append(_frame_hit(row, score, (times or {}).get(rowid, row.time_us)))
    return out


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line, cut (with an ellipsis) where no character is split: its words
    joined by single spaces, as ``" ".join(text.split())``, but read only up to the first
    character past ``limit`` (the cut looks at none after it), so a hit on a text of any size
    costs a bounded preview."""
    flat = _flat_head(text, limit + 1)
    return flat if len(flat) <= limit else flat[: boundary(flat, limit - 1, -1)] + "…"


_WORD = re.compile(r"\S+")  # \S in a str pattern is what str.split() does not split on


def _flat_head(text: str, most: int) -> str:
    """The first ``most`` characters (or all, if fewer) of ``" ".join(text.split())``."""
    parts: list[str] = []
    size = 0
    for word in _WORD.finditer(text):
        if parts:
            parts.append(" ")
            size += 1
        start, end = word.span()
        part = text[start : min(end, start + most - size)]  # a huge word is not copied whole
        parts.append(part)
        size += len(part)
        if size >= most:
            break
    return "".join(parts)[:most]


def _event_hit(row: EventRow, score: float | None) -> Hit:
    payload = json.loads(row.payload) if row.payload else {}
    text = row.text or ""
    if row.kind == ev.TX_COMMITTED:  # the reason, the frames whose old bodies it holds and the
        said = [str(payload["reason"])] if payload.get("reason") else []  # relations it removed
        said += [  # (read @eN shows them)
            f"{key}: {', '.join(payload[key])}" for key in COMMIT_BODY_KEYS if payload.get(key)
        ]
        if edges := payload.get(COMMIT_EDGE_KEY):
            said.append(f"{COMMIT_EDGE_KEY}: {', '.join(' '.join(e) for e in edges)}")
        text = " — ".join([*said, text])
    meta = json.loads(row.meta) if row.meta else None
    return Hit(
        row.kind,
        make_ref(row.seq),
        None,
        row.time,
        score,
        preview(text),
        row.lifecycle,  # a delivered reply's is its agent_reply's; a commit has none
        meta,
        row.session_id,
    )


def _frame_hit(row: FrameRow, score: float | None, when_us: int) -> Hit:
    from datetime import UTC, timedelta

    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=when_us)
    sources = row.sources.split()
    meta = {"revision": row.revision, "sources": sources, "protected": bool(row.protected)}
    text = f"{row.frame_id}: {row.body}"
    return Hit(
        "frame",
        None,
        row.frame_id,
        moment.isoformat(),
        score,
        preview(text),
        row.lifecycle,
        meta,
        None,
    )
