"""Review 11, the session's last commits (5fc199a^..HEAD): recall read's whole-character page
end, the audit's damaged-row test, and the number phrases of recall search.

Each test fails on the code it was written against (2167324) and states the expected behaviour
in its docstring.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

import morphz
from morphz.encoding.view import View
from morphz.recall.api import Recall
from test_recall import keys, say

# ------------------------------------------------------------------ delivered read: no loop

_MAX_READS = 50  # a delivered read that needs more pages than this is looping


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Recall.read, counted; past _MAX_READS it raises instead of looping for ever."""
    calls: list[int] = []
    original: Callable[..., Any] = Recall.read

    def read(self: Recall, ref: str, **kw: Any) -> Any:
        calls.append(kw.get("limit", -1))
        if len(calls) > _MAX_READS:
            raise AssertionError(
                f"deliver('read') asked for {len(calls)} pages, the last limits "
                f"{calls[-5:]}: it loops for ever"
            )
        return original(self, ref, **kw)

    monkeypatch.setattr(Recall, "read", read)
    return calls


def test_a_delivered_read_with_a_small_limit_ends_on_a_combining_mark(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recall/read.py now moves a page's end forward past a combining mark when moving it back
    would leave nothing (6761d10), so read(limit=1) of "e\u0301..." returns 2 characters.
    Recall._read_whole (recall/api.py) shrinks a delivered page that does not fit the preview
    threshold while ``len(page.text) > floor`` with ``floor = min(limit, 64)`` = 1, asking again
    with ``limit = max(floor, ...)`` = 1: the same 2-character page every time, so the loop never
    ends (the agent's recall tool hangs its worker thread, and an interrupt's settle() waits
    for it for ever). Expected: the delivered read returns (here: one whole character, its
    next_offset after the mark), whatever the threshold or the event's meta size."""
    _counting_reads(monkeypatch)
    ref = ctx.observe("user_message", "e\u0301" * 50).ref
    ctx.set_view(View(preview_threshold=100))  # any threshold below the delivered JSON
    page, _event = ctx.recall.deliver("read", ref=ref, offset=0, limit=1)
    assert page.text == "e\u0301"
    assert page.next_offset == 2


def test_a_delivered_read_of_an_event_with_a_large_meta_and_a_small_limit_returns(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same loop under the default preview threshold (16,000): the delivered JSON carries
    the event's meta, so an event whose meta alone is past the threshold never fits, and a
    read with a limit under 33 that starts on a character with a combining mark loops for
    ever. Expected: deliver('read') returns a page (the meta is left to preview)."""
    _counting_reads(monkeypatch)
    ref = ctx.observe("user_message", "e\u0301" * 50, meta={"note": "x" * 20_000}).ref
    page, _event = ctx.recall.deliver("read", ref=ref, offset=0, limit=1)
    assert page.text.startswith("e\u0301")


# ------------------------------------------------------------------ audit: damaged text row


def test_the_audit_reports_an_event_whose_text_is_not_utf8_instead_of_raising(
    open_db: Callable[[], morphz.Database],
) -> None:
    """audit._next_event treats as a finding only a StoreError whose cause is a ValueError,
    TypeError or RecursionError (6761d10: 'only a row that cannot be decoded is a finding').
    A row whose stored text is not UTF-8 (a hand edit, a damaged page quick_check does not
    see) fails in the driver (sqlite3.OperationalError 'Could not decode to UTF-8 column'),
    which the store wraps as a StoreError with that cause: the audit now re-raises it, and
    `morphz context audit` ends in 'read from ... failed' instead of a report. Before 6761d10
    it was reported as a difference ('the event cannot be read ... the replay stops').
    Expected: audit() returns a report that is not ok and says the event cannot be read."""
    db = open_db()
    ctx = db.context("context-default", create=True)
    ctx.observe("user_message", "hello")
    ctx.observe("user_message", "world")
    path = db.store.path
    db.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE seq = 2")
    conn.commit()
    conn.close()
    report = open_db().context("context-default").audit()
    assert not report.ok
    assert any("cannot be read" in d for d in report.differences), report.differences


# ------------------------------------------------------------------ numbers with repeated groups


def test_a_number_with_a_repeated_group_ranks_its_exact_form_first(ctx: morphz.Context) -> None:
    """number_phrases (recall/tokenize.py) builds the phrase of a dotted number from
    query_terms, which removes repeated terms: '1.2.1.3' becomes the phrase "1 2 3", which the
    text '1.2.1.3' does not hold (its tokens are 1 2 1 3) but '1.2.3' does. So the search for
    '1.2.1.3' ranks a release '1.2.3' above the release written exactly so: the opposite of
    what the phrase was added for ('numbers written with separators rank their exact form
    first'). Expected: the document holding '1.2.1.3' as written is the top hit."""
    exact = say(ctx, "release 1.2.1.3 shipped to production")
    say(ctx, "release 3.1.2.1 shipped to production")
    other = say(ctx, "release 1.2.3 shipped to production")
    hits = keys(ctx.recall.search("1.2.1.3"))
    assert {exact, other} <= set(hits)
    assert hits[0] == exact, hits
