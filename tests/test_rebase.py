"""Concurrency rules (DESIGN §6): two writers on one base version."""

from __future__ import annotations

import pytest

import morphz


def _setup(ctx: morphz.Context) -> int:
    ctx.observe("user_message", "first")
    ctx.observe("tool_result", "second")
    ctx.commit(
        "(context-tx (base-version 0) (create a (x 1)) (create b (y 2)) (create c (z 3))"
        " (relate a depends-on b))"
    )
    return ctx.version


TWO_WRITERS_OK = [
    ("different frames", "(revise a (x 10))", "(revise b (y 20))"),
    ("new frames", "(create n1 (n 1))", "(create n2 (n 2))"),
    ("different edges", "(relate a depends-on c)", "(relate b depends-on c)"),
    ("edge and frame", "(unrelate a depends-on b)", "(revise c (z 30))"),
    ("lifecycle targets", "(retire @e1)", "(retire @e2)"),
    ("frame and observation", "(retire a)", "(protect @e1)"),
    ("checkpoints", "(checkpoint one)", "(checkpoint two)"),
    ("content vs lifecycle", "(revise a (x 10))", "(retire a)"),
]


@pytest.mark.parametrize(("name", "first", "second"), TWO_WRITERS_OK)
def test_independent_writers_both_commit(
    ctx: morphz.Context, name: str, first: str, second: str
) -> None:
    base = _setup(ctx)
    r1 = ctx.commit(f'(context-tx (base-version {base}) (reason "w1") {first})')
    r2 = ctx.commit(f'(context-tx (base-version {base}) (reason "w2") {second})')
    assert not r1.rebased
    assert r2.rebased, name
    assert (r2.base_version, r2.before_version, r2.after_version) == (base, base + 1, base + 2)
    assert ctx.audit().ok


TWO_WRITERS_CONFLICT = [
    ("same frame", "(revise a (x 10))", "(revise a (x 11))", ["content:a"]),
    ("source revised", "(revise b (y 20))", "(derive d (from b) (w 1))", ["content:b"]),
    ("same new id", "(create n (n 1))", "(create n (n 2))", ["content:n", "life:n"]),
    ("same edge", "(relate a supports c)", "(relate a supports c)", ["edge:a supports c"]),
    (
        "edge removed",
        "(unrelate a depends-on b)",
        "(unrelate a depends-on b)",
        ["edge:a depends-on b"],
    ),
    ("same target", "(retire @e1)", "(protect @e1)", ["life:@e1"]),
    ("retire vs revise", "(retire a)", "(revise a (x 10))", ["life:a"]),
    ("order", "(place c first)", "(place b first)", ["order"]),
    ("checkpoint name", "(checkpoint cp)", "(checkpoint cp)", ["checkpoint:cp"]),
]


@pytest.mark.parametrize(("name", "first", "second", "boundaries"), TWO_WRITERS_CONFLICT)
def test_overlapping_writers_conflict(
    ctx: morphz.Context, name: str, first: str, second: str, boundaries: list[str]
) -> None:
    base = _setup(ctx)
    ctx.commit(f'(context-tx (base-version {base}) (reason "w1") {first})')
    before = (ctx.status(), ctx.mind(all_observations=True), len(ctx.events()))
    with pytest.raises(morphz.ConflictError) as info:
        ctx.commit(f'(context-tx (base-version {base}) (reason "w2") {second})')
    assert info.value.code == "conflict"
    changed = info.value.boundaries
    for boundary in boundaries:
        assert boundary in changed, (name, changed)
    assert info.value.details["current_version"] == base + 1
    assert (ctx.status(), ctx.mind(all_observations=True), len(ctx.events())) == before
    # Re-reading and resubmitting on the current version works (or is refused on its merits).
    assert ctx.audit().ok


@pytest.mark.parametrize(
    "op",
    ["(rollback cp)", "(retire-session other)", "(restore-session other)"],
)
def test_exact_version_ops_are_never_rebased(ctx: morphz.Context, op: str) -> None:
    base = _setup(ctx)
    ctx.create_session("other")
    ctx.commit(f"(context-tx (base-version {base}) (checkpoint cp))")
    stale = ctx.version - 1
    ctx.commit(f"(context-tx (base-version {ctx.version}) (create unrelated (u 1)))")
    before = ctx.status()
    with pytest.raises(morphz.StaleVersionError) as info:
        ctx.commit(f'(context-tx (base-version {stale}) (reason "r") {op})')
    assert info.value.code == "stale-version"
    assert info.value.op == op[1:].split(maxsplit=1)[0]
    assert info.value.line == 1 and info.value.column is not None
    assert ctx.status() == before


def test_exact_version_ops_commit_on_the_current_version(ctx: morphz.Context) -> None:
    _setup(ctx)
    ctx.create_session("other")
    ctx.commit(f"(context-tx (base-version {ctx.version}) (checkpoint cp))")
    ctx.commit(f"(context-tx (base-version {ctx.version}) (revise a (x 99)))")
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "r") (retire-session other))')
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "undo") (rollback cp))')
    frame = ctx.mind().frame("a")
    assert frame is not None and frame.body == "(x 1)"
    assert dict(ctx.mind().sessions)["other"] == "retired"
    assert ctx.audit().ok


def test_nothing_rebases_across_a_rollback(ctx: morphz.Context) -> None:
    base = _setup(ctx)
    ctx.commit(f"(context-tx (base-version {base}) (checkpoint cp) (create later (l 1)))")
    stale = ctx.version  # (a rollback that changes nothing is refused: this one removes later)
    ctx.commit(f'(context-tx (base-version {stale}) (reason "undo") (rollback cp))')
    with pytest.raises(morphz.ConflictError) as info:
        ctx.commit(f"(context-tx (base-version {stale}) (create fresh (f 1)))")
    assert "mind (rolled back)" in info.value.boundaries


def test_base_version_from_the_future_is_refused(ctx: morphz.Context) -> None:
    base = _setup(ctx)
    with pytest.raises(morphz.ValidationError, match="ahead of the current mind version"):
        ctx.commit(f"(context-tx (base-version {base + 5}) (create x (x 1)))")


def test_runtime_finalization_is_a_boundary_change(ctx: morphz.Context) -> None:
    """A retirement finalized by the clock conflicts with a stale restore of that frame."""
    db_window = 1
    ctx.set_window(db_window)
    _setup(ctx)
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "done") (retire a))')
    stale = ctx.version
    ctx.observe("user_message", "tick")  # finalizes a: a runtime commit
    assert ctx.version == stale + 1
    with pytest.raises(morphz.ConflictError) as info:
        ctx.commit(f"(context-tx (base-version {stale}) (restore a))")
    assert "life:a" in info.value.boundaries
    ctx.commit(f"(context-tx (base-version {stale}) (revise b (y 5)))")  # unrelated: rebased
    assert ctx.audit().ok
