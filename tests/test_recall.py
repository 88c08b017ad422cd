"""Recall search, cursors, paged reads and the agent's deliver path, through the Python API on a
real store (issue 3; DESIGN §8).

Most documents are put in a session of their own: the index also matches a document by the text
of the observation before it in the same session (the ``near`` column), which would otherwise
blur what a test is about."""

from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import morphz
from morphz import events as ev
from morphz.errors import CursorError, InputError, RecordNotFoundError
from morphz.recall import search as search_module
from morphz.recall.search import Hit, SearchPage

REASON = "routine upkeep"  # the reason of helper commits (tx reasons are indexed)

# ------------------------------------------------------------------ helpers


def commit(ctx: morphz.Context, *ops: str, reason: str | None = REASON) -> morphz.Receipt:
    header = f"(base-version {ctx.version})" + ("" if reason is None else f' (reason "{reason}")')
    return ctx.commit(f"(context-tx {header} " + " ".join(ops) + ")")


_numbers = itertools.count(1)


def say(ctx: morphz.Context, text: str, kind: str = "user_message", **kw: Any) -> str:
    """Append an observation in a session of its own (unless ``session`` is given); its ref."""
    session = kw.pop("session", None) or f"s{next(_numbers)}"
    return ctx.observe(kind, text, session=session, **kw).ref


def key(hit: Hit) -> str:
    return hit.ref if hit.ref is not None else f"frame:{hit.frame_id}"


def keys(page: SearchPage) -> list[str]:
    return [key(h) for h in page.hits]


def found(ctx: morphz.Context, query: str, **kw: Any) -> set[str]:
    return set(keys(ctx.recall.search(query, limit=100, **kw)))


def all_pages(ctx: morphz.Context, query: str | None = None, **kw: Any) -> list[str]:
    """Every result of a search, page by page."""
    out: list[str] = []
    cursor = None
    for _ in range(1000):
        page = ctx.recall.search(query, cursor=cursor, **kw)
        out.extend(keys(page))
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("paging did not end")


def tick(ctx: morphz.Context, n: int) -> None:
    for i in range(n):
        ctx.observe("user_message", f"tick {i}", session="clock")


def snapshot(ctx: morphz.Context) -> tuple[object, ...]:
    """Everything an operator read must leave untouched."""
    return (
        ctx.status(),
        ctx.mind(all_observations=True),
        ctx.events(),
        ctx.sessions(),
        ctx.recall_index.inspect(),
        ctx.recall_index.documents(),
    )


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


# ------------------------------------------------------------------ English


def test_stemming_matches_verb_forms(ctx: morphz.Context) -> None:
    docs = {
        say(ctx, "we are deploying the api gateway"),
        say(ctx, "they deployed the api gateway yesterday"),
        say(ctx, "she deploys it every friday"),
    }
    say(ctx, "the cat sat on the mat")
    for query in ("deploy", "deploying", "deployed", "deploys", "Deploying!"):
        assert found(ctx, query) == docs, query


def test_stemming_matches_other_inflections(ctx: morphz.Context) -> None:
    connect = {say(ctx, "connection refused"), say(ctx, "connecting to the host")}
    connect.add(say(ctx, "it connected at noon"))
    running = {say(ctx, "the job is running"), say(ctx, "two runs failed")}
    assert found(ctx, "connect") == found(ctx, "connections") == connect
    assert found(ctx, "run") == running


def test_stemming_matches_the_noun_deployment(ctx: morphz.Context) -> None:
    """deploying / deployment / deployed are one word for a reader. (Known Porter quirk: SQLite's
    porter tokenizer stems deploy/deploying/deployed to ``deploi`` but deployment to ``deploy``.)"""
    docs = {
        say(ctx, "we are deploying the api gateway"),
        say(ctx, "the deployment of the api gateway failed"),
        say(ctx, "they deployed the api gateway yesterday"),
    }
    say(ctx, "the cat sat on the mat")
    for query in ("deploying", "deployment", "deployed", "deploy"):
        assert found(ctx, query) == docs, query


def test_stopwords_are_ignored(ctx: morphz.Context) -> None:
    for i in range(6):
        say(ctx, f"the status of the database migration is on track, step {i}")
    say(ctx, "what is the status of the billing migration")
    say(ctx, "and then there was nothing of the sort")
    plain = ctx.recall.search("status migration", limit=20)
    wordy = ctx.recall.search("What is the status of the migration?", limit=20)
    assert wordy.terms == ("status", "migration")
    assert wordy.hits == plain.hits
    with pytest.raises(InputError, match="only very common words"):
        ctx.recall.search("what is it that was there")


def test_rare_words_rank_first(ctx: morphz.Context) -> None:
    for i in range(12):
        say(ctx, f"server restart completed number {i}")
    rare = say(ctx, "server kubernetes migration finished")
    one_rare = say(ctx, "kubernetes dashboard opened")
    page = ctx.recall.search("kubernetes migration server", limit=20)
    assert keys(page)[:2] == [rare, one_rare]
    assert len(page.hits) == 14
    scores = [h.score for h in page.hits]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True)  # higher is more relevant
    assert page.order == "relevance"


def test_ties_are_broken_deterministically_newest_first(ctx: morphz.Context) -> None:
    twins = [say(ctx, "identical twin text") for _ in range(5)]
    say(ctx, "something unrelated")
    first = ctx.recall.search("twin", limit=10)
    assert keys(first) == twins[::-1]
    assert len({h.score for h in first.hits}) == 1
    assert ctx.recall.search("twin", limit=10) == first


def test_the_same_query_twice_gives_the_same_page(ctx: morphz.Context) -> None:
    for i in range(30):
        say(ctx, f"alert {i % 4} on host {i % 7} cpu {'high' if i % 3 else 'low'} memory")
    commit(ctx, "(create alerts/cpu (cpu alert on host 3))", reason="cpu alerts triaged")
    for query in ("cpu alert host", "memory high", "host 3"):
        pages = [ctx.recall.search(query, limit=7) for _ in range(3)]
        assert pages[0] == pages[1] == pages[2]
        assert len(set(keys(pages[0]))) == len(pages[0].hits)


def test_query_syntax_is_inert(ctx: morphz.Context) -> None:
    doc = say(ctx, "NEAR the OR gate AND the NOT gate")
    for query in ('"gate', "gate*", "NOT gate", "gate AND (", "body:gate", "^gate", "NEAR(gate)"):
        assert doc in found(ctx, query), query


# ------------------------------------------------------------------ CJK


def test_chinese_query_finds_chinese_text_without_spaces(ctx: morphz.Context) -> None:
    doc = say(ctx, "我们需要把服务部署到上海区域")
    other = say(ctx, "北京的服务器已经下线了")
    say(ctx, "an english sentence about shanghai")
    for query in ("上海", "部署", "上海区域", "部署到上海"):
        hits = ctx.recall.search(query).hits
        assert [key(h) for h in hits] == [doc], query
        assert hits[0].preview == "我们需要把服务部署到上海区域"
    # words are OR-ed: a query sharing one word with another text finds it too, ranked lower
    for query in ("服务部署", "把服务部署到上海"):
        assert keys(ctx.recall.search(query)) == [doc, other], query
    assert found(ctx, "北京") == {other}
    assert found(ctx, "服务") == {doc, other}
    assert found(ctx, "广州") == set()


@pytest.mark.parametrize("char", ["我", "海", "部", "域"])  # first, middle, last character
def test_a_single_chinese_character_is_found_in_any_position(
    ctx: morphz.Context, char: str
) -> None:
    doc = say(ctx, "我们需要把服务部署到上海区域")
    say(ctx, "今天天气很好")
    assert found(ctx, char) == {doc}


def test_japanese_korean_and_mixed_scripts(ctx: morphz.Context) -> None:
    ja = say(ctx, "東京リージョンにデプロイしました")
    ko = say(ctx, "서울리전에배포했습니다")
    mixed = say(ctx, "把kubernetes集群迁移到上海")
    wide = say(ctx, "ＡＰＩ网关")  # full-width Latin letters
    assert found(ctx, "東京") == {ja}
    assert found(ctx, "デプロイ") == {ja}
    assert found(ctx, "서울") == {ko}
    assert found(ctx, "kubernetes") == {mixed}
    assert found(ctx, "集群 迁移") == {mixed}
    assert found(ctx, "api") == {wide}


# ------------------------------------------------------------------ lifecycle and kinds


def test_retired_observations_and_frames_stay_searchable_and_are_marked(
    ctx: morphz.Context,
) -> None:
    obs = say(ctx, "the quarterly forecast spreadsheet")
    commit(
        ctx,
        "(create forecast/active (quarterly forecast current))",
        "(create forecast/fading (quarterly forecast fading))",
        "(create forecast/old (quarterly forecast old))",
    )
    commit(ctx, f"(retire {obs} forecast/old)")
    tick(ctx, 4)
    commit(ctx, "(retire forecast/fading)")
    assert ctx.mind().frame("forecast/old").lifecycle == "retiring"  # type: ignore[union-attr]
    tick(ctx, 4)  # forecast/old: its window ends
    hits = {key(h): h for h in ctx.recall.search("quarterly forecast", limit=20).hits}
    assert hits[obs].lifecycle == "retired" and hits[obs].kind == "user_message"
    assert hits["frame:forecast/active"].lifecycle == "active"
    assert hits["frame:forecast/fading"].lifecycle == "retiring"
    assert hits["frame:forecast/old"].lifecycle == "retired"
    frame = hits["frame:forecast/old"]
    assert frame.kind == "frame" and frame.ref is None and frame.frame_id == "forecast/old"
    assert frame.meta == {"revision": 1, "sources": [], "protected": False}
    assert "forecast/old" in frame.preview and "quarterly forecast old" in frame.preview


def test_lifecycle_filter(ctx: morphz.Context) -> None:
    gone = say(ctx, "legacy ledger export")
    live = say(ctx, "ledger export for march")
    commit(ctx, "(create ledger/a (ledger export a))", "(create ledger/b (ledger export b))")
    commit(ctx, f"(retire {gone} ledger/b)")
    q = "ledger export"
    assert found(ctx, q, lifecycle=["retired"]) == {gone}
    assert found(ctx, q, lifecycle=["retiring"]) == {"frame:ledger/b"}
    active = found(ctx, q, lifecycle=["active"])
    assert {live, "frame:ledger/a"} <= active
    assert gone not in active and "frame:ledger/b" not in active
    assert found(ctx, q, lifecycle=["retired", "retiring"]) == {gone, "frame:ledger/b"}
    assert found(ctx, q, lifecycle=["active", "retiring", "retired"]) == found(ctx, q)
    since = "2000-01-01T00:00:00+00:00"
    chrono = set(all_pages(ctx, since=since, lifecycle=["retired", "retiring"], limit=3))
    assert chrono == {gone, "frame:ledger/b"}
    with pytest.raises(InputError, match="lifecycle"):
        ctx.recall.search(q, lifecycle=["dormant"])


@pytest.fixture
def kinds_ctx(ctx: morphz.Context) -> dict[str, str]:
    """One document of each searchable kind, all about invoices."""
    refs = {
        "user_message": say(ctx, "invoice alpha arrived"),
        "tool_result": say(ctx, "invoice beta parsed", kind="tool_result"),
        "external_event": say(ctx, "invoice gamma paid", kind="external_event"),
        "model_reply": ctx.record("model_reply", "invoice delta looks wrong").ref,
    }
    receipt = commit(ctx, "(create billing/invoice (invoice epsilon))", reason="invoice zeta")
    refs["context_tx_committed"] = receipt.event
    refs["frame"] = "frame:billing/invoice"
    ctx.record("tool_call", "invoice tool call", payload={"tool": "x"})  # not indexed
    ctx.observe("recall_result", "invoice recall result")  # not indexed
    say(ctx, "unrelated receipt")
    return refs


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        (
            None,
            [
                "user_message",
                "tool_result",
                "external_event",
                "model_reply",
                "context_tx_committed",
                "frame",
            ],
        ),
        (["observations"], ["user_message", "tool_result", "external_event"]),
        (["frames"], ["frame"]),
        (["replies"], ["model_reply"]),
        (["transactions"], ["context_tx_committed"]),
        (["user_message"], ["user_message"]),
        (["tool_result", "model_reply"], ["tool_result", "model_reply"]),
        (["replies", "frames"], ["model_reply", "frame"]),
        (
            ["observations", "transactions"],
            ["user_message", "tool_result", "external_event", "context_tx_committed"],
        ),
    ],
)
def test_kind_filter(
    ctx: morphz.Context,
    kinds_ctx: dict[str, str],
    kinds: list[str] | None,
    expected: list[str],
) -> None:
    want = {kinds_ctx[k] for k in expected}
    page = ctx.recall.search("invoice", kinds=kinds, limit=50)
    assert set(keys(page)) == want
    assert {h.kind for h in page.hits} == set(expected)
    chrono = ctx.recall.search(since="2000-01-01T00:00:00Z", kinds=kinds, limit=100).hits
    assert {key(h) for h in chrono} >= want
    assert {h.kind for h in chrono} == set(expected)


def test_unknown_kind_is_refused(ctx: morphz.Context, kinds_ctx: dict[str, str]) -> None:
    with pytest.raises(InputError, match=r"unknown kind 'invoices'.*observations"):
        ctx.recall.search("invoice", kinds=["invoices"])
    with pytest.raises(InputError, match="unknown kind"):
        ctx.recall.search("invoice", kinds=["tool_call"])


def test_transaction_hits_show_the_reason(ctx: morphz.Context, kinds_ctx: dict[str, str]) -> None:
    (hit,) = ctx.recall.search("zeta", kinds=["transactions"]).hits
    assert hit.ref == kinds_ctx["context_tx_committed"] and hit.kind == ev.TX_COMMITTED
    assert hit.preview.startswith("invoice zeta — (context-tx")
    assert hit.lifecycle is None and hit.session == "default"
    # the canonical tx text is not a document: only the reason is
    assert found(ctx, "epsilon", kinds=["transactions"]) == set()
    assert found(ctx, "epsilon") == {"frame:billing/invoice"}


def test_recall_results_and_tool_calls_are_not_documents(ctx: morphz.Context) -> None:
    ctx.observe("recall_result", "a copy of the walrus evidence")
    ctx.record("tool_call", "walrus", payload={"q": "walrus"})
    assert found(ctx, "walrus") == set()


def test_hit_fields(ctx: morphz.Context) -> None:
    meta = {"speaker": "Caroline", "dia_id": "D1:3", "tags": ["a", 1, None], "n": 2.5}
    ref = ctx.observe(
        "user_message",
        "Caroline  went\nto the\tLGBTQ support group " + "padding " * 60,
        time="2023-05-08T13:56:00+08:00",
        meta=meta,
        session="talk",
    ).ref
    (hit,) = ctx.recall.search("support group").hits
    data = hit.to_dict()
    assert set(data) >= {"ref", "kind", "time", "score", "preview", "lifecycle", "meta"}
    assert data["ref"] == ref and data["kind"] == "user_message"
    assert data["time"] == "2023-05-08T13:56:00+08:00"
    assert data["meta"] == meta and data["lifecycle"] == "active" and data["session"] == "talk"
    assert isinstance(data["score"], float)
    assert data["preview"].startswith("Caroline went to the LGBTQ support group padding")
    assert len(data["preview"]) <= 240 and data["preview"].endswith("…")
    json.dumps(ctx.recall.search("support group").to_dict())  # JSON-ready


# ------------------------------------------------------------------ time range

T = "2023-05-08T10:00:00+00:00"


def timed(ctx: morphz.Context, text: str, when: str, kind: str = "user_message") -> str:
    return say(ctx, text, kind=kind, time=when)


@pytest.fixture
def timeline(ctx: morphz.Context) -> list[str]:
    """Six observations an hour apart from 10:00Z, appended out of order, in several offsets."""
    spec = [
        (3, "13:00 meeting notes", "2023-05-08T21:00:00+08:00"),
        (0, "10:00 standup notes", "2023-05-08T10:00:00+00:00"),
        (5, "15:00 retro notes", "2023-05-08T10:00:00-05:00"),
        (1, "11:00 design notes", "2023-05-08T11:00:00Z"),
        (4, "14:00 review notes", "2023-05-08T19:30:00+05:30"),
        (2, "12:00 lunch notes", "2023-05-08T12:00:00.000000+00:00"),
    ]
    refs = [""] * 6
    for slot, text, when in spec:
        refs[slot] = timed(ctx, text, when)
    return refs


def test_time_range_alone_is_chronological(ctx: morphz.Context, timeline: list[str]) -> None:
    page = ctx.recall.search(since="2023-05-08T00:00:00Z", until="2023-05-09T00:00:00Z", limit=10)
    assert keys(page) == timeline
    assert page.order == "time" and page.next_cursor is None
    assert all(h.score is None for h in page.hits)
    assert page.hits[0].time == "2023-05-08T10:00:00+00:00"


def test_since_is_inclusive_and_until_exclusive(ctx: morphz.Context, timeline: list[str]) -> None:
    page = ctx.recall.search(since="2023-05-08T11:00:00Z", until="2023-05-08T14:00:00Z")
    assert keys(page) == timeline[1:4]
    # the same instants written in other offsets
    page = ctx.recall.search(since="2023-05-08T19:00:00+08:00", until="2023-05-08T09:00:00-05:00")
    assert keys(page) == timeline[1:4]
    # datetime objects with a tzinfo
    since = datetime(2023, 5, 8, 6, 0, tzinfo=timezone(timedelta(hours=-5)))
    until = datetime(2023, 5, 8, 14, 0, 0, 1, tzinfo=UTC)
    assert keys(ctx.recall.search(since=since, until=until)) == timeline[1:5]
    # one microsecond around an event
    assert keys(ctx.recall.search(since="2023-05-08T12:00:00.000001Z")) == timeline[3:]
    assert keys(ctx.recall.search(until="2023-05-08T12:00:00.000001Z")) == timeline[:3]
    assert keys(ctx.recall.search(until="2023-05-08T12:00:00Z")) == timeline[:2]


def test_time_range_with_a_query(ctx: morphz.Context, timeline: list[str]) -> None:
    timed(ctx, "standup notes from the day before", "2023-05-07T10:00:00Z")
    page = ctx.recall.search("notes", since="2023-05-08T11:00:00Z", until="2023-05-08T15:00:00Z")
    assert page.order == "relevance"
    assert set(keys(page)) == set(timeline[1:5])
    standup = ctx.recall.search("standup", since="2023-05-08T00:00:00Z")
    assert keys(standup) == [timeline[0]]
    assert len(found(ctx, "standup")) == 2


def test_commits_and_frames_carry_their_commit_time(ctx: morphz.Context) -> None:
    # the fixture's clock reads 09:00:01Z when the context is made, then +1 s per write
    commit(ctx, "(create clockwork (gears))", reason="first")
    later = ctx.observe("user_message", "after the commit").ref
    page = ctx.recall.search(since="2026-08-04T09:00:02Z", until="2026-08-04T09:00:03Z")
    assert keys(page) == ["frame:clockwork", "@e1"]  # same instant: frame documents first
    assert [h.time for h in page.hits] == ["2026-08-04T09:00:02+00:00"] * 2
    assert keys(ctx.recall.search(since="2026-08-04T09:00:03Z")) == [later]
    assert keys(ctx.recall.search("gears", until="2026-08-04T09:00:02Z")) == []
    assert keys(ctx.recall.search("gears", since="2026-08-04T09:00:02Z")) == ["frame:clockwork"]


def test_chronological_ties_go_by_sequence(ctx: morphz.Context) -> None:
    a = timed(ctx, "first", "2023-05-08T12:00:00+02:00")
    b = timed(ctx, "second", "2023-05-08T10:00:00Z")  # the same instant
    c = timed(ctx, "third", "2023-05-08T06:00:00-04:00")
    assert keys(ctx.recall.search(since="2023-05-08T10:00:00Z", limit=2)) == [a, b]
    assert all_pages(ctx, since="2023-05-08T10:00:00Z", limit=1) == [a, b, c]


@pytest.mark.parametrize(
    "naive", ["2023-05-08T10:00:00", "2023-05-08", datetime(2023, 5, 8, 10, 0)]
)
@pytest.mark.parametrize("which", ["since", "until"])
def test_naive_time_is_refused_naming_the_fix(
    ctx: morphz.Context, naive: datetime | str, which: str
) -> None:
    say(ctx, "something")
    with pytest.raises(InputError) as info:
        ctx.recall.search("something", **{which: naive})
    message = info.value.message
    assert which in message and "offset" in message and "+08:00" in message


def test_bad_time_arguments_are_refused(ctx: morphz.Context) -> None:
    with pytest.raises(InputError, match="ISO 8601"):
        ctx.recall.search(since="yesterday")
    with pytest.raises(InputError, match="since must be before until"):
        ctx.recall.search(since=T, until=T)
    with pytest.raises(InputError, match="since must be before until"):
        ctx.recall.search(since="2023-05-08T11:00:00Z", until="2023-05-08T18:00:00+08:00")
    with pytest.raises(InputError, match="query, a time range"):
        ctx.recall.search()
    with pytest.raises(InputError, match="query, a time range"):
        ctx.recall.search("")


@pytest.mark.parametrize("limit", [0, -1, 101, 1000, "5", 2.0, True])
def test_limit_outside_1_to_100_is_refused(ctx: morphz.Context, limit: Any) -> None:
    say(ctx, "something")
    with pytest.raises(InputError, match="limit must be a whole number from 1 to 100, not"):
        ctx.recall.search("something", limit=limit)
    with pytest.raises(InputError, match="limit"):
        ctx.recall.search(since=T, limit=limit)


def test_limits_1_and_100_are_accepted(ctx: morphz.Context) -> None:
    refs = [
        timed(ctx, f"entry {i}", f"2023-05-08T10:{i // 60:02d}:{i % 60:02d}Z") for i in range(120)
    ]
    assert keys(ctx.recall.search("entry", limit=1)) == [refs[-1]]
    assert keys(ctx.recall.search(since=T, limit=100)) == refs[:100]


# ------------------------------------------------------------------ cursors


@pytest.fixture
def corpus(ctx: morphz.Context) -> morphz.Context:
    """Eleven events and two frames about a harbour, with varied relevance and times."""
    for i in range(9):
        words = " ".join(["harbour"] * (1 + i % 3))
        timed(ctx, f"{words} crane {i} report", f"2023-05-0{1 + i % 4}T0{i}:00:00+02:00")
    ctx.record("model_reply", "the harbour looks fine")
    commit(ctx, "(create port/harbour (harbour cranes))", "(create port/dock (dock))")
    commit(ctx, "(relate port/dock part-of port/harbour)", reason="harbour layout")
    say(ctx, "an unrelated airport note")
    return ctx


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
def test_ranked_paging_returns_every_result_once(corpus: morphz.Context, limit: int) -> None:
    full = keys(corpus.recall.search("harbour", limit=100))
    assert len(full) == 13 and len(set(full)) == 13
    assert all_pages(corpus, "harbour", limit=limit) == full


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_chronological_paging_returns_every_result_once(corpus: morphz.Context, limit: int) -> None:
    since = "2023-01-01T00:00:00Z"
    full = keys(corpus.recall.search(since=since, limit=100))
    assert len(full) == len(set(full)) == 15  # 11 events, 2 commits and 2 frames
    assert all_pages(corpus, since=since, limit=limit) == full


def test_the_last_page_has_no_cursor(corpus: morphz.Context) -> None:
    first = corpus.recall.search("crane", limit=5)
    assert first.next_cursor is not None
    second = corpus.recall.search("crane", limit=5, cursor=first.next_cursor)
    assert len(second.hits) == 5 and second.next_cursor is None  # 10 results: no empty page
    assert corpus.recall.search("crane", limit=10).next_cursor is None
    assert corpus.recall.search("crane", limit=9).next_cursor is not None


def _flip(text: str, index: int) -> str:
    char = text[index]
    return text[:index] + ("B" if char == "A" else "A") + text[index + 1 :]


def test_tampered_cursors_are_refused(corpus: morphz.Context, open_db: Any) -> None:
    page = corpus.recall.search("harbour", limit=2)
    cursor = page.next_cursor
    assert cursor is not None
    body, mac = cursor.split(".")
    tampered = [
        _flip(cursor, len(body) // 2),  # a character of the payload
        _flip(cursor, 3),
        _flip(cursor, len(body) + 1 + len(mac) // 2),  # a character of the signature
        cursor[:-1],  # truncated
        cursor[: len(cursor) // 2],
        body,  # without its signature
        body + ".",
        "." + mac,
        cursor + "A",
        cursor + "." + mac,
        mac + "." + body,
        "not-a-cursor",
        "a.b",
        "%%%.%%%",
    ]
    for token in tampered:
        with pytest.raises(CursorError):
            corpus.recall.search("harbour", limit=2, cursor=token)
    # the real cursor still works afterwards
    assert corpus.recall.search("harbour", limit=2, cursor=cursor).hits


def test_a_cursor_only_continues_its_own_query(corpus: morphz.Context) -> None:
    cursor = corpus.recall.search("harbour", limit=2).next_cursor
    chrono = corpus.recall.search(since="2023-01-01T00:00:00Z", limit=2).next_cursor
    assert cursor is not None and chrono is not None
    others: list[dict[str, Any]] = [
        {"query": "crane"},
        {"query": "harbour crane"},
        {"query": "harbour", "kinds": ["observations"]},
        {"query": "harbour", "lifecycle": ["active"]},
        {"query": "harbour", "since": "2023-01-01T00:00:00Z"},
        {"query": "harbour", "until": "2030-01-01T00:00:00Z"},
        {"since": "2023-01-01T00:00:00Z"},
    ]
    for params in others:
        with pytest.raises(CursorError, match="different query"):
            corpus.recall.search(limit=2, cursor=cursor, **params)
    with pytest.raises(CursorError, match="different query"):
        corpus.recall.search("harbour", limit=2, cursor=chrono)
    with pytest.raises(CursorError, match="different query"):
        corpus.recall.search(since="2023-01-02T00:00:00Z", limit=2, cursor=chrono)


def test_a_cursor_from_another_context_or_store_is_refused(
    corpus: morphz.Context, tmp_path: Any
) -> None:
    cursor = corpus.recall.search("harbour", limit=2).next_cursor
    assert cursor is not None
    twin = corpus.db.context("twin", create=True)
    for i in range(5):
        twin.observe("user_message", f"harbour {i}", session=f"t{i}")
    with pytest.raises(CursorError):
        twin.recall.search("harbour", limit=2, cursor=cursor)
    # another store holding the same context with the same history
    with morphz.open(tmp_path / "other.db", now=Clock()) as other_db:
        other = other_db.context(corpus.id, create=True)
        for event in corpus.events():
            if event.is_observation:
                other.observe(event.kind, event.text or "", time=event.time, meta=event.meta)
        assert other.recall.search("harbour", limit=2).next_cursor is not None
        with pytest.raises(CursorError, match="another store"):
            other.recall.search("harbour", limit=2, cursor=cursor)


class Clock:
    """A deterministic wall clock for a second store."""

    def __init__(self) -> None:
        self.current = datetime(2026, 8, 4, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.current += timedelta(seconds=1)
        return self.current


def test_every_single_character_edit_of_a_cursor_is_refused(corpus: morphz.Context) -> None:
    """Tamper evidence, strictly: a token that differs from the one issued is refused (also
    edits that base64 decoding would ignore: the unused low bits of a part's last character,
    or '+' and '/' written for '-' and '_')."""
    cursor = corpus.recall.search("harbour", limit=2).next_cursor
    assert cursor is not None
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/="
    accepted = []
    for index, char in enumerate(cursor):
        for other in alphabet:
            if other == char:
                continue
            token = cursor[:index] + other + cursor[index + 1 :]
            try:
                corpus.recall.search("harbour", limit=2, cursor=token)
            except CursorError:
                continue
            accepted.append((index, char, other))
    assert accepted == []


# ------------------------------------------------------------------ stable paging


def _append_noise(ctx: morphz.Context, word: str) -> None:
    """Many new events between two pages, a good part of them matching ``word`` strongly and
    dated inside any range a test uses (past-dated ones too)."""
    for i in range(40):
        text = f"{word} {word} {word} fresh {i}" if i % 2 else f"other fresh {i}"
        timed(ctx, text, f"2023-05-0{1 + i % 5}T00:00:0{i % 10}Z")
    ctx.observe_batch(
        [morphz.Observation("tool_result", f"{word} batch {i}") for i in range(10)],
        session="batch",
    )
    ctx.record("model_reply", f"{word} in a reply")
    commit(ctx, f"(create new/{word}/{next(_numbers)} ({word} {word}))", reason=f"{word} news")
    lines = [json.dumps({"text": f"{word} imported {i}", "time": T}) for i in range(10)]
    ctx.import_history(io.StringIO("\n".join(lines)), session="imported")


def test_ranked_paging_is_stable_while_events_are_appended(corpus: morphz.Context) -> None:
    evidence = keys(corpus.recall.search("harbour", limit=100))
    first = corpus.recall.search("harbour", limit=2)
    _append_noise(corpus, "harbour")
    assert len(corpus.recall.search("harbour", limit=100).hits) > len(evidence) + 30
    pages = keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        page = corpus.recall.search("harbour", limit=2, cursor=cursor)
        pages.extend(keys(page))
        cursor = page.next_cursor
        _append_noise(corpus, "harbour")  # and more between every page
    assert len(pages) == len(set(pages))  # no duplicates
    assert set(pages) == set(evidence)  # no new events, nothing skipped


def test_chronological_paging_is_stable_while_events_are_appended(
    corpus: morphz.Context,
) -> None:
    since = "2023-01-01T00:00:00Z"
    evidence = keys(corpus.recall.search(since=since, limit=100))
    first = corpus.recall.search(since=since, limit=2)
    pages = keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        _append_noise(corpus, "harbour")
        page = corpus.recall.search(since=since, limit=2, cursor=cursor)
        pages.extend(keys(page))
        cursor = page.next_cursor
    assert pages == evidence  # same order, no new events, nothing skipped or repeated


def test_ranked_paging_with_a_time_range_is_stable(corpus: morphz.Context) -> None:
    params: dict[str, Any] = {"since": "2023-05-01T00:00:00Z", "until": "2023-05-06T00:00:00Z"}
    evidence = keys(corpus.recall.search("harbour crane", limit=100, **params))
    first = corpus.recall.search("harbour crane", limit=3, **params)
    pages = keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        _append_noise(corpus, "crane")
        page = corpus.recall.search("harbour crane", limit=3, cursor=cursor, **params)
        pages.extend(keys(page))
        cursor = page.next_cursor
    assert len(pages) == len(set(pages)) and set(pages) == set(evidence)


def test_ranked_paging_is_stable_when_a_word_becomes_common(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words in more than COMMON_DOCS documents are left out of a query while rarer ones remain.
    New events can push a word over that line between two pages; the pages must still walk the
    evidence set of the first page. (COMMON_DOCS is 10,000; scaled down to 3 here.)"""
    monkeypatch.setattr(search_module, "COMMON_DOCS", 3)
    evidence = {say(ctx, f"alpha doc {i}") for i in range(3)} | {say(ctx, "beta doc")}
    first = ctx.recall.search("alpha beta", limit=2)
    assert set(keys(ctx.recall.search("alpha beta", limit=100))) == evidence
    for i in range(5):
        say(ctx, f"alpha newer {i}")
    pages = keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        page = ctx.recall.search("alpha beta", limit=2, cursor=cursor)
        pages.extend(keys(page))
        cursor = page.next_cursor
    assert len(pages) == len(set(pages)) and set(pages) == evidence


def test_ranked_paging_keeps_frames_revised_between_pages(ctx: morphz.Context) -> None:
    """A frame of the first page's evidence set that is revised (or related) before a later page
    is still returned: the evidence set does not lose documents when the mind changes."""
    for i in range(4):
        say(ctx, f"gamma note {i}")
    commit(ctx, "(create f1 (gamma one))", "(create f2 (gamma two))", "(create f3 (gamma three))")
    evidence = set(keys(ctx.recall.search("gamma", limit=100)))
    assert {"frame:f1", "frame:f2", "frame:f3"} <= evidence
    first = ctx.recall.search("gamma", limit=2)
    commit(ctx, "(revise f1 (gamma revised))", "(revise f2 (gamma two revised))")
    commit(ctx, "(relate f3 follows f2)")
    pages = keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        page = ctx.recall.search("gamma", limit=2, cursor=cursor)
        pages.extend(keys(page))
        cursor = page.next_cursor
    assert len(pages) == len(set(pages)) and set(pages) == evidence


# ------------------------------------------------------------------ read


def test_read_by_short_ref_and_full_identity(ctx: morphz.Context) -> None:
    meta = {"speaker": "Mel"}
    ref = ctx.observe(
        "tool_result", "hello world", time="2023-05-08T13:56:00+08:00", meta=meta, session="w"
    ).ref
    page = ctx.recall.read(ref)
    assert page == ctx.recall.read(f"{ctx.id}:{ref}")
    assert (page.ref, page.identity, page.kind) == (ref, f"{ctx.id}:{ref}", "tool_result")
    assert (page.time, page.session, page.meta) == ("2023-05-08T13:56:00+08:00", "w", meta)
    assert (page.text, page.offset, page.total_chars, page.next_offset) == (
        "hello world",
        0,
        11,
        None,
    )
    assert page.to_dict()["identity"] == "context-default:@e1"
    team = ctx.db.context("team:alpha", create=True)  # context ids may hold ':'
    team.observe("user_message", "in the team context")
    assert team.recall.read("team:alpha:@e1").text == "in the team context"


@pytest.mark.parametrize("limit", [1, 7, 64, 1000])
def test_paged_read_reassembles_the_full_text(ctx: morphz.Context, limit: int) -> None:
    text = "".join(f"line {i}: 部署到上海 🚀 naïve café\n" for i in range(40))
    ref = say(ctx, text)
    parts: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = ctx.recall.read(ref, offset=offset, limit=limit)
        assert page.offset == offset and page.limit == limit
        assert page.total_chars == len(text)
        assert len(page.text) == min(limit, len(text) - offset)
        parts.append(page.text)
        offset = page.next_offset
    assert "".join(parts) == text
    assert len(parts) == -(-len(text) // limit)


def test_read_edges(ctx: morphz.Context) -> None:
    ref = say(ctx, "0123456789")
    end = ctx.recall.read(ref, offset=10)
    assert (end.text, end.next_offset, end.total_chars) == ("", None, 10)
    assert ctx.recall.read(ref, offset=4, limit=6).next_offset is None
    assert ctx.recall.read(ref, offset=4, limit=5).next_offset == 9
    empty = say(ctx, "")
    assert ctx.recall.read(empty).total_chars == 0
    with pytest.raises(InputError, match="past the end"):
        ctx.recall.read(ref, offset=11)
    for bad in (-1, "3", 1.5):
        with pytest.raises(InputError, match="offset"):
            ctx.recall.read(ref, offset=bad)  # type: ignore[arg-type]
    for bad in (0, -5, 100_001, "10"):
        with pytest.raises(InputError, match="limit"):
            ctx.recall.read(ref, limit=bad)  # type: ignore[arg-type]
    assert len(ctx.recall.read(ref, limit=100_000).text) == 10


def test_read_refuses_another_contexts_identity(ctx: morphz.Context) -> None:
    ctx.db.context("elsewhere", create=True).observe("user_message", "secret")
    say(ctx, "mine")
    with pytest.raises(InputError, match="belongs to context 'elsewhere'") as info:
        ctx.recall.read("elsewhere:@e1")
    assert not isinstance(info.value, RecordNotFoundError)
    with pytest.raises(InputError):
        ctx.db.context("elsewhere").recall.read(f"{ctx.id}:@e1")


@pytest.mark.parametrize("ref", ["e1", "@e0", "@e01", "@E1", "", "@e", "1", "@e1x", ":@e1"])
def test_read_refuses_malformed_refs(ctx: morphz.Context, ref: str) -> None:
    say(ctx, "something")
    with pytest.raises(InputError):
        ctx.recall.read(ref)


def test_read_of_an_unknown_ref(ctx: morphz.Context) -> None:
    say(ctx, "one")
    say(ctx, "two")
    for ref in ("@e3", "@e999", f"{ctx.id}:@e3"):
        with pytest.raises(RecordNotFoundError, match="latest is @e2"):
            ctx.recall.read(ref)


def test_read_of_events_without_observation_text(ctx: morphz.Context) -> None:
    receipt = commit(ctx, "(create plan (step one))", reason="plan it")
    page = ctx.recall.read(receipt.event)
    assert page.kind == ev.TX_COMMITTED
    assert page.text == ctx.event(receipt.event).text
    assert page.text == '(context-tx (base-version 0) (reason "plan it") (create plan (step one)))'
    window = ctx.set_window(3)
    page = ctx.recall.read(window.ref)
    assert page.kind == ev.SETTINGS_CHANGED and json.loads(page.text) == {"window": 3}
    session = ctx.create_session("side")
    assert json.loads(ctx.recall.read(session.ref).text) == {"session": "side"}
    reply = ctx.record("model_reply", "a reply")
    assert ctx.recall.read(reply.ref).text == "a reply"


def test_read_of_a_retired_observation(ctx: morphz.Context) -> None:
    ref = say(ctx, "an old fact")
    commit(ctx, f"(retire {ref})")
    assert ctx.mind().observation(ref) is None
    assert ctx.recall.read(ref).text == "an old fact"


# ------------------------------------------------------------------ operator reads, deliver


def test_operator_reads_change_nothing(corpus: morphz.Context) -> None:
    before = snapshot(corpus)
    corpus.recall.search("harbour", limit=3)
    page = corpus.recall.search("harbour", limit=3)
    assert page.next_cursor is not None
    corpus.recall.search("harbour", limit=3, cursor=page.next_cursor)
    corpus.recall.search(since="2023-01-01T00:00:00Z", kinds=["observations"])
    corpus.recall.read("@e1", offset=2, limit=3)
    corpus.recall.frame("port/harbour", direction="both", include_events=True)
    for bad in (
        lambda: corpus.recall.search("harbour", limit=0),
        lambda: corpus.recall.search("harbour", cursor="x.y"),
        lambda: corpus.recall.read("@e999"),
        lambda: corpus.recall.frame("port/none"),
    ):
        with pytest.raises(morphz.MorphzError):
            bad()
    assert snapshot(corpus) == before


def test_deliver_appends_a_recall_result_observation(corpus: morphz.Context) -> None:
    status = corpus.status()
    evidence = corpus.recall.search("harbour", since="2023-01-01T00:00:00Z", limit=100)
    result, event = corpus.recall.deliver(
        "search", query="harbour", since=datetime(2023, 1, 1, tzinfo=UTC), limit=3
    )
    assert isinstance(result, SearchPage) and len(result.hits) == 3
    assert result.hits == evidence.hits[:3] and result.next_cursor is not None
    after = corpus.status()
    assert event.kind == "recall_result" and event.seq == status.last_seq + 1
    assert after.last_seq == status.last_seq + 1
    assert after.clock == status.clock  # a recall result does not tick the clock
    assert after.version == status.version
    assert event.session_id == "default"
    assert event.meta == {
        "recall": {
            "op": "search",
            "params": {"query": "harbour", "since": "2023-01-01 00:00:00+00:00", "limit": 3},
        }
    }
    assert json.loads(event.text or "") == json.loads(json.dumps(result.to_dict()))
    view = corpus.mind().observation(event.ref)
    assert view is not None and view.kind == "recall_result" and view.lifecycle == "active"
    # the copy is not a new document: a later search finds the same evidence
    assert corpus.recall.search("harbour", since="2023-01-01T00:00:00Z", limit=100) == evidence
    assert corpus.recall_index.inspect().current


def test_deliver_read_and_frame(corpus: morphz.Context) -> None:
    read_page, read_event = corpus.recall.deliver("read", ref="@e2", limit=5, session="agent")
    assert read_page == corpus.recall.read("@e2", limit=5)
    assert read_event.session_id == "agent" and read_event.kind == "recall_result"
    assert read_event.meta == {"recall": {"op": "read", "params": {"ref": "@e2", "limit": 5}}}
    walk, walk_event = corpus.recall.deliver("frame", frame_id="port/dock", direction="both")
    assert walk == corpus.recall.frame("port/dock", direction="both")
    assert json.loads(walk_event.text or "")["root"] == "port/dock"
    assert walk_event.meta["recall"]["op"] == "frame"  # type: ignore[index]
    clock = corpus.status().clock
    corpus.recall.deliver("search", query="crane")
    assert corpus.status().clock == clock


def test_a_refused_deliver_appends_nothing(corpus: morphz.Context) -> None:
    before = snapshot(corpus)
    with pytest.raises(InputError, match="unknown recall operation"):
        corpus.recall.deliver("forget", query="x")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        corpus.recall.deliver("search", query="harbour", limit=500)
    with pytest.raises(RecordNotFoundError):
        corpus.recall.deliver("read", ref="@e999")
    with pytest.raises(CursorError):
        corpus.recall.deliver("search", query="harbour", cursor="bad.cursor")
    assert snapshot(corpus) == before


@pytest.mark.parametrize("threshold", [1_000, 4_000, 16_000])
def test_a_delivered_read_shows_whole_in_the_inbox(ctx: morphz.Context, threshold: int) -> None:
    """Following a preview's marker with the recall tool's defaults must show the omitted
    middle: the delivered page is cut until its recall_result fits the preview threshold, and
    paging on from next_offset reads the whole text."""
    from morphz.encoding import View

    ctx.set_view(View(preview_threshold=threshold))
    large = "".join(f'line {i:05d} "quoted"\t\n' for i in range(2_000))  # escapes grow JSON
    ref = say(ctx, large, kind="tool_result")
    assert "(preview (total-chars" in ctx.encode().region("inbox")
    pages, offset = [], 0
    while offset is not None:
        page, event = ctx.recall.deliver("read", ref=ref, offset=offset)
        line = next(x for x in ctx.encode().region("inbox").splitlines() if f"{event.ref} " in x)
        assert "(preview " not in line, (threshold, page.limit)
        assert len(page.text) >= min(500, len(large) - offset)  # never a sliver
        pages.append(page.text)
        offset = page.next_offset
    assert "".join(pages) == large
