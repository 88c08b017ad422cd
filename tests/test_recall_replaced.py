"""A body a revise replaced stays findable: the commit records it (payload ``replaced``) and
its recall document holds it beside the reason (docs/decisions.md, "What a revise replaced
stays findable")."""

from __future__ import annotations

import morphz
from test_recall import commit, keys


def _revised(ctx: morphz.Context) -> tuple[str, str]:
    """A frame created with a narwhal and revised to a walrus: the two commits' refs."""
    commit(ctx, '(create plan/route (fact "narwhal crossing at the northern fjord"))')
    created = ctx.events()[-1].ref
    commit(ctx, '(revise plan/route (fact "walrus crossing at the southern bay"))')
    return created, ctx.events()[-1].ref


def test_the_words_of_a_replaced_body_find_the_commit_that_replaced_it(
    ctx: morphz.Context,
) -> None:
    _, revised = _revised(ctx)
    assert keys(ctx.recall.search("walrus")) == ["frame:plan/route"]
    page = ctx.recall.search("narwhal fjord")
    assert keys(page) == [revised]  # the frame's own document holds its new body only
    assert "replaced: plan/route" in page.hits[0].preview, page.hits[0].preview
    payload = ctx.event(revised).payload
    assert payload["replaced"] == {"plan/route": '(fact "narwhal crossing at the northern fjord")'}


def test_only_a_changed_body_is_recorded(ctx: morphz.Context) -> None:
    """Creating, relating or retiring a frame replaces no body: those commits record none."""
    created, _ = _revised(ctx)
    commit(ctx, '(create plan/other (fact "a second frame"))')
    commit(ctx, "(relate plan/other supports plan/route)")
    commit(ctx, "(retire plan/other)")
    recorded = [
        event.payload["replaced"]
        for event in ctx.events()
        if event.kind == "context_tx_committed" and "replaced" in event.payload
    ]  # the revise's only
    assert recorded == [{"plan/route": '(fact "narwhal crossing at the northern fjord")'}]
    assert "replaced" not in ctx.event(created).payload


def test_a_rollback_to_an_older_revision_records_the_body_it_replaced(
    ctx: morphz.Context,
) -> None:
    commit(ctx, '(create plan/route (fact "narwhal crossing"))')
    commit(ctx, "(checkpoint before)")
    commit(ctx, '(revise plan/route (fact "walrus crossing"))')
    commit(ctx, "(rollback before)")
    rollback = ctx.events()[-1]
    assert rollback.payload["replaced"] == {"plan/route": '(fact "walrus crossing")'}
    assert ctx.recall.search("walrus").hits[0].ref in {rollback.ref, ctx.events()[-2].ref}


def test_a_rebuilt_index_and_the_audit_agree(ctx: morphz.Context) -> None:
    _, revised = _revised(ctx)
    before = keys(ctx.recall.search("narwhal"))
    ctx.recall_index.rebuild()
    assert keys(ctx.recall.search("narwhal")) == before == [revised]
    assert ctx.audit().ok
