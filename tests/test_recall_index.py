"""The recall index as derived data: kept current in the same database transaction as every
change, inspected, and rebuilt from events and mind (equal to the live index, idempotent, safe to
interrupt and rerun) - issue 3; DESIGN §8."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz import Observation
from morphz.errors import MorphzError, TxError
from morphz.recall import api as recall_api


@pytest.fixture(autouse=True)
def _audit_after_each_test(ctx: morphz.Context) -> Iterator[None]:
    yield
    report = ctx.audit()
    assert report.ok, report.differences


def commit(ctx: morphz.Context, *ops: str, reason: str = "upkeep") -> morphz.Receipt:
    text = f'(context-tx (base-version {ctx.version}) (reason "{reason}") ' + " ".join(ops) + ")"
    return ctx.commit(text)


def found(ctx: morphz.Context, query: str) -> set[str]:
    hits = ctx.recall.search(query, limit=100).hits
    return {h.ref if h.ref is not None else f"frame:{h.frame_id}" for h in hits}


def current(ctx: morphz.Context) -> bool:
    report = ctx.recall_index.inspect()
    return report.current and report.indexed_through == report.last_event == ctx.status().last_seq


def state(ctx: morphz.Context) -> tuple[object, ...]:
    return (ctx.status(), ctx.mind(all_observations=True), ctx.events(), ctx.sessions())


# ------------------------------------------------------------------ kept current


def test_a_new_context_has_a_current_empty_index(ctx: morphz.Context) -> None:
    report = ctx.recall_index.inspect()
    assert report.current and report.last_event == 0 and report.event_documents == 0
    assert ctx.recall_index.documents() == []
    assert ctx.recall.search(since="2000-01-01T00:00:00Z").hits == ()
    assert ctx.recall.search("hello world").hits == ()
    data = report.to_dict()
    assert set(data) >= {"documents", "last_indexed_event", "current", "context"}


def test_every_change_is_indexed_in_its_own_transaction(ctx: morphz.Context) -> None:
    steps: list[tuple[Callable[[], object], str, str]] = [
        (lambda: ctx.observe("user_message", "walrus sighting"), "walrus", "@e1"),
        (
            lambda: ctx.observe_batch(
                [Observation("tool_result", "narwhal log"), Observation("external_event", "orca")]
            ),
            "narwhal orca",
            "@e3",
        ),
        (lambda: ctx.record("model_reply", "a manatee reply"), "manatee", "@e4"),
        (lambda: commit(ctx, "(create zoo/seal (pinniped))", reason="dugong"), "dugong", "@e5"),
        (lambda: ctx.observe("user_message", "x", time="2001-01-01T00:00:00Z"), "x", "@e6"),
    ]
    for step, query, ref in steps:
        step()
        assert current(ctx), query
        assert ref in found(ctx, query), query
    assert found(ctx, "pinniped") == {"frame:zoo/seal"}


def test_frame_changes_are_searchable_at_once(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "the walrus count")
    commit(ctx, f"(derive zoo/walrus (from {ev.ref}) (count 12 walruses))")
    assert current(ctx) and "frame:zoo/walrus" in found(ctx, "walruses")
    commit(ctx, "(revise zoo/walrus (census pending))")
    assert current(ctx)
    assert found(ctx, "census") == {"frame:zoo/walrus"}
    assert "frame:zoo/walrus" not in found(ctx, "12")
    commit(ctx, "(create zoo/keeper (keeper))", "(relate zoo/keeper feeds zoo/walrus)")
    assert current(ctx)
    # a relation is in its subject's document only (review 17c), which names the object: a
    # search for the object finds the frames relating to it
    assert found(ctx, "feeds") == {"frame:zoo/keeper"}
    assert {"frame:zoo/keeper", "frame:zoo/walrus"} <= found(ctx, "zoo/walrus")
    commit(ctx, "(unrelate zoo/keeper feeds zoo/walrus)")
    # the frames' documents lose the relation; the unrelate's own holds it (review 13)
    assert current(ctx) and found(ctx, "feeds") == {ctx.events()[-1].ref}
    commit(ctx, "(checkpoint cp)")
    commit(ctx, "(create zoo/tmp (temporary penguin))", "(relate zoo/tmp near zoo/walrus)")
    assert found(ctx, "penguin") == {"frame:zoo/tmp"}
    commit(ctx, "(rollback cp)")
    assert current(ctx)
    # the frame's document is gone; the rollback's own holds what it undid (decisions.md)
    rollback = ctx.events()[-1].ref
    assert found(ctx, "penguin") == {rollback} and found(ctx, "near") == {rollback}
    assert "frame:zoo/walrus" in found(ctx, "census")
    commit(ctx, "(retire zoo/walrus)")
    assert current(ctx)
    (hit,) = ctx.recall.search("census").hits
    assert hit.lifecycle == "retiring"  # read at query time: no reindex needed


def test_runtime_events_keep_the_index_current(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))")
    commit(ctx, "(retire a)")
    ctx.set_window(4)
    ctx.create_session("side")
    act = ctx.start_activation("side")
    ctx.finish_activation(act)
    for i in range(8):
        ctx.observe("user_message", f"tick {i}")  # the 8th finalizes the retirement
    assert ctx.mind().frame("a").lifecycle == "retired"  # type: ignore[union-attr]
    assert current(ctx)
    report = ctx.recall_index.inspect()
    assert report.documents == {
        "context_tx_committed": 2,
        "user_message": 8,
        "frame": 1,
    }
    assert report.event_documents == 10 and report.frame_documents == report.frames == 1


def test_a_refused_commit_leaves_the_index_unchanged(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "base")
    commit(ctx, "(create a (alpha))")
    before = (ctx.recall_index.inspect(), ctx.recall_index.documents(), state(ctx))
    for bad in (
        "(create a (again))",  # exists
        "(create b (beta)) (revise nope (x))",  # second op fails after the first applied
        "(create c (gamma)) (relate c r missing)",
        "(retire @e99)",
    ):
        with pytest.raises(TxError):
            commit(ctx, bad, reason="refused quokka")
    with pytest.raises(TxError):
        ctx.commit("(context-tx (base-version 0) (create d (delta)) (create d (d)))")
    with pytest.raises(MorphzError):
        ctx.commit("(context-tx (base-version")
    assert (ctx.recall_index.inspect(), ctx.recall_index.documents(), state(ctx)) == before
    assert found(ctx, "quokka beta gamma delta") == set()


def test_a_refused_observation_leaves_the_index_unchanged(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "base")
    before = (ctx.recall_index.documents(), state(ctx))
    with pytest.raises(MorphzError):
        ctx.observe_batch(
            [Observation("user_message", "fine"), Observation("user_message", "x", time="noon")]
        )
    with pytest.raises(MorphzError):
        ctx.import_history(io.StringIO('{"text": "fine"}\n{"text": 1}\n'))
    assert (ctx.recall_index.documents(), state(ctx)) == before


def test_index_is_per_context(ctx: morphz.Context) -> None:
    other = ctx.db.context("other", create=True)
    ctx.observe("user_message", "shared word")
    other.observe("user_message", "shared word again")
    other.observe("user_message", "shared word thrice")
    assert found(ctx, "shared") == {"@e1"}
    assert found(other, "shared") == {"@e1", "@e2"}
    assert ctx.recall_index.inspect().table != other.recall_index.inspect().table


# ------------------------------------------------------------------ rebuild


def varied_history(ctx: morphz.Context) -> None:
    """Observations in two sessions, replies, commits with reasons, frames revised, related,
    unrelated, retired (and finalized), a rollback, imported history, recall results."""
    ctx.observe("user_message", "please migrate the billing database", session="alpha")
    ctx.observe("tool_result", "pg_dump finished: 4.2 GB", session="alpha")
    ctx.observe("user_message", "and check the replica lag", session="beta")
    ctx.record("model_reply", "I will dump the database first", session="alpha")
    ctx.record("tool_call", "pg_dump", payload={"cmd": "pg_dump"}, session="alpha")
    ctx.observe("tool_result", "replica lag: 3s", session="beta")
    ctx.observe("user_message", "我们需要把服务部署到上海区域", session="beta")
    commit(ctx, "(derive db/plan (from @e1 @e2) (dump then load))", reason="plan the move")
    commit(ctx, "(create db/lag (lag 3s))", "(relate db/lag affects db/plan)")
    commit(ctx, "(checkpoint before-risky)")
    commit(ctx, "(revise db/plan (load into the new cluster))", reason="new cluster")
    commit(ctx, "(create db/risky (drop old tables))", "(relate db/risky follows db/plan)")
    commit(ctx, "(unrelate db/lag affects db/plan)")
    commit(ctx, "(rollback before-risky)", reason="too risky")
    commit(ctx, "(create db/old (the old approach))", "(relate db/plan supersedes db/old)")
    ctx.set_window(2)
    commit(ctx, "(retire db/old @e3)", reason="superseded")
    ctx.observe("recall_result", "a recalled copy of the plan", session="alpha")
    ctx.observe_batch(
        [Observation("user_message", f"status update {i}") for i in range(5)], session="alpha"
    )
    ctx.observe_batch(
        [Observation("tool_result", f"progress {i}") for i in range(4)], session="beta"
    )
    ctx.record("model_reply", "the restore is done", session="beta")
    lines = [
        {"text": "imported question about the cluster", "time": "2023-05-08T13:56:00+00:00"},
        {"kind": "tool_result", "text": "imported answer", "meta": {"k": 1}},
    ]
    ctx.import_history(io.StringIO("\n".join(json.dumps(x) for x in lines)), session="gamma")
    commit(ctx, "(create db/done (finished))", "(relate db/done closes db/plan)")
    commit(ctx, "(retire db/lag)")
    mind = ctx.mind()
    assert mind.frame("db/old").lifecycle == "retired"  # type: ignore[union-attr]
    assert mind.frame("db/lag").lifecycle == "retiring"  # type: ignore[union-attr]


QUERIES = ["database", "plan load cluster", "lag", "上海", "imported", "status update", "db"]


def searches(ctx: morphz.Context) -> list[object]:
    out: list[object] = [ctx.recall.search(q, limit=100).hits for q in QUERIES]
    out.append(ctx.recall.search(since="2000-01-01T00:00:00Z", limit=100).hits)
    return out


def test_rebuild_equals_the_live_index(ctx: morphz.Context) -> None:
    varied_history(ctx)
    live = ctx.recall_index.documents()
    live_report = ctx.recall_index.inspect()
    assert live_report.current
    kinds = {k.split(":")[0] if k.startswith("frame:") else "event" for k, _, _ in live}
    assert kinds == {"event", "frame"}
    before = state(ctx)
    report = ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live
    assert report == live_report == ctx.recall_index.inspect()
    assert state(ctx) == before  # events and mind untouched


def test_searches_are_the_same_after_a_rebuild(ctx: morphz.Context) -> None:
    varied_history(ctx)
    before = searches(ctx)
    ctx.recall_index.rebuild()
    assert searches(ctx) == before


def test_tied_frames_keep_their_order_through_a_rebuild(ctx: morphz.Context) -> None:
    """Frames with the same score: the rebuilt index ranks them as the live one did."""
    commit(ctx, "(create zzz (same words here))")
    commit(ctx, "(create aaa (same words here))")
    commit(ctx, "(create mmm (same words here))")
    before = ctx.recall.search("same words").hits
    assert len({h.score for h in before}) == 1
    ctx.recall_index.rebuild()
    assert ctx.recall.search("same words").hits == before


def test_rebuild_is_idempotent(ctx: morphz.Context) -> None:
    varied_history(ctx)
    first = ctx.recall_index.rebuild()
    docs = ctx.recall_index.documents()
    second = ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == docs and first == second
    ctx.observe("user_message", "after two rebuilds: capybara")
    assert current(ctx) and found(ctx, "capybara") == {f"@e{ctx.status().last_seq}"}


def test_rebuild_of_an_empty_context(ctx: morphz.Context) -> None:
    calls: list[tuple[int, int]] = []
    report = ctx.recall_index.rebuild(progress=lambda done, total: calls.append((done, total)))
    assert report.current and report.event_documents == 0 and calls == [(0, 0)]
    ctx.observe("user_message", "first words")
    assert current(ctx) and found(ctx, "words") == {"@e1"}


def test_rebuild_reports_progress(ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_api, "REBUILD_BATCH", 4)
    varied_history(ctx)
    total = ctx.status().last_seq
    calls: list[tuple[int, int]] = []
    live = ctx.recall_index.documents()
    ctx.recall_index.rebuild(progress=lambda done, total: calls.append((done, total)))
    assert ctx.recall_index.documents() == live
    assert len(calls) >= total // 4
    assert all(t == total for _, t in calls) and calls[-1] == (total, total)
    done = [d for d, _ in calls]
    assert done == sorted(done)


class Interrupt(Exception):
    pass


def test_an_interrupted_rebuild_leaves_the_live_index_working(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recall_api, "REBUILD_BATCH", 3)
    varied_history(ctx)
    live = ctx.recall_index.documents()
    report = ctx.recall_index.inspect()
    results = searches(ctx)
    before = state(ctx)

    def stop(done: int, total: int) -> None:
        raise Interrupt

    with pytest.raises(Interrupt):
        ctx.recall_index.rebuild(progress=stop)
    assert state(ctx) == before
    assert ctx.recall_index.documents() == live
    assert ctx.recall_index.inspect() == report and current(ctx)
    assert searches(ctx) == results
    # writes go on being indexed while a half-built table lies around
    ctx.observe("user_message", "written after the interruption: axolotl", session="alpha")
    commit(ctx, "(create zoo/axolotl (amphibian))", reason="axolotl noted")
    assert current(ctx) and len(found(ctx, "axolotl")) == 3
    live = ctx.recall_index.documents()
    # and a rerun succeeds
    assert ctx.recall_index.rebuild().current
    assert ctx.recall_index.documents() == live


def building_tables(folder: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(folder / "morphz.db")) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE name GLOB '*_rebuild_*'")
        return [name for (name,) in rows]


def test_an_interrupted_rebuild_after_several_batches(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(recall_api, "REBUILD_BATCH", 2)
    varied_history(ctx)
    live = ctx.recall_index.documents()
    calls = 0

    def stop_at_the_fourth(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ctx.recall_index.rebuild(progress=stop_at_the_fourth)
    assert ctx.recall_index.documents() == live and current(ctx)
    assert building_tables(tmp_path) == []  # what it built is dropped
    with pytest.raises(Interrupt):  # interrupted again, even earlier
        ctx.recall_index.rebuild(progress=lambda d, t: (_ for _ in ()).throw(Interrupt()))
    ctx.recall_index.rebuild()
    ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live and current(ctx)
    assert building_tables(tmp_path) == []


def test_writes_during_a_rebuild_are_in_the_rebuilt_index(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch is its own short write transaction: writers go on in between, and the swapped-in
    index holds their events and frames too."""
    monkeypatch.setattr(recall_api, "REBUILD_BATCH", 5)
    varied_history(ctx)
    expected: list[Any] = []
    count = 0

    def write_meanwhile(done: int, total: int) -> None:
        nonlocal count
        count += 1
        if done < total:
            ctx.observe("user_message", f"meanwhile {count}", session=f"m{count % 2}")
            ctx.record("model_reply", f"reply meanwhile {count}", session="m0")
            commit(ctx, f"(create during/{count} (made while rebuilding))", reason="meanwhile")
            if count == 2:
                commit(ctx, "(revise db/plan (revised while rebuilding))")
            expected[:] = ctx.recall_index.documents()  # the live index, current

    ctx.recall_index.rebuild(progress=write_meanwhile)
    assert count > 2
    assert ctx.recall_index.documents() == expected
    assert current(ctx)
    assert "frame:db/plan" in found(ctx, "revised rebuilding")


def test_paging_across_a_rebuild_returns_each_result_once(ctx: morphz.Context) -> None:
    """A cursor taken before a rebuild continues after it without repeating or skipping."""
    commit(ctx, "(create zeta (kiwi one))", "(create alpha (kiwi two))", "(create mid (kiwi 3))")
    commit(ctx, "(revise zeta (kiwi kiwi kiwi))")
    for i in range(3):
        ctx.observe("user_message", f"kiwi note {i}", session=f"s{i}")
    evidence = found(ctx, "kiwi")
    for query, params in (("kiwi", {}), (None, {"since": "2000-01-01T00:00:00Z"})):
        first = ctx.recall.search(query, limit=1, **params)
        pages = [first.hits[0]]
        ctx.recall_index.rebuild()
        cursor = first.next_cursor
        while cursor is not None:
            page = ctx.recall.search(query, limit=1, cursor=cursor, **params)
            pages.extend(page.hits)
            cursor = page.next_cursor
        got = [h.ref if h.ref is not None else f"frame:{h.frame_id}" for h in pages]
        assert len(got) == len(set(got)), query
        if query is not None:
            assert set(got) == evidence


def test_words_ending_in_a_digit_are_their_own_stems() -> None:
    import snowballstemmer

    from morphz.recall.tokenize import _STEMS, stem

    porter2 = snowballstemmer.stemmer("english")
    words = ["e42", "v2", "ipv6", "runs2", "studies9", "y1", "deployments3", "x", "a1b2", "é5"]
    for word in words:
        assert stem(word) == porter2.stemWord(word) == word
    before = len(_STEMS)
    for n in range(1_000):
        stem(f"e{n}")
    assert len(_STEMS) == before  # refs do not fill the cache
