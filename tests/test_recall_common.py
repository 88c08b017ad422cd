"""Recall searches whose words are all common (issue 3): the match is every word in the
document's own text, and with a time window FTS5 is given the rowid range of the window's events
(a bound only: imported histories need not have times that grow with seq).

COMMON_DOCS is 10,000; the tests scale it down to 3, so any word in more than 3 documents is
common."""

from __future__ import annotations

import io
import itertools
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import morphz
from morphz.recall import search as search_module
from morphz.recall.search import Hit, SearchPage
from morphz.recall.tokenize import query_terms
from morphz.store import sqlite_recall

QUERY = "amber basalt"
WORDS = set(query_terms(QUERY))
_sessions = itertools.count(1)


@pytest.fixture(autouse=True)
def common(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "COMMON_DOCS", 3)


def say(ctx: morphz.Context, text: str, session: str | None = None, **kw: Any) -> str:
    """Append an observation, in a session of its own unless ``session`` is given; its ref."""
    return ctx.observe("user_message", text, session=session or f"s{next(_sessions)}", **kw).ref


def commit(ctx: morphz.Context, *ops: str) -> None:
    header = f'(base-version {ctx.version}) (reason "routine upkeep")'
    ctx.commit(f"(context-tx {header} " + " ".join(ops) + ")")


def key(hit: Hit) -> str:
    return hit.ref if hit.ref is not None else f"frame:{hit.frame_id}"


def keys(page: SearchPage) -> list[str]:
    return [key(h) for h in page.hits]


def walk(ctx: morphz.Context, query: str | None, **kw: Any) -> Iterator[SearchPage]:
    page = ctx.recall.search(query, **kw)
    yield page
    while page.next_cursor is not None:
        page = ctx.recall.search(query, cursor=page.next_cursor, **kw)
        yield page


def everything(ctx: morphz.Context, query: str | None, **kw: Any) -> list[str]:
    return [k for page in walk(ctx, query, limit=100, **kw) for k in keys(page)]


def scored(ctx: morphz.Context, query: str, **kw: Any) -> list[tuple[str, float | None]]:
    return [(key(h), h.score) for h in ctx.recall.search(query, limit=100, **kw).hits]


def has_all(text: str) -> bool:
    return set(query_terms(text)) >= WORDS


# ------------------------------------------------------------------ what matches


def test_all_common_words_must_be_in_the_documents_own_text(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = say(ctx, "amber basalt outcrop")
    twice = say(ctx, "basalt amber basalt ridge")
    say(ctx, "amber pebble", session="pair")
    near_amber = say(ctx, "basalt pebble", session="pair")  # amber only in the previous one
    say(ctx, "basalt cobble", session="pair2")
    near_basalt = say(ctx, "amber cobble", session="pair2")
    for i in range(3):
        say(ctx, f"amber filler {i}")
        say(ctx, f"basalt filler {i}")
    commit(ctx, "(create rock/x (amber and basalt))", "(create rock/y (amber only))")
    page = ctx.recall.search(QUERY, limit=100)
    assert set(keys(page)) == {both, twice, "frame:rock/x"}
    assert page.terms == ("amber", "basalt")
    assert page.order == "relevance" and page.next_cursor is None
    # while a word is rare the words are OR-ed, and the previous observation matches too
    monkeypatch.setattr(search_module, "COMMON_DOCS", 10_000)
    assert {near_amber, near_basalt, both, twice} <= set(keys(ctx.recall.search(QUERY, limit=100)))


def test_the_previous_observation_does_not_add_to_the_score(ctx: morphz.Context) -> None:
    """Two identical texts whose previous observations are as long, one holding a query word:
    with every word common they score alike, and the tie goes to the newer one."""
    say(ctx, "basalt gravel", session="n1")
    boosted = say(ctx, "amber basalt quartz", session="n1")
    say(ctx, "slate gravel", session="n2")
    plain = say(ctx, "amber basalt quartz", session="n2")
    for i in range(3):
        say(ctx, f"amber basalt filler words {i}")
    hits = [h for h in ctx.recall.search(QUERY, limit=100).hits if h.ref in (boosted, plain)]
    assert [h.ref for h in hits] == [plain, boosted]
    assert hits[0].score == hits[1].score


def test_all_common_cjk_prefix_terms_are_a_valid_expression(ctx: morphz.Context) -> None:
    """Lone CJK characters are prefix terms (``"部"*``) inside the column filter."""
    inside = [say(ctx, f"部署在杭州 {i}") for i in range(4)]
    for i in range(4):
        say(ctx, f"杭州 only {i}")
    say(ctx, "部署 first", session="cjk")
    say(ctx, "杭州 next", session="cjk")  # 部 only in the previous observation
    assert set(keys(ctx.recall.search("部 杭", limit=100))) == set(inside)


# ------------------------------------------------------------------ time windows


def _records(rng: random.Random) -> list[dict[str, str]]:
    """48 observations over two days whose times do not follow their order in the file."""
    slots = list(range(48))
    rng.shuffle(slots)
    texts = ["amber basalt {}", "amber {}", "basalt {}", "basalt tuff amber {}", "tuff {}"]
    start = datetime(2023, 5, 1, tzinfo=UTC)
    return [
        {
            "text": texts[i % len(texts)].format(i),
            "time": (start + timedelta(hours=slot)).isoformat(),
        }
        for i, slot in enumerate(slots)
    ]


@pytest.fixture
def shuffled(ctx: morphz.Context) -> dict[str, str]:
    """An imported history with non-monotone times (one session: each line's previous line is
    its ``near`` text), a few past-dated observations appended after it, and frames (dated by
    the store's clock, in 2026). Returns every document's text by key."""
    records = _records(random.Random(7))
    report = ctx.import_history(io.StringIO("\n".join(json.dumps(r) for r in records)))
    assert report.first_ref is not None
    first = int(report.first_ref[2:])
    texts = {f"@e{first + i}": r["text"] for i, r in enumerate(records)}
    for i, hour in enumerate((5, 30, 47)):
        when = (datetime(2023, 5, 1, 0, 30, tzinfo=UTC) + timedelta(hours=hour)).isoformat()
        text = f"late amber basalt {i}"
        texts[say(ctx, text, session="late", time=when)] = text
    commit(ctx, "(create rock/x (amber and basalt))", "(create rock/y (amber only))")
    commit(ctx, "(create rock/z (basalt amber tuff))")
    texts |= {"frame:rock/x": "amber and basalt", "frame:rock/y": "amber only"}
    texts["frame:rock/z"] = "basalt amber tuff"
    for k in everything(ctx, None, since="2000-01-01T00:00:00Z"):
        texts.setdefault(k, "routine upkeep")  # the commits: their reason is indexed
    return texts


def _bounds(ctx: morphz.Context) -> list[str]:
    """Window boundaries: every document time, and one microsecond after some of them."""
    times = sorted(
        {h.time for h in ctx.recall.search(since="2000-01-01T00:00:00Z", limit=100).hits if h.time}
    )
    assert len(times) > 40
    out = set(times[::3])
    out |= {
        (datetime.fromisoformat(t) + timedelta(microseconds=1)).isoformat() for t in times[1::5]
    }
    return sorted(out, key=datetime.fromisoformat)


def _windows(bounds: list[str]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = [{"since": b} for b in bounds] + [{"until": b} for b in bounds]
    for i, since in enumerate(bounds):
        out += [{"since": since, "until": until} for until in bounds[i + 1 :]]
    return out


def test_a_window_returns_exactly_its_documents_when_times_are_not_in_seq_order(
    ctx: morphz.Context, shuffled: dict[str, str]
) -> None:
    windows = _windows(_bounds(ctx))
    assert len(windows) > 100
    nonempty = 0
    for window in windows:
        inside = set(everything(ctx, None, **window))  # the chronological listing
        expected = {k for k in inside if has_all(shuffled[k])}
        got = everything(ctx, QUERY, **window)
        assert len(got) == len(set(got)) and set(got) == expected, window
        nonempty += bool(expected)
    assert nonempty > len(windows) // 2


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"kinds": ["observations"]},
        {"kinds": ["frames"]},
        {"kinds": ["user_message", "frames"]},
        {"lifecycle": ["active"]},
        {"lifecycle": ["retired"]},
        {"lifecycle": ["retiring"]},
    ],
)
def test_the_rowid_range_changes_no_result_or_score(
    ctx: morphz.Context,
    shuffled: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    filters: dict[str, Any],
) -> None:
    """The same searches with the window turned into a rowid range and without (the window
    scan capped at 0 events), filters and all: the same documents, order and scores."""
    retire = sorted(k for k in shuffled if k.startswith("@e") and has_all(shuffled[k]))[::2]
    commit(ctx, f"(retire {' '.join(retire)} rock/z)")
    calls = 0
    original = sqlite_recall.SqliteRecall._window_seqs

    def counted(self: sqlite_recall.SqliteRecall, *args: Any) -> tuple[int, int] | None:
        nonlocal calls
        calls += 1
        return original(self, *args)

    monkeypatch.setattr(sqlite_recall.SqliteRecall, "_window_seqs", counted)
    windows = _windows(_bounds(ctx))[::4]
    with_range = [scored(ctx, QUERY, **w, **filters) for w in windows]
    assert any(with_range)
    assert calls == (len(windows) if filters.get("kinds") != ["frames"] else 0)
    monkeypatch.setattr(sqlite_recall, "WINDOW_SCAN_CAP", 0)
    assert [scored(ctx, QUERY, **w, **filters) for w in windows] == with_range


def test_a_rare_word_is_not_searched_by_rowid_range(
    ctx: morphz.Context, shuffled: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window scan pays only for broad matches: a query with a rare word skips it."""
    say(ctx, "obsidian amber", time="2023-05-01T12:00:00Z")

    def refuse(*args: Any) -> None:
        raise AssertionError("the window was scanned")

    monkeypatch.setattr(sqlite_recall.SqliteRecall, "_window_seqs", refuse)
    page = ctx.recall.search("obsidian basalt", since="2023-05-01T00:00:00Z")
    assert [h.preview for h in page.hits] == ["obsidian amber"]


def test_a_window_without_events_returns_nothing(
    ctx: morphz.Context, shuffled: dict[str, str]
) -> None:
    window = {"since": "2024-01-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"}
    assert everything(ctx, None, **window) == []
    assert everything(ctx, QUERY, **window) == []
    assert everything(ctx, QUERY, kinds=["observations"], **window) == []
    assert set(everything(ctx, QUERY, since="2026-01-01T00:00:00Z")) == {
        "frame:rock/x",
        "frame:rock/z",
    }


# ------------------------------------------------------------------ paging


def test_paging_a_window_keeps_the_first_pages_evidence_set(
    ctx: morphz.Context, shuffled: dict[str, str]
) -> None:
    """Pages of a windowed all-common search, with events dated inside the window (past-dated,
    so their seqs are above the window's) and new or revised frames arriving between pages:
    every document of the first page's evidence set once, nothing else."""
    window = {"since": "2023-05-01T06:00:00Z", "until": "2026-12-31T00:00:00Z"}
    evidence = set(everything(ctx, QUERY, **window))
    assert len(evidence) > 10 and {"frame:rock/x", "frame:rock/z"} <= evidence
    pages: list[str] = []
    for n, page in enumerate(walk(ctx, QUERY, limit=3, **window)):
        pages.extend(keys(page))
        say(ctx, f"amber basalt newcomer {n}", time="2023-05-01T20:00:00Z")
        say(ctx, f"amber basalt basalt amber {n}", session="late", time="2023-05-02T01:00:00Z")
        commit(ctx, f"(create rock/new{n} (amber basalt {n}))")
        commit(ctx, f"(revise rock/y (amber only, revised {n}))")
    assert len(pages) == len(set(pages)) and set(pages) == evidence
    assert len(everything(ctx, QUERY, **window)) > len(evidence) + 10
