"""Edges of the transaction, mind and store layers found in a review of 2026-11-30 (each failed
against the code as it was)."""

from __future__ import annotations

import pytest

import morphz


def _tx(ctx: morphz.Context, ops: str, base: int | None = None) -> morphz.Receipt:
    version = ctx.version if base is None else base
    return ctx.commit(f'(context-tx (base-version {version}) (reason "r") {ops})')


def test_supersede_fast_path_reads_successor_sources_without_a_boundary(
    ctx: morphz.Context,
) -> None:
    """The fast path decides on the successor's sources (content:new), but a tx that only
    relates an existing successor does not declare that boundary: a stale tx is rebased over a
    revise of the successor and gets a different outcome than on its base version."""
    ctx.observe("user_message", "evidence")
    ctx.commit("(context-tx (base-version 0) (create old (o 1)) (create new (n 1)))")
    base = ctx.version
    # On `base`, `new` does not cite `old`: retire + relate would start the organizing window.
    _tx(ctx, "(revise new (from old) (n 2))")  # another writer: content:new changes
    try:
        receipt = _tx(ctx, "(retire old) (relate new supersedes old)", base=base)
    except morphz.ConflictError as exc:  # the expected outcome: content:new changed
        assert "content:new" in exc.boundaries
        return
    old = ctx.mind().frame("old")
    assert old is not None
    pytest.fail(
        f"stale tx rebased (rebased={receipt.rebased}) across a change of content:new that "
        f"decided its outcome: old is now {old.lifecycle!r} (on its base it would be retiring)"
    )


def test_the_fast_path_fires_from_the_operation_that_completes_the_three(
    ctx: morphz.Context,
) -> None:
    """The rule every recorded history was applied with (the audit replays by it): once the
    successor cites OLD, the edge is declared and OLD is retired, OLD is retired at once, and a
    later operation of the same tx that drops the citation does not undo it (decisions.md)."""
    ctx.observe("user_message", "evidence")
    ctx.commit("(context-tx (base-version 0) (create old (o 1)))")
    _tx(
        ctx,
        "(derive new (from old) (n 1)) (retire old) (relate new supersedes old)"
        " (revise new (from @e1) (n 2))",
    )
    old = ctx.mind().frame("old")
    assert old is not None and old.lifecycle == "retired"
    assert ctx.audit().ok


def test_context_create_true_races_with_another_opener(
    open_db: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``db.context(id, create=True)`` checks ``context_ids()`` and creates in two steps outside
    one write transaction: when another process (or thread) creates the context in between, the
    caller gets ContextExistsError instead of the context. (Two threads racing for real hit it in
    about 7% of 200 trials; here the interleaving is made deterministic.)"""
    first = open_db()  # type: ignore[operator]
    second = open_db()  # type: ignore[operator]
    listed = second.store.context_ids

    def other_process_wins_the_race() -> list[str]:
        ids = listed()
        first.context("shared", create=True)  # the other opener creates it right now
        return ids

    monkeypatch.setattr(second.store, "context_ids", other_process_wins_the_race)
    ctx = second.context("shared", create=True)  # raises ContextExistsError today
    assert ctx.id == "shared"
