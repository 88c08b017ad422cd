"""Review 13, recall of retired content: what is retired stays recallable (DESIGN §7, §8).

Each test fails on the code it was written against (ab4c3c5) and states the expected behaviour
in its docstring.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import morphz
from morphz.recall import search as search_module
from recalls import commit, keys, say

# ------------------------------------------------------------------ removed relations


def test_a_relation_a_rollback_undid_can_still_be_found(ctx: morphz.Context) -> None:
    """DESIGN §8 lists relations among what the index holds, and decisions.md ("What a rollback
    undid stays findable") promises that what a rollback takes out of the mind can be found
    again. A rollback that removes a relation between two frames that stay records nothing of
    it: the frames' documents are rewritten without it, and the rollback's document holds only
    its reason and the bodies of frames it removed (committing._old_bodies records frames, not
    edges; documents.event_text indexes reason, undone and replaced only). Expected: searching
    the relation's name after the rollback finds something that leads to it (e.g. the rollback's
    commit, naming the edge it undid). Today: no hit at all."""
    commit(ctx, '(create plan/a (fact "alpha"))', '(create plan/b (fact "beta"))')
    commit(ctx, "(checkpoint before)")
    commit(ctx, "(relate plan/a obstructs plan/b)")
    assert set(keys(ctx.recall.search("obstructs"))) == {"frame:plan/a"}  # its subject's
    commit(ctx, "(rollback before)", reason="start over")
    assert keys(ctx.recall.search("obstructs")), "the relation the rollback undid is not found"


def test_a_relation_removed_by_unrelate_can_still_be_found(ctx: morphz.Context) -> None:
    """Unrelate is one of the operations that take content out of the mind (it needs a reason,
    like retire). Its commit's document holds the reason only, the frames' documents lose the
    edge, and the relate commit was indexed by its reason only: the relation is then found by
    nothing. Expected: searching the relation's name finds the commit that removed it (or the
    one that added it), as a revise's earlier body is found through its commit. Today: no hit."""
    commit(ctx, '(create plan/a (fact "alpha"))', '(create plan/b (fact "beta"))')
    commit(ctx, "(relate plan/a hinders plan/b)")
    assert keys(ctx.recall.search("hinders"))
    commit(ctx, "(unrelate plan/a hinders plan/b)", reason="no longer true")
    assert keys(ctx.recall.search("hinders")), "the removed relation is not found"


# ------------------------------------------------------------------ all-common words


def test_common_words_never_in_one_document_still_find_something(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every word of a query is in more than COMMON_DOCS documents (10,000; scaled down to
    3 here), search._match requires all of them in one document's own text
    (tokenize.all_in_body), with no fallback. On a long history two ordinary words of the
    domain that never share a document ("deploy region" on 100,000 events, each word in
    thousands of them) return zero hits, while each word alone returns thousands, and the page
    says both words matched (`terms`), with no cursor and `truncated` false: it reads as
    "nothing holds these words". Expected: a query whose words are each held by documents
    returns some of them (e.g. the OR of the words when the AND matches nothing)."""
    monkeypatch.setattr(search_module, "COMMON_DOCS", 3)
    ambers = {say(ctx, f"amber pebble {i}") for i in range(5)}
    basalts = {say(ctx, f"basalt cobble {i}") for i in range(5)}
    assert set(keys(ctx.recall.search("amber", limit=100))) == ambers
    page = ctx.recall.search("amber basalt", limit=100)
    assert page.terms == ("amber", "basalt")  # both words are held by documents ...
    assert set(keys(page)) & (ambers | basalts), "... and nothing is returned"


# ------------------------------------------------------------------ lifecycle of replies


def test_a_reply_the_agent_retired_is_found_as_retired(ctx: morphz.Context) -> None:
    """A delivered reply is a model_reply event (indexed) and an agent_reply observation (not
    indexed: it copies the model_reply), which the agent retires like anything else. The
    lifecycle filter reads an event without an observation row as active
    (SqliteRecall._filter_sql: coalesce(o.lifecycle, fr.lifecycle, 'active')), and the hit says
    lifecycle null. So a reply the agent retired is returned by `--lifecycle active`, never by
    `--lifecycle retired`. Expected: searching retired content finds the retired reply (its
    model_reply takes the lifecycle of the agent_reply that copies it), and an `active` search
    does not return it."""
    say(ctx, "where do the airships dock?", session="chat")
    reply = ctx.record("model_reply", "The zeppelin hangar is in Reykjavik", session="chat")
    answer = ctx.observe("agent_reply", reply.text or "", session="chat", meta={"reply": reply.ref})
    commit(ctx, f"(retire {answer.ref})", reason="answered")
    assert keys(ctx.recall.search("zeppelin")) == [reply.ref]
    assert keys(ctx.recall.search("zeppelin", lifecycle=["retired"])) == [reply.ref]
    assert keys(ctx.recall.search("zeppelin", lifecycle=["active"])) == []


# ------------------------------------------------------------------ pinned time walks


def test_a_time_walk_does_not_skip_a_frame_revised_between_pages(tmp_path: Path) -> None:
    """cli.md (Paging): "following the cursors returns every matching document at most once and
    none is skipped, even when events arrive between pages". A chronological walk pins frames by
    key, but filters them by the time of their *current* document (recall_frames.time_us, moved
    to the revise's time by SqliteRecall.put_frames). A frame of the first page's evidence set
    that is revised before the walk reaches it moves past `until` and is skipped; its earlier
    body is in the revising commit, which is after the pin. So the walk over a window returns
    neither the frame nor anything leading to it. Expected: every document of the first page's
    evidence set is returned by the walk (here: plan/b)."""
    minutes = itertools.count()

    def clock() -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=next(minutes))

    db = morphz.open(tmp_path / "walk.db", now=clock)
    try:
        ctx = db.context("c", create=True)
        say(ctx, "first note")
        commit(ctx, '(create plan/a (fact "alpha"))')
        commit(ctx, '(create plan/b (fact "beta"))')
        say(ctx, "second note")
        since, until = "2026-01-01T00:00:00+00:00", "2026-01-01T00:30:00+00:00"
        evidence = keys(ctx.recall.search(None, since=since, until=until, limit=100))
        assert "frame:plan/b" in evidence
        page = ctx.recall.search(None, since=since, until=until, limit=1)
        walked = keys(page)
        for i in range(40):  # time passes
            say(ctx, f"later note {i}")
        commit(ctx, '(revise plan/b (fact "beta, revised"))')
        while page.next_cursor is not None:
            page = ctx.recall.search(
                None, since=since, until=until, limit=1, cursor=page.next_cursor
            )
            walked += keys(page)
        assert len(walked) == len(set(walked)) and set(walked) == set(evidence), walked
    finally:
        db.close()
