"""Frame traversal (``ctx.recall.frame``): from a frame through source and relation links, in
both directions, depth-limited, with bodies and source events on request, paged by a node budget
with a cursor pinned to the mind version (issue 3; DESIGN §8)."""

from __future__ import annotations

from typing import Any

import pytest

import morphz
from morphz.errors import CursorError, InputError, RecordNotFoundError
from morphz.recall.traverse import Link, TraversalPage


def commit(ctx: morphz.Context, *ops: str, reason: str = "test") -> morphz.Receipt:
    text = f'(context-tx (base-version {ctx.version}) (reason "{reason}") ' + " ".join(ops) + ")"
    return ctx.commit(text)


def ids(page: TraversalPage) -> list[str]:
    return [n.id for n in page.nodes]


def links(page: TraversalPage) -> set[tuple[str, str, str]]:
    return {(link.source, link.label, link.target) for link in page.links}


def walk_all(ctx: morphz.Context, frame_id: str, **kw: Any) -> tuple[list[str], set[Any]]:
    """Every node and link of a traversal, page by page."""
    nodes: list[str] = []
    seen_links: set[Any] = set()
    cursor = None
    for _ in range(1000):
        page = ctx.recall.frame(frame_id, cursor=cursor, **kw)
        nodes.extend(ids(page))
        seen_links |= links(page)
        cursor = page.next_cursor
        if cursor is None:
            return nodes, seen_links
    raise AssertionError("paging did not end")


@pytest.fixture
def seed(ctx: morphz.Context) -> morphz.Context:
    """The seed document's second example: target-v2 derived from @e42 and target-v1, which it
    supersedes; then a check that cites target-v2 and a note about target-v1."""
    for i in range(41):
        ctx.observe("tool_result", f"build log {i}: ok")
    assert ctx.observe("tool_result", "production.yaml: region: cn-shanghai").ref == "@e42"
    commit(ctx, "(create deployment/target-v1 (fact (region cn-hangzhou)))")
    ctx.commit(
        f"""(context-tx
  (base-version {ctx.version})
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from @e42 deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""
    )
    commit(ctx, "(derive deployment/check (from deployment/target-v2) (verified))")
    commit(ctx, "(create notes/hangzhou (x))", "(relate notes/hangzhou about deployment/target-v1)")
    return ctx


V2, V1 = "deployment/target-v2", "deployment/target-v1"
CHECK, NOTE = "deployment/check", "notes/hangzhou"


def test_ancestors_follow_sources_and_outgoing_relations(seed: morphz.Context) -> None:
    page = seed.recall.frame(V2, direction="ancestors", depth=1, include_events=True)
    assert ids(page) == [V2, "@e42", V1]
    assert (page.root, page.direction, page.depth) == (V2, "ancestors", 1)
    assert page.version == seed.version and page.next_cursor is None
    assert links(page) == {
        (V2, "source", "@e42"),
        (V2, "source", V1),
        (V2, "supersedes", V1),
    }
    root, event, old = page.nodes
    assert (root.type, root.depth, root.via) == ("frame", 0, None)
    assert root.details["lifecycle"] == "active"
    assert root.details["sources"] == ["@e42", V1]
    assert (event.type, event.depth, event.via) == ("event", 1, Link(V2, "@e42", "source"))
    assert event.details["kind"] == "tool_result"
    assert event.details["lifecycle"] == "retired"  # retired, still reachable
    assert event.details["preview"] == "production.yaml: region: cn-shanghai"
    assert (old.type, old.depth, old.via) == ("frame", 1, Link(V2, V1, "source"))
    assert old.details["lifecycle"] == "retired"


def test_ancestors_without_events_skip_event_sources(seed: morphz.Context) -> None:
    page = seed.recall.frame(V2, direction="ancestors")
    assert ids(page) == [V2, V1]
    assert links(page) == {(V2, "source", V1), (V2, "supersedes", V1)}
    assert seed.recall.frame(V1, direction="ancestors").nodes[0].id == V1
    assert ids(seed.recall.frame(V1, direction="ancestors", depth=4)) == [V1]


def test_descendants_follow_citations_and_incoming_relations(seed: morphz.Context) -> None:
    page = seed.recall.frame(V1, direction="descendants", depth=1)
    assert ids(page) == [V1, V2, NOTE]
    assert links(page) == {
        (V2, "source", V1),
        (V2, "supersedes", V1),
        (NOTE, "about", V1),
    }
    deeper = seed.recall.frame(V1, direction="descendants", depth=2)
    assert ids(deeper) == [V1, V2, NOTE, CHECK]
    assert deeper.nodes[3].depth == 2 and deeper.nodes[3].via == Link(CHECK, V2, "source")
    # a frame nobody cites has no descendants
    assert ids(seed.recall.frame(CHECK, direction="descendants", depth=4)) == [CHECK]


def test_both_directions(seed: morphz.Context) -> None:
    page = seed.recall.frame(V2, direction="both", depth=1, include_events=True)
    assert ids(page) == [V2, "@e42", V1, CHECK]
    two = seed.recall.frame(V2, direction="both", depth=2, include_events=True)
    assert ids(two) == [V2, "@e42", V1, CHECK, NOTE]
    assert links(two) == {
        (V2, "source", "@e42"),
        (V2, "source", V1),
        (V2, "supersedes", V1),
        (CHECK, "source", V2),
        (NOTE, "about", V1),
    }
    # from the event-derived side: the other frames citing @e42 come back through it
    commit(seed, "(derive deployment/audit (from @e42) (seen))")
    three = seed.recall.frame(CHECK, direction="both", depth=3, include_events=True)
    assert ids(three) == [CHECK, V2, "@e42", V1, "deployment/audit", NOTE]


def test_include_bodies(seed: morphz.Context) -> None:
    plain = seed.recall.frame(V2, include_events=True)
    assert all("body" not in n.details for n in plain.nodes)
    full = seed.recall.frame(V2, include_events=True, include_bodies=True)
    bodies = {n.id: n.details.get("body") for n in full.nodes}
    assert bodies == {
        V2: "(fact (region cn-shanghai))",
        "@e42": None,  # events carry a preview, not a body
        V1: "(fact (region cn-hangzhou))",
    }
    data = full.to_dict()
    assert data["nodes"][0]["body"] == "(fact (region cn-shanghai))"
    assert data["links"][0] == {"from": V2, "to": "@e42", "label": "source"}


@pytest.fixture
def chain(ctx: morphz.Context) -> morphz.Context:
    """@e1 <- f1 <- f2 <- f3 <- f4 <- f5 <- f6 (each frame derived from the one before)."""
    ctx.observe("user_message", "the original request")
    commit(ctx, "(derive f1 (from @e1) (one))")
    for i in range(2, 7):
        commit(ctx, f"(derive f{i} (from f{i - 1}) (n {i}))")
    return ctx


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_depth_limit(chain: morphz.Context, depth: int) -> None:
    up = chain.recall.frame("f6", direction="ancestors", depth=depth)
    assert ids(up) == [f"f{6 - i}" for i in range(depth + 1)]
    assert [n.depth for n in up.nodes] == list(range(depth + 1))
    down = chain.recall.frame("f1", direction="descendants", depth=depth)
    assert ids(down) == [f"f{1 + i}" for i in range(depth + 1)]
    with_events = chain.recall.frame("f3", direction="ancestors", depth=depth, include_events=True)
    assert ids(with_events) == ["f3", "f2", "f1", "@e1"][: depth + 1]


@pytest.mark.parametrize("depth", [0, 5, -1, 100, "2", 2.0, True])
def test_depth_outside_1_to_4_is_refused(chain: morphz.Context, depth: Any) -> None:
    with pytest.raises(InputError, match="depth must be a whole number from 1 to 4, not"):
        chain.recall.frame("f3", depth=depth)


def test_bad_arguments(chain: morphz.Context) -> None:
    with pytest.raises(InputError, match="direction"):
        chain.recall.frame("f3", direction="sideways")  # type: ignore[arg-type]
    for budget in (0, 501, -3):
        with pytest.raises(InputError, match="budget"):
            chain.recall.frame("f3", budget=budget)
    for missing in ("f9", "@e999", "not a frame id", ""):
        with pytest.raises(RecordNotFoundError):
            chain.recall.frame(missing)
    with pytest.raises(InputError, match="no ancestors"):  # an event is a root walked down
        chain.recall.frame("@e1", direction="ancestors")


def test_relation_cycles_end(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))", "(create c (z))")
    commit(ctx, "(relate a next b)", "(relate b next c)", "(relate c next a)")
    commit(ctx, "(derive d (from a b) (w))", "(relate a depends-on d)")
    page = ctx.recall.frame("a", direction="both", depth=4)
    assert ids(page) == ["a", "d", "b", "c"]
    assert links(page) == {
        ("a", "next", "b"),
        ("b", "next", "c"),
        ("c", "next", "a"),
        ("a", "depends-on", "d"),
        ("d", "source", "a"),
        ("d", "source", "b"),
    }
    assert ids(ctx.recall.frame("a", direction="ancestors", depth=4)) == ["a", "d", "b", "c"]


def test_traversal_is_deterministic(seed: morphz.Context) -> None:
    for direction in ("ancestors", "descendants", "both"):
        first = seed.recall.frame(V2, direction=direction, depth=3, include_events=True)  # type: ignore[arg-type]
        again = seed.recall.frame(V2, direction=direction, depth=3, include_events=True)  # type: ignore[arg-type]
        assert first == again


@pytest.fixture
def wide(ctx: morphz.Context) -> morphz.Context:
    """A hub frame derived from 12 observations and cited by 12 frames, two of which are cited
    in turn."""
    for i in range(12):
        ctx.observe("tool_result", f"evidence {i}")
    sources = " ".join(f"@e{i + 1}" for i in range(12))
    commit(ctx, f"(derive hub (from {sources}) (hub))")
    commit(ctx, *(f"(derive leaf/{i:02d} (from hub) (leaf {i}))" for i in range(12)))
    commit(ctx, "(derive twig/a (from leaf/00 leaf/03) (t))", "(derive twig/b (from leaf/05) (t))")
    return ctx


@pytest.mark.parametrize("budget", [1, 2, 5, 7, 26, 27, 500])
def test_node_budget_pages_cover_the_traversal_once(wide: morphz.Context, budget: int) -> None:
    params: dict[str, Any] = {"direction": "both", "depth": 2, "include_events": True}
    whole = wide.recall.frame("hub", budget=500, **params)
    assert len(whole.nodes) == 1 + 12 + 12 + 2 and whole.next_cursor is None
    first = wide.recall.frame("hub", budget=budget, **params)
    assert len(first.nodes) == min(budget, 27)
    assert (first.next_cursor is None) == (budget >= 27)
    nodes, seen_links = walk_all(wide, "hub", budget=budget, **params)
    assert nodes == ids(whole)
    assert seen_links == links(whole)


def test_page_links_touch_the_pages_nodes(wide: morphz.Context) -> None:
    page = wide.recall.frame("hub", direction="descendants", depth=2, budget=3)
    shown = set(ids(page))
    assert ids(page) == ["hub", "leaf/00", "leaf/01"]
    assert page.links and all(link.source in shown or link.target in shown for link in page.links)


def test_the_cursor_is_pinned_to_the_mind_version(wide: morphz.Context) -> None:
    first = wide.recall.frame("hub", direction="descendants", depth=2, budget=4)
    cursor = first.next_cursor
    assert cursor is not None
    # events that leave the mind version as it is do not matter
    wide.record("model_reply", "thinking")
    wide.observe("recall_result", "a recall copy")
    second = wide.recall.frame("hub", direction="descendants", depth=2, budget=4, cursor=cursor)
    assert ids(second) == [f"leaf/{i:02d}" for i in range(3, 7)]
    assert second.version == first.version
    commit(wide, "(create unrelated (u))")
    with pytest.raises(CursorError, match="mind changed") as info:
        wide.recall.frame("hub", direction="descendants", depth=2, budget=4, cursor=cursor)
    assert "without the cursor" in info.value.message
    assert second.next_cursor is not None
    with pytest.raises(CursorError, match="mind changed"):
        wide.recall.frame(
            "hub", direction="descendants", depth=2, budget=4, cursor=second.next_cursor
        )
    # starting again works
    assert len(wide.recall.frame("hub", direction="descendants", depth=2, budget=4).nodes) == 4


def test_a_runtime_commit_also_changes_the_mind_version(wide: morphz.Context) -> None:
    commit(wide, "(retire leaf/11)")
    wide.set_window(1)
    commit(wide, "(retire leaf/10)")
    cursor = wide.recall.frame("hub", direction="descendants", budget=2).next_cursor
    assert cursor is not None
    version = wide.version
    wide.observe("user_message", "tick")  # the window of leaf/10 ends: retirements finalized
    assert wide.version == version + 1
    with pytest.raises(CursorError, match="mind changed"):
        wide.recall.frame("hub", direction="descendants", budget=2, cursor=cursor)


def test_a_cursor_only_continues_its_own_traversal(wide: morphz.Context) -> None:
    params: dict[str, Any] = {"direction": "descendants", "depth": 2, "budget": 3}
    cursor = wide.recall.frame("hub", **params).next_cursor
    assert cursor is not None
    assert wide.recall.frame("hub", **{**params, "budget": 9}, cursor=cursor).nodes  # budget free
    for other in (
        {"frame_id": "leaf/00"},
        {"direction": "both"},
        {"depth": 3},
        {"include_events": True},
        {"include_bodies": True},
    ):
        call = {"frame_id": "hub", **params, **other}
        with pytest.raises(CursorError, match="different query"):
            wide.recall.frame(**call, cursor=cursor)
    search_cursor = wide.recall.search("evidence", limit=2).next_cursor
    assert search_cursor is not None
    with pytest.raises(CursorError):
        wide.recall.frame("hub", **params, cursor=search_cursor)
    with pytest.raises(CursorError):
        wide.recall.search("evidence", limit=2, cursor=cursor)
    body, mac = cursor.split(".")
    for token in (cursor[:-2], body, f"{body[:-3]}xyz.{mac}", "junk"):
        with pytest.raises(CursorError):
            wide.recall.frame("hub", **params, cursor=token)


def test_retired_frames_can_be_traversed(seed: morphz.Context) -> None:
    page = seed.recall.frame(V1, direction="both", include_bodies=True)
    assert page.nodes[0].details == {
        "lifecycle": "retired",
        "revision": 1,
        "protected": False,
        "sources": [],
        "body": "(fact (region cn-hangzhou))",
    }


def test_frames_removed_by_a_rollback_are_gone(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint cp)", "(derive b (from a) (y))")
    assert ids(ctx.recall.frame("a", direction="descendants")) == ["a", "b"]
    commit(ctx, "(rollback cp)")
    assert ids(ctx.recall.frame("a", direction="descendants")) == ["a"]
    with pytest.raises(RecordNotFoundError):
        ctx.recall.frame("b")


def test_traversal_changes_nothing(seed: morphz.Context) -> None:
    before = (seed.status(), seed.events(), seed.mind(all_observations=True))
    walk_all(seed, V2, direction="both", depth=4, include_events=True, budget=1)
    assert (seed.status(), seed.events(), seed.mind(all_observations=True)) == before
