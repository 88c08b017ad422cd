"""The fixes of review 13's recall findings, beyond the reviewer's tests: what a commit records of
the relations it removes and how recall shows them, the audit of a commit's payload on old and
new stores, the all-common fallback's cursor, the lifecycle of delivered replies, the pinned
times of a chronological walk, and the agent's recall tool."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.errors import InputError
from morphz.recall import search as search_module
from morphz.runtime.agent_tools import agent_tools
from morphz.runtime.tools.base import ToolContext, ToolError, ToolOutcome, run_guarded
from recalls import commit, key, keys, say
from stores import run_sql

# ------------------------------------------------------------------ removed relations


def test_a_commit_records_shows_and_previews_the_relations_it_removed(ctx: morphz.Context) -> None:
    commit(ctx, '(create plan/a (fact "alpha"))', '(create plan/b (fact "beta"))')
    commit(ctx, "(relate plan/a hinders plan/b)", "(relate plan/b hinders plan/a)")
    commit(ctx, "(unrelate plan/a hinders plan/b)", reason="no longer true")
    event = ctx.events()[-1]
    assert event.payload is not None
    assert event.payload["unrelated"] == [["plan/a", "hinders", "plan/b"]]
    (hit,) = ctx.recall.search("hinders", kinds=["transactions"]).hits
    assert hit.ref == event.ref
    assert hit.preview.startswith("no longer true — unrelated: plan/a hinders plan/b — ")
    assert "\n; unrelated plan/a hinders plan/b" in ctx.recall.read(event.ref).text
    # a relation added and removed in one transaction was never there: nothing is recorded
    commit(ctx, "(relate plan/a helps plan/b)", "(unrelate plan/a helps plan/b)", reason="oops")
    assert "unrelated" not in (ctx.events()[-1].payload or {})


def test_a_rollback_records_the_relations_of_the_frames_it_undid(ctx: morphz.Context) -> None:
    commit(ctx, '(create plan/a (fact "alpha"))')
    commit(ctx, "(checkpoint before)")
    commit(ctx, '(create plan/b (fact "beta"))', "(relate plan/b blocks plan/a)")
    commit(ctx, "(rollback before)", reason="start over")
    payload = ctx.events()[-1].payload or {}
    assert payload["undone"] == {"plan/b": '(fact "beta")'}
    assert payload["unrelated"] == [["plan/b", "blocks", "plan/a"]]
    assert ctx.audit().ok


def test_a_rebuilt_index_finds_the_removed_relation_as_the_live_one(ctx: morphz.Context) -> None:
    commit(ctx, '(create plan/a (fact "alpha"))', '(create plan/b (fact "beta"))')
    commit(ctx, "(relate plan/a obstructs plan/b)")
    commit(ctx, "(unrelate plan/a obstructs plan/b)", reason="cleared")
    live = ctx.recall_index.documents()
    ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live
    assert keys(ctx.recall.search("obstructs")) == [ctx.events()[-1].ref]


# ------------------------------------------------------------------ the audit of a payload


def _history(path: Path) -> None:
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        commit(ctx, '(create plan/a (fact "alpha"))', '(create plan/b (fact "beta"))')
        commit(ctx, "(checkpoint before)")
        commit(ctx, "(relate plan/a obstructs plan/b)", '(revise plan/a (fact "gamma"))')
        commit(ctx, "(unrelate plan/a obstructs plan/b)", reason="cleared")
        commit(ctx, "(rollback before)", reason="start over")


@pytest.mark.parametrize(
    "forgery",
    [
        'json_set(payload, \'$.unrelated\', json(\'[["plan/a", "helps", "plan/b"]]\'))',
        "json_set(payload, '$.replaced', json('{\"plan/a\": \"forged\"}'))",
        "json_set(payload, '$.undone', json('{\"plan/z\": \"forged\"}'))",
        "json_set(payload, '$.base_version', 0)",
        "json_set(payload, '$.tx_id', 'tx-99')",
    ],
)
def test_the_audit_reports_each_forged_key_of_a_commit_payload(
    tmp_path: Path, forgery: str
) -> None:
    path = tmp_path / "s.db"
    _history(path)
    with morphz.open(path) as db:
        assert db.context("c").audit().ok
        last = db.context("c").events()[-1].seq
    run_sql(path, f"UPDATE events SET payload = {forgery} WHERE seq = {last}")
    with morphz.open(path) as db:
        report = db.context("c").audit()
    assert not report.ok
    assert any(d.startswith(f"@e{last}: the commit's payload has") for d in report.differences)


def test_commits_written_before_their_keys_were_recorded_audit_clean(tmp_path: Path) -> None:
    """Stores written before `unrelated` (and, earlier, `replaced` and `undone`) lack them."""
    path = tmp_path / "s.db"
    _history(path)
    run_sql(
        path,
        "UPDATE events SET payload = json_remove(payload, '$.unrelated', '$.replaced', "
        "'$.undone') WHERE kind = 'context_tx_committed'",
    )
    with morphz.open(path) as db:
        ctx = db.context("c")
        ctx.recall_index.rebuild()  # the commits' documents as an older store has them
        report = ctx.audit()
    assert report.ok, report.differences


# ------------------------------------------------------------------ all common words


def test_the_any_word_match_of_common_words_is_kept_by_its_cursor(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk goes on with the match of its first page: a document holding both words that
    arrives between pages does not turn it into the all-words match (which would end it)."""
    monkeypatch.setattr(search_module, "COMMON_DOCS", 3)
    found = {say(ctx, f"amber pebble {i}") for i in range(5)}
    found |= {say(ctx, f"basalt cobble {i}") for i in range(5)}
    page = ctx.recall.search("amber basalt", limit=3)
    walked = keys(page)
    together = set()
    while page.next_cursor is not None:
        together.add(say(ctx, "amber basalt together"))
        page = ctx.recall.search("amber basalt", limit=3, cursor=page.next_cursor)
        walked += keys(page)
    assert len(walked) == len(set(walked)) and set(walked) == found
    # a new search, now that documents hold both: every word in one document again
    assert set(keys(ctx.recall.search("amber basalt", limit=100))) == together


def test_the_any_word_match_is_bounded_by_the_window(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "COMMON_DOCS", 3)
    day = datetime(2026, 3, 1, tzinfo=UTC)
    inside = set()
    for i in range(10):
        when = (day + timedelta(hours=i)).isoformat()
        ref = ctx.observe("user_message", f"{['amber', 'basalt'][i % 2]} {i}", time=when).ref
        if 2 <= i < 6:
            inside.add(ref)
    window = {"since": (day + timedelta(hours=2)).isoformat()}
    window["until"] = (day + timedelta(hours=6)).isoformat()
    assert set(keys(ctx.recall.search("amber basalt", limit=100, **window))) == inside


# ------------------------------------------------------------------ lifecycle of replies


def test_a_delivered_reply_shows_its_lifecycle_and_a_commit_none(ctx: morphz.Context) -> None:
    reply = ctx.record("model_reply", "the zeppelin docks at dawn", session="chat")
    answer = ctx.observe("agent_reply", reply.text or "", session="chat", meta={"reply": reply.ref})
    undelivered = ctx.record("model_reply", "a zeppelin draft", session="chat")
    commit(ctx, f"(retire {answer.ref})", reason="zeppelin answered")
    hits = {key(h): h.lifecycle for h in ctx.recall.search("zeppelin").hits}
    assert hits == {reply.ref: "retired", undelivered.ref: None, ctx.events()[-1].ref: None}
    # a lifecycle filter returns what has that lifecycle: not a commit, nor an undelivered reply
    for life in ("active", "retiring"):
        assert keys(ctx.recall.search("zeppelin", lifecycle=[life])) == []
    since = "2000-01-01T00:00:00Z"
    assert keys(ctx.recall.search(since=since, lifecycle=["retired"])) == [reply.ref]
    assert keys(ctx.recall.search(since=since, lifecycle=["active"])) == []


# ------------------------------------------------------------------ pinned walks


def _clocked(path: Path) -> morphz.Database:
    minutes = itertools.count()

    def clock() -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=next(minutes))

    return morphz.open(path, now=clock)


def test_a_frame_revised_inside_the_window_is_walked_once_at_its_pinned_time(
    tmp_path: Path,
) -> None:
    with _clocked(tmp_path / "walk.db") as db:
        ctx = db.context("c", create=True)
        commit(ctx, '(create plan/a (fact "alpha"))')
        commit(ctx, '(create plan/b (fact "beta"))')
        window = {"since": "2026-01-01T00:00:00+00:00", "until": "2026-01-01T02:00:00+00:00"}
        evidence = ctx.recall.search(None, limit=100, **window).hits
        page = ctx.recall.search(None, limit=1, **window)
        walked = list(page.hits)
        commit(ctx, '(revise plan/a (fact "alpha, revised"))')  # inside the window, later
        commit(ctx, '(revise plan/b (fact "beta, revised"))')
        while page.next_cursor is not None:
            page = ctx.recall.search(None, limit=1, cursor=page.next_cursor, **window)
            walked += page.hits
        assert [(key(h), h.time) for h in walked] == [(key(h), h.time) for h in evidence]
        # a new walk places the revised frames at their revisions' times
        times = {key(h): h.time for h in ctx.recall.search(None, limit=100, **window).hits}
        assert times["frame:plan/b"] == "2026-01-01T00:04:00+00:00"


def test_the_upgrade_fills_the_frame_times_and_the_walk_keeps_its_pin(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with _clocked(path) as db:
        ctx = db.context("c", create=True)
        commit(ctx, '(create plan/a (fact "alpha"))')
        commit(ctx, '(revise plan/a (fact "alpha, revised"))')
    run_sql(  # a store from before 0019
        path,
        "DROP TABLE recall_frame_times",
        "DROP INDEX events_reply",
        "DELETE FROM schema_migrations WHERE number = 19",
    )
    with _clocked(path) as db:
        ctx = db.context("c", create=True)
        page = ctx.recall.search(None, since="2026-01-01T00:00:00Z", limit=1)
        assert keys(page) == ["@e1"]
        commit(ctx, '(revise plan/a (fact "alpha, again"))')
        page = ctx.recall.search(None, since="2026-01-01T00:00:00Z", cursor=page.next_cursor)
        assert keys(page) == ["frame:plan/a", "@e2"]  # the revise's time, which @e2 has too
        assert page.hits[0].time == page.hits[1].time
        assert ctx.audit().ok


# ------------------------------------------------------------------ the agent's recall tool


def _recall(ctx: morphz.Context, ws: Path, **args: Any) -> ToolOutcome | ToolError:
    recall = next(t for t in agent_tools() if t.name == "recall")
    # the tool's result names its activation, which must be one of the session (fix 16f):
    # one activation for all the calls of a test
    running = [a.activation_id for a in ctx.activations(running_only=True)]
    activation = running[0] if running else ctx.start_activation("session-1")
    tc = ToolContext(ctx, "session-1", activation, ws, ())
    try:
        return asyncio.run(run_guarded(recall, args, tc))
    except ToolError as exc:
        return exc


def test_the_recall_tool_takes_a_lifecycle(ctx: morphz.Context, ws: Path) -> None:
    say(ctx, "the runbook is in the wiki")
    outcome = _recall(ctx, ws, op="search", query="runbook", lifecycle=["active"])
    assert isinstance(outcome, ToolOutcome) and outcome.delivered is not None
    delivered = ctx.event(outcome.delivered)
    assert (delivered.meta or {})["recall"]["params"]["lifecycle"] == ["active"]
    refused = _recall(ctx, ws, op="search", query="runbook", lifecycle=["gone"])
    assert isinstance(refused, ToolError) and "lifecycle" in str(refused)
    assert ctx.events()[-1].ref == outcome.delivered  # refused before it ran: nothing recorded


def test_the_recall_tool_limits_a_search_and_a_read_as_the_api_does(
    ctx: morphz.Context, ws: Path
) -> None:
    schema = next(t for t in agent_tools() if t.name == "recall").schema.parameters
    assert schema["properties"]["limit"]["maximum"] == 100_000  # a read's characters
    ref = say(ctx, "the runbook is in the wiki")
    refused = _recall(ctx, ws, op="search", query="runbook", limit=101)
    assert isinstance(refused, ToolError) and "[1, 100]" in str(refused)
    assert isinstance(_recall(ctx, ws, op="read", ref=ref, limit=100_000), ToolOutcome)
    refused = _recall(ctx, ws, op="read", ref=ref, limit=100_001)
    assert isinstance(refused, ToolError) and "[1, 100000]" in str(refused)


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_query_is_no_query(ctx: morphz.Context, blank: str) -> None:
    ref = say(ctx, "something")
    since = "2000-01-01T00:00:00Z"
    assert keys(ctx.recall.search(blank, since=since)) == keys(ctx.recall.search(since=since))
    assert keys(ctx.recall.search(blank, since=since)) == [ref]
    with pytest.raises(InputError, match="query, a time range"):
        ctx.recall.search(blank)
