"""Every context-tx operation through the Python API on a real store (DESIGN §5-§7): its success
case and each refusal with its error code. Every refusal is checked to leave the store exactly
as it was (status, mind, observations, event log), and every test ends with a passing audit."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import morphz
from morphz import (
    ConflictError,
    NotFoundError,
    ProtectedError,
    Receipt,
    StaleVersionError,
    TxError,
    ValidationError,
)
from morphz.results import FrameView

# ------------------------------------------------------------------ helpers


@pytest.fixture(autouse=True)
def _audit_after_each_test(ctx: morphz.Context) -> Iterator[None]:
    yield
    report = ctx.audit()
    assert report.ok, report.differences


def tx_text(ctx: morphz.Context, ops: tuple[str, ...], reason: str | None, base: int | None) -> str:
    version = ctx.version if base is None else base
    header = f"(base-version {version})" + ("" if reason is None else f' (reason "{reason}")')
    return f"(context-tx {header}\n  " + "\n  ".join(ops) + ")"


def commit(
    ctx: morphz.Context,
    *ops: str,
    reason: str | None = "test",
    base: int | None = None,
    session: str = "default",
) -> Receipt:
    return ctx.commit(tx_text(ctx, ops, reason, base), session=session)


def state(ctx: morphz.Context) -> tuple[object, ...]:
    """Everything a refused commit must leave untouched."""
    return (ctx.status(), ctx.mind(all_observations=True), ctx.events(), ctx.sessions())


def refused(
    ctx: morphz.Context,
    error: type[TxError],
    *ops: str,
    reason: str | None = "test",
    base: int | None = None,
    session: str = "default",
    op_index: int | None = None,
) -> TxError:
    """Commit ``ops`` expecting ``error``; assert the store is unchanged; return the error."""
    before = state(ctx)
    with pytest.raises(error) as info:
        commit(ctx, *ops, reason=reason, base=base, session=session)
    err = info.value
    assert type(err) is error, err
    assert state(ctx) == before
    if op_index is not None:
        assert err.op_index == op_index
        assert err.op == ops[op_index][1:].split(maxsplit=1)[0]
        assert err.line == 2 + op_index and err.column == 3  # positions in tx_text's layout
    return err


def frame(ctx: morphz.Context, fid: str) -> FrameView:
    found = ctx.mind().frame(fid)
    assert found is not None, f"no frame {fid}"
    return found


def tick(ctx: morphz.Context, n: int = 1) -> None:
    """Advance the cognitive clock by ``n`` (one user message each)."""
    for i in range(n):
        ctx.observe("user_message", f"tick {i}")


def obs_life(ctx: morphz.Context, ref: str) -> tuple[str, bool]:
    found = ctx.mind(all_observations=True).observation(ref)
    assert found is not None
    return found.lifecycle, found.protected


def retired_frame(ctx: morphz.Context, fid: str) -> None:
    """Create ``fid`` and let it retire through its whole organizing window."""
    commit(ctx, f"(create {fid} (old))")
    commit(ctx, f"(retire {fid})")
    tick(ctx, 8)
    assert frame(ctx, fid).lifecycle == "retired"


# ------------------------------------------------------------------ create


def test_create_and_receipt(ctx: morphz.Context) -> None:
    before = ctx.status()
    receipt = commit(ctx, '(create plan (step one) "free text")', reason=None)
    assert receipt.tx_id == "tx-1"
    assert receipt.seq == before.last_seq + 1 and receipt.event == f"@e{receipt.seq}"
    assert (receipt.base_version, receipt.before_version, receipt.after_version) == (0, 0, 1)
    assert receipt.rebased is False and receipt.session == "default"
    (effect,) = receipt.effects
    assert (effect.index, effect.op, effect.target, effect.change) == (
        0,
        "create",
        "plan",
        "created",
    )
    assert effect.immediate < 0 and effect.eventual == 0  # a new frame costs tokens
    assert receipt.head == ctx.status().head
    event = ctx.event(receipt.event)
    assert event.kind == "context_tx_committed"
    assert event.text == '(context-tx (base-version 0) (create plan (step one) "free text"))'
    plan = frame(ctx, "plan")
    assert (plan.body, plan.revision, plan.lifecycle, plan.sources, plan.protected) == (
        '(step one) "free text"',
        1,
        "active",
        (),
        False,
    )
    assert plan.remaining_ticks is None
    assert ctx.version == 1 and ctx.status().frames["active"] == 1


def test_create_appends_to_the_order(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (x))")
    commit(ctx, "(create c (x))")
    assert ctx.mind().order == ["a", "b", "c"]


def test_create_refuses_an_existing_id(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    err = refused(ctx, ValidationError, "(create plan (y))", op_index=0)
    assert "already exists" in err.message
    refused(ctx, ValidationError, "(create other (x))", "(create other (y))", op_index=1)


def test_create_refuses_a_retired_id(ctx: morphz.Context) -> None:
    retired_frame(ctx, "old")
    err = refused(ctx, ValidationError, "(create old (new))", op_index=0)
    assert "retired" in err.message


def test_create_refuses_a_retiring_id(ctx: morphz.Context) -> None:
    commit(ctx, "(create old (x))")
    commit(ctx, "(retire old)")
    refused(ctx, ValidationError, "(create old (new))", op_index=0)


# ------------------------------------------------------------------ derive


def test_derive_cites_frames_and_observations(ctx: morphz.Context) -> None:
    ev = ctx.observe("tool_result", "region: cn-hangzhou")
    commit(ctx, "(create deployment/old (fact (region cn-beijing)))")
    receipt = commit(
        ctx, f"(derive deployment/current (from {ev.ref} deployment/old) (fact (region x)))"
    )
    cur = frame(ctx, "deployment/current")
    assert cur.sources == (ev.ref, "deployment/old")
    assert cur.body == "(fact (region x))" and cur.revision == 1 and cur.lifecycle == "active"
    assert receipt.effects[0].op == "derive" and receipt.effects[0].immediate < 0
    assert ctx.mind().order == ["deployment/old", "deployment/current"]


def test_derive_may_cite_retired_frames_and_observations(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    retired_frame(ctx, "old")
    commit(ctx, f"(retire {ev.ref})")
    commit(ctx, f"(derive new (from old {ev.ref}) (x))")
    assert frame(ctx, "new").sources == ("old", ev.ref)


def test_derive_may_cite_a_frame_created_earlier_in_the_same_tx(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(derive b (from a) (y))")
    assert frame(ctx, "b").sources == ("a",)


def test_derive_refuses_a_missing_source_frame(ctx: morphz.Context) -> None:
    err = refused(ctx, NotFoundError, "(create a (x))", "(derive b (from a nope) (y))", op_index=1)
    assert "nope" in err.message and err.details["target"] == "nope"


def test_derive_refuses_a_missing_event_ref(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    err = refused(ctx, NotFoundError, "(derive b (from @e999) (y))", op_index=0)
    assert "@e999" in err.message


def test_derive_refuses_an_event_that_is_not_an_observation(ctx: morphz.Context) -> None:
    receipt = commit(ctx, "(create a (x))")
    err = refused(ctx, ValidationError, f"(derive b (from {receipt.event}) (y))", op_index=0)
    assert "not an observation" in err.message
    ctx.create_session("s2")
    session_event = ctx.events()[-1]
    assert session_event.kind == "session_created"
    refused(ctx, ValidationError, f"(derive b (from a {session_event.ref}) (y))", op_index=0)


def test_derive_refuses_an_existing_id(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create a (x))")
    refused(ctx, ValidationError, f"(derive a (from {ev.ref}) (y))", op_index=0)


# ------------------------------------------------------------------ revise


def test_revise_bumps_revision_replaces_body_and_keeps_sources(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create base (x))", f"(derive plan (from {ev.ref} base) (step one) (keep me))")
    receipt = commit(ctx, "(revise plan (step two))", reason=None)
    plan = frame(ctx, "plan")
    assert plan.revision == 2 and plan.body == "(step two)"  # the whole body is replaced
    assert plan.sources == (ev.ref, "base")
    assert receipt.effects[0].change == "revision 2"
    commit(ctx, "(revise plan (step three))")
    assert frame(ctx, "plan").revision == 3


def test_revise_with_from_replaces_sources(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create base (x))", "(derive plan (from base) (v1))")
    commit(ctx, f"(revise plan (from {ev.ref}) (v2))")
    plan = frame(ctx, "plan")
    assert plan.sources == (ev.ref,) and plan.body == "(v2)" and plan.revision == 2


def test_revise_cancels_a_pending_retirement(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (v1))")
    commit(ctx, "(retire plan)")
    assert frame(ctx, "plan").lifecycle == "retiring"
    receipt = commit(ctx, "(revise plan (v2))")
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.remaining_ticks, plan.revision) == ("active", None, 2)
    assert "now active" in receipt.effects[0].change
    tick(ctx, 10)
    assert frame(ctx, "plan").lifecycle == "active"  # the window no longer applies


def test_revise_revives_a_retired_frame(ctx: morphz.Context) -> None:
    retired_frame(ctx, "plan")
    receipt = commit(ctx, "(revise plan (v2))")
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.body, plan.revision) == ("active", "(v2)", 2)
    assert receipt.effects[0].immediate < 0  # it enters the encoding again


def test_revise_refuses_a_missing_frame(ctx: morphz.Context) -> None:
    refused(ctx, NotFoundError, "(revise nope (x))", op_index=0)


def test_revise_refuses_missing_sources(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    refused(ctx, NotFoundError, "(revise plan (from nope) (y))", op_index=0)
    refused(ctx, NotFoundError, "(revise plan (from @e77) (y))", op_index=0)
    receipt = commit(ctx, "(create other (x))")
    refused(ctx, ValidationError, f"(revise plan (from {receipt.event}) (y))", op_index=0)


# ------------------------------------------------------------------ retire


def test_retire_an_observation_is_immediate(ctx: morphz.Context) -> None:
    ev = ctx.observe("tool_result", "x" * 400)
    assert ctx.mind().observation(ev.ref) is not None
    receipt = commit(ctx, f"(retire {ev.ref})", reason="done with it")
    (effect,) = receipt.effects
    assert (effect.op, effect.target, effect.change) == ("retire", ev.ref, "retired")
    assert effect.immediate > 0 and effect.eventual == 0  # relief now
    assert receipt.tokens_immediate == effect.immediate and receipt.tokens_eventual == 0
    assert receipt.to_dict()["tokens"] == {"immediate": effect.immediate, "eventual": 0}
    assert ctx.mind().observation(ev.ref) is None  # out of the active state
    assert obs_life(ctx, ev.ref) == ("retired", False)
    assert ctx.event(ev.ref).text == "x" * 400  # history keeps it
    assert ctx.status().observations["retired"] == 1


def test_retire_a_frame_enters_the_organizing_window(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    receipt = commit(ctx, "(retire plan)", reason="not needed")
    (effect,) = receipt.effects
    # its retiring marks enter now; it and its marks leave when the window ends
    assert effect.immediate < 0 < effect.eventual and effect.immediate + effect.eventual > 0
    assert "8 ticks" in effect.change
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.remaining_ticks, plan.reason) == ("retiring", 8, "not needed")
    ctx.observe("recall_result", "does not tick")
    assert frame(ctx, "plan").remaining_ticks == 8
    tick(ctx, 7)
    assert frame(ctx, "plan").remaining_ticks == 1
    tick(ctx)
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.remaining_ticks) == ("retired", None)
    assert plan.body == "(x)"  # still in the mind, with its content


def test_retire_a_retiring_frame_keeps_its_window(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    commit(ctx, "(retire plan)")
    tick(ctx, 3)
    receipt = commit(ctx, "(retire plan)")
    assert frame(ctx, "plan").remaining_ticks == 5
    assert "keeps its window" in receipt.effects[0].change
    tick(ctx, 5)
    assert frame(ctx, "plan").lifecycle == "retired"


@pytest.mark.parametrize("window", [0, 1, 3])
def test_retire_uses_the_contexts_window(ctx: morphz.Context, window: int) -> None:
    ctx.set_window(window)
    commit(ctx, "(create plan (x))")
    receipt = commit(ctx, "(retire plan)")
    (effect,) = receipt.effects
    plan = frame(ctx, "plan")
    if window == 0:
        assert (plan.lifecycle, plan.remaining_ticks) == ("retired", None)
        assert effect.immediate > 0 and effect.eventual == 0
        return
    assert (plan.lifecycle, plan.remaining_ticks) == ("retiring", window)
    tick(ctx, window)
    assert frame(ctx, "plan").lifecycle == "retired"


def test_retire_several_targets_at_once(ctx: morphz.Context) -> None:
    e1 = ctx.observe("user_message", "one")
    commit(ctx, "(create a (x))", "(create b (y))")
    receipt = commit(ctx, f"(retire a {e1.ref} b)")
    assert [e.target for e in receipt.effects] == ["a", e1.ref, "b"]
    assert [frame(ctx, f).lifecycle for f in ("a", "b")] == ["retiring", "retiring"]
    assert obs_life(ctx, e1.ref) == ("retired", False)


def test_retire_refuses_protected_targets(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "keep")
    commit(ctx, "(create plan (x))", f"(protect plan {ev.ref})")
    err = refused(ctx, ProtectedError, "(retire plan)", op_index=0)
    assert err.code == "protected" and "unprotect" in err.message
    refused(ctx, ProtectedError, f"(retire {ev.ref})", op_index=0)
    commit(ctx, "(create other (x))")
    refused(ctx, ProtectedError, "(retire other)", "(retire plan)", op_index=1)


def test_retire_refuses_already_retired_targets(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, f"(retire {ev.ref})")
    refused(ctx, ValidationError, f"(retire {ev.ref})", op_index=0)
    retired_frame(ctx, "old")
    err = refused(ctx, ValidationError, "(retire old)", op_index=0)
    assert "already retired" in err.message


def test_retire_refuses_missing_targets_and_non_observations(ctx: morphz.Context) -> None:
    refused(ctx, NotFoundError, "(retire nope)", op_index=0)
    refused(ctx, NotFoundError, "(retire @e50)", op_index=0)
    receipt = commit(ctx, "(create a (x))")
    refused(ctx, ValidationError, f"(retire {receipt.event})", op_index=0)


def test_retire_without_reason_is_refused(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))")
    err = refused(ctx, ValidationError, "(create b (y))", "(retire a)", reason=None, op_index=1)
    assert "requires a reason" in err.message


# ------------------------------------------------------------------ restore


def test_restore_a_retiring_frame_cancels_the_window(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    commit(ctx, "(retire plan)")
    receipt = commit(ctx, "(restore plan)", reason=None)
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.remaining_ticks, plan.reason, plan.revision) == (
        "active",
        None,
        None,
        1,
    )
    # the relief is cancelled, and the retiring marks leave the mind region now
    assert receipt.effects[0].eventual < 0 < receipt.effects[0].immediate
    tick(ctx, 9)
    assert frame(ctx, "plan").lifecycle == "active"


def test_restore_a_retired_frame_and_observation(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    retired_frame(ctx, "plan")
    commit(ctx, f"(retire {ev.ref})")
    receipt = commit(ctx, f"(restore plan {ev.ref})")
    assert frame(ctx, "plan").lifecycle == "active"
    assert obs_life(ctx, ev.ref) == ("active", False)
    assert all(e.immediate < 0 for e in receipt.effects)  # both re-enter the encoding


def test_restore_refusals(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create plan (x))")
    err = refused(ctx, ValidationError, "(restore plan)", op_index=0)
    assert "already active" in err.message
    refused(ctx, ValidationError, f"(restore {ev.ref})", op_index=0)
    refused(ctx, NotFoundError, "(restore nope)", op_index=0)
    refused(ctx, NotFoundError, "(restore @e99)", op_index=0)


# ------------------------------------------------------------------ protect / unprotect


def test_protect_and_unprotect(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create plan (x))")
    commit(ctx, f"(protect plan {ev.ref})", reason=None)
    assert frame(ctx, "plan").protected is True
    assert obs_life(ctx, ev.ref) == ("active", True)
    commit(ctx, f"(unprotect plan {ev.ref})", reason="free it")
    assert frame(ctx, "plan").protected is False
    assert obs_life(ctx, ev.ref) == ("active", False)
    commit(ctx, f"(retire plan {ev.ref})")  # retirable again
    assert frame(ctx, "plan").lifecycle == "retiring"


def test_protect_cancels_a_pending_retirement(ctx: morphz.Context) -> None:
    commit(ctx, "(create plan (x))")
    commit(ctx, "(retire plan)")
    receipt = commit(ctx, "(protect plan)")
    plan = frame(ctx, "plan")
    assert (plan.lifecycle, plan.remaining_ticks, plan.protected) == ("active", None, True)
    assert "retirement cancelled" in receipt.effects[0].change
    assert receipt.effects[0].eventual < 0
    tick(ctx, 9)
    assert frame(ctx, "plan").lifecycle == "active"


def test_protect_refusals(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    retired_frame(ctx, "old")
    err = refused(ctx, ValidationError, "(protect old)", op_index=0)
    assert "restore it first" in err.message
    commit(ctx, "(create plan (x))", "(protect plan)")
    refused(ctx, ValidationError, "(protect plan)", op_index=0)
    commit(ctx, f"(retire {ev.ref})")
    refused(ctx, ValidationError, f"(protect {ev.ref})", op_index=0)
    refused(ctx, NotFoundError, "(protect nope)", op_index=0)


def test_unprotect_refusals(ctx: morphz.Context) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create plan (x))")
    err = refused(ctx, ValidationError, "(unprotect plan)", op_index=0)
    assert "not protected" in err.message
    refused(ctx, ValidationError, f"(unprotect {ev.ref})", op_index=0)
    refused(ctx, NotFoundError, "(unprotect nope)", op_index=0)
    commit(ctx, "(protect plan)")
    refused(ctx, ValidationError, "(unprotect plan)", reason=None, op_index=0)


# ------------------------------------------------------------------ relate / unrelate


def test_relate_and_unrelate(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))")
    receipt = commit(ctx, "(relate a depends-on b)", "(relate b blocks a)", reason=None)
    assert [e.change for e in receipt.effects] == ["related", "related"]
    assert ctx.mind().relations == (("a", "depends-on", "b"), ("b", "blocks", "a"))
    commit(ctx, "(unrelate a depends-on b)", reason="no longer")
    assert ctx.mind().relations == (("b", "blocks", "a"),)


def test_relate_then_unrelate_in_one_tx(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))")
    commit(ctx, "(relate a r b)", "(unrelate a r b)", "(relate a r b)")
    assert ctx.mind().relations == (("a", "r", "b"),)


def test_relate_may_link_retired_frames(ctx: morphz.Context) -> None:
    retired_frame(ctx, "old")
    commit(ctx, "(create new (x))", "(relate new replaces old)")
    assert ("new", "replaces", "old") in ctx.mind().relations


def test_relate_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))", "(relate a r b)")
    err = refused(ctx, ValidationError, "(relate a r b)", op_index=0)
    assert "already exists" in err.message
    refused(ctx, ValidationError, "(relate a s b)", "(relate a s b)", op_index=1)
    refused(ctx, NotFoundError, "(relate a r nope)", op_index=0)
    refused(ctx, NotFoundError, "(relate nope r a)", op_index=0)
    refused(ctx, ValidationError, "(relate a r a)", op_index=0)  # self-relation


def test_unrelate_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))", "(relate a r b)")
    refused(ctx, NotFoundError, "(unrelate a other b)", op_index=0)
    refused(ctx, NotFoundError, "(unrelate b r a)", op_index=0)  # edges are directed
    refused(ctx, NotFoundError, "(unrelate a r b)", "(unrelate a r b)", op_index=1)
    refused(ctx, ValidationError, "(unrelate a r b)", reason=None, op_index=0)


# ------------------------------------------------------------------ place


@pytest.mark.parametrize(
    ("op", "order"),
    [
        ("(place d first)", ["d", "a", "b", "c"]),
        ("(place a last)", ["b", "c", "d", "a"]),
        ("(place d (before b))", ["a", "d", "b", "c"]),
        ("(place d (before a))", ["d", "a", "b", "c"]),
        ("(place a (before d))", ["b", "c", "a", "d"]),
        ("(place a (after c))", ["b", "c", "a", "d"]),
        ("(place a (after d))", ["b", "c", "d", "a"]),
        ("(place d (after a))", ["a", "d", "b", "c"]),
    ],
)
def test_place(ctx: morphz.Context, op: str, order: list[str]) -> None:
    commit(ctx, *(f"(create {f} (x))" for f in "abcd"))
    receipt = commit(ctx, op, reason=None)
    assert ctx.mind().order == order
    assert receipt.effects[0].op == "place"
    commit(ctx, "(create e (x))")
    assert ctx.mind().order == [*order, "e"]  # creation still appends


@pytest.mark.parametrize("op", ["(place a first)", "(place d last)", "(place b (after a))"])
def test_a_place_that_moves_nothing_is_refused(ctx: morphz.Context, op: str) -> None:
    """Like every other no-op (review 17b): it would take a version and write `order`."""
    commit(ctx, *(f"(create {f} (x))" for f in "abcd"))
    refused(ctx, ValidationError, op, reason=None, op_index=0)
    assert ctx.mind().order == ["a", "b", "c", "d"]


def test_place_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))")
    refused(ctx, NotFoundError, "(place nope first)", op_index=0)
    refused(ctx, NotFoundError, "(place a (before nope))", op_index=0)
    refused(ctx, NotFoundError, "(place a (after nope))", op_index=0)
    refused(ctx, ValidationError, "(place a (after a))", op_index=0)


def test_place_orders_retiring_and_retired_frames_too(ctx: morphz.Context) -> None:
    retired_frame(ctx, "old")
    commit(ctx, "(create a (x))")
    commit(ctx, "(place old last)")
    assert ctx.mind().order == ["a", "old"]
    commit(ctx, "(place a (after old))")
    assert ctx.mind().order == ["old", "a"]


def test_repeated_places_between_the_same_neighbours(ctx: morphz.Context) -> None:
    """Halving the gap between two neighbours exhausts float keys; the order must stay right."""
    commit(ctx, *(f"(create {f} (x))" for f in ("a", "p", "q", "x", "z")))
    expected = ["a", "p", "q", "x", "z"]
    for i in range(80):
        mover = "p" if i % 2 == 0 else "q"
        commit(ctx, f"(place {mover} (before x))", reason=None)
        expected.remove(mover)
        expected.insert(expected.index("x"), mover)
        assert ctx.mind().order == expected, f"after {i + 1} places"
    for i in range(80):
        mover = "q" if i % 2 == 0 else "p"  # q is after x now: each place moves its frame
        commit(ctx, f"(place {mover} (after a))", reason=None)
        expected.remove(mover)
        expected.insert(expected.index("a") + 1, mover)
        assert ctx.mind().order == expected, f"after {i + 1} places after a"
    for i in range(80):
        commit(ctx, f"(place {'q' if i % 2 else 'p'} first)", reason=None)
    commit(ctx, "(create new (x))")
    assert ctx.mind().order[-1] == "new"


def test_many_places_in_one_tx(ctx: morphz.Context) -> None:
    commit(ctx, *(f"(create {f} (x))" for f in ("a", "p", "q", "x")))
    ops = [f"(place {'p' if i % 2 == 0 else 'q'} (before x))" for i in range(120)]
    commit(ctx, *ops)
    assert ctx.mind().order == ["a", "p", "q", "x"]


def test_random_places_match_a_list_model(ctx: morphz.Context) -> None:
    rng = random.Random(20260804)
    ids = [f"f{i}" for i in range(8)]
    commit(ctx, *(f"(create {f} (x))" for f in ids))
    model = list(ids)
    for _ in range(150):
        mover = rng.choice(ids)
        where = rng.choice(["first", "last", "before", "after"])
        moved = [f for f in model if f != mover]
        if where in ("first", "last"):
            op = f"(place {mover} {where})"
            moved.insert(0 if where == "first" else len(moved), mover)
        else:
            anchor = rng.choice([f for f in model if f != mover])
            op = f"(place {mover} ({where} {anchor}))"
            moved.insert(moved.index(anchor) + (where == "after"), mover)
        if moved == model:  # a place that moves nothing is refused (review 17b)
            refused(ctx, ValidationError, op, reason=None, op_index=0)
        else:
            commit(ctx, op, reason=None)
            model = moved
        assert ctx.mind().order == model


# ------------------------------------------------------------------ checkpoint / rollback


def _busy_mind(ctx: morphz.Context) -> None:
    """Frames in every lifecycle state, protection, relations and a custom order."""
    ev = ctx.observe("user_message", "evidence")
    commit(
        ctx,
        "(create keep (x))",
        "(create guard (g))",
        f"(derive judged (from {ev.ref} keep) (j))",
        "(create fading (f))",
        "(create gone (z))",
        "(relate judged depends-on keep)",
        "(relate fading blocks guard)",
        "(protect guard)",
        "(place judged first)",
        "(retire gone)",
    )
    tick(ctx, 8)
    commit(ctx, "(retire fading)")
    tick(ctx, 2)


def test_checkpoint_then_rollback_restores_the_mind_exactly(ctx: morphz.Context) -> None:
    _busy_mind(ctx)
    receipt = commit(ctx, "(checkpoint before-change)", reason=None)
    before = ctx.mind()
    assert ("before-change", receipt.after_version) in before.checkpoints
    assert {f.lifecycle for f in before.frames} == {"active", "retiring", "retired"}
    ev = ctx.observe("recall_result", "later")  # does not tick: remaining ticks stay equal
    commit(
        ctx,
        "(create extra (e))",
        f"(revise keep (from {ev.ref}) (x2))",
        "(unprotect guard)",
        "(retire guard)",
        "(restore fading gone)",
        "(protect judged)",
        "(unrelate judged depends-on keep)",
        "(relate extra refines keep)",
        "(place keep first)",
        "(place extra (before judged))",
    )
    changed = ctx.mind()
    assert changed.frames != before.frames and changed.relations != before.relations
    rollback = commit(ctx, "(rollback before-change)", reason="undo the experiment")
    assert rollback.after_version == ctx.version
    after = ctx.mind()
    assert after.order == before.order
    assert after.frames == before.frames  # bodies, sources, revisions, lifecycle, protection
    assert after.relations == before.relations
    assert after.frame("extra") is None
    assert ctx.event(ev.ref).text == "later"  # history keeps everything


def test_rollback_right_after_checkpoint_changes_nothing(ctx: morphz.Context) -> None:
    """It would change nothing, so it is refused like any no-op (review 20b): before, it
    committed, taking a version and raising the rollback barrier for nothing."""
    _busy_mind(ctx)
    commit(ctx, "(checkpoint cp)")
    before, version = ctx.mind(), ctx.version
    with pytest.raises(ValidationError, match="the mind is at checkpoint 'cp' already"):
        commit(ctx, "(rollback cp)")
    after = ctx.mind()
    assert ctx.version == version
    assert (after.frames, after.relations, after.checkpoints) == (
        before.frames,
        before.relations,
        before.checkpoints,
    )


def test_rollback_of_frames_created_after_the_checkpoint_removes_them(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint cp)", "(create b (y))", "(relate b r a)")
    assert ctx.mind().order == ["a", "b"]
    commit(ctx, "(rollback cp)")
    assert ctx.mind().order == ["a"] and ctx.mind().relations == ()
    commit(ctx, "(create b (again))")  # the id is free again
    assert frame(ctx, "b").revision == 1


def test_create_after_a_rollback_appends_last(ctx: morphz.Context) -> None:
    """Creation appends to the order (DESIGN §6), also after a rollback restored frames whose
    order keys are larger than those in use when the rollback was committed."""
    commit(ctx, *(f"(create f{i} (x))" for i in range(5)))
    commit(ctx, "(checkpoint small)")
    commit(ctx, *(f"(create g{i} (x))" for i in range(5)))
    commit(ctx, "(checkpoint large)")
    commit(ctx, "(rollback small)")
    commit(ctx, *(f"(place {'f0' if i % 2 == 0 else 'f1'} (before f4))" for i in range(70)))
    commit(ctx, "(rollback large)")
    order = [*(f"f{i}" for i in range(5)), *(f"g{i}" for i in range(5))]
    assert ctx.mind().order == order
    commit(ctx, "(create new (x))")
    assert ctx.mind().order == [*order, "new"]


def test_checkpoint_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint cp)")
    err = refused(ctx, ValidationError, "(checkpoint cp)", op_index=0)
    assert "already exists" in err.message
    refused(ctx, ValidationError, "(checkpoint other)", "(checkpoint other)", op_index=1)


def test_rollback_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint cp)")
    refused(ctx, NotFoundError, "(rollback nope)", op_index=0)
    refused(ctx, ValidationError, "(rollback cp)", reason=None, op_index=0)
    commit(ctx, "(create b (x))")
    err = refused(ctx, StaleVersionError, "(rollback cp)", base=ctx.version - 1)
    assert err.op == "rollback" and err.details["current_version"] == ctx.version
    refused(ctx, ValidationError, "(rollback cp)", base=ctx.version + 1)  # from the future


def test_drop_checkpoint(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint one)", "(checkpoint two)", "(checkpoint three)")
    assert {name for name, _ in ctx.mind().checkpoints} == {"one", "two", "three"}
    receipt = commit(ctx, "(drop-checkpoint one three)", reason="tidy")
    assert [e.change for e in receipt.effects] == ["dropped", "dropped"]
    assert [name for name, _ in ctx.mind().checkpoints] == ["two"]
    assert ctx.status().checkpoints == 1
    refused(ctx, NotFoundError, "(rollback one)", op_index=0)
    commit(ctx, "(checkpoint one)")  # the name can be reused
    assert {name for name, _ in ctx.mind().checkpoints} == {"one", "two"}


def test_drop_checkpoint_refusals(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(checkpoint cp)")
    refused(ctx, NotFoundError, "(drop-checkpoint nope)", op_index=0)
    refused(ctx, NotFoundError, "(drop-checkpoint cp nope)", op_index=0)
    refused(ctx, NotFoundError, "(drop-checkpoint cp)", "(drop-checkpoint cp)", op_index=1)
    refused(ctx, ValidationError, "(drop-checkpoint cp)", reason=None, op_index=0)


# ------------------------------------------------------------------ sessions


def test_retire_and_restore_another_idle_session(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    ctx.create_session("s2")
    receipt = commit(ctx, "(retire-session s2)", reason="idle")
    assert receipt.effects[0].change == "session retired"
    assert dict(ctx.mind().sessions) == {"default": "active", "s2": "retired"}
    commit(ctx, "(restore-session s2)", reason=None)
    assert dict(ctx.mind().sessions)["s2"] == "active"


def test_retire_session_refusals(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    commit(ctx, "(create a (x))")
    ctx.create_session("s2")
    err = refused(ctx, ValidationError, "(retire-session default)", op_index=0)
    assert "current session" in err.message
    refused(ctx, ValidationError, "(retire-session s2)", session="s2", op_index=0)
    refused(ctx, NotFoundError, "(retire-session nope)", op_index=0)
    refused(ctx, ValidationError, "(retire-session s2)", reason=None, op_index=0)
    refused(ctx, StaleVersionError, "(retire-session s2)", base=ctx.version - 1)
    commit(ctx, "(retire-session s2)")
    err = refused(ctx, ValidationError, "(retire-session s2)", op_index=0)
    assert "already retired" in err.message


def test_retire_session_with_running_work_is_refused(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    activation = ctx.start_activation("s2")
    err = refused(ctx, ValidationError, "(retire-session s2)", op_index=0)
    assert "running work" in err.message
    ctx.finish_activation(activation)
    commit(ctx, "(retire-session s2)")
    assert dict(ctx.mind().sessions)["s2"] == "retired"


def test_restore_session_refusals(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    ctx.create_session("s2")
    refused(ctx, ValidationError, "(restore-session s2)", op_index=0)
    refused(ctx, NotFoundError, "(restore-session nope)", op_index=0)
    commit(ctx, "(retire-session s2)")
    refused(ctx, StaleVersionError, "(restore-session s2)", base=ctx.version - 1)


# ------------------------------------------------------------------ causal protection


def test_root_request_of_a_running_activation_cannot_be_retired(ctx: morphz.Context) -> None:
    request = ctx.observe("user_message", "deploy to production")
    other = ctx.observe("user_message", "unrelated")
    activation = ctx.start_activation("default", root=request.ref)
    err = refused(ctx, ProtectedError, f"(retire {request.ref})", op_index=0)
    assert err.code == "protected" and "root request" in err.message
    refused(ctx, ProtectedError, f"(retire {other.ref} {request.ref})", op_index=0)
    commit(ctx, f"(retire {other.ref})")  # only the root request is protected
    ctx.finish_activation(activation)
    commit(ctx, f"(retire {request.ref})")
    assert obs_life(ctx, request.ref) == ("retired", False)


# ------------------------------------------------------------------ supersede fast path


def test_supersede_fast_path_retires_the_old_frame_at_once(ctx: morphz.Context) -> None:
    ev = ctx.observe("tool_result", "region: cn-shanghai")
    commit(ctx, "(create deployment/old (fact (region cn-hangzhou)))")
    receipt = commit(
        ctx,
        f"(derive deployment/new (from {ev.ref} deployment/old) (fact (region cn-shanghai)))",
        "(relate deployment/new supersedes deployment/old)",
        "(retire deployment/old)",
    )
    old = frame(ctx, "deployment/old")
    assert (old.lifecycle, old.remaining_ticks) == ("retired", None)
    assert old.body == "(fact (region cn-hangzhou))"
    retire_effect = receipt.effects[2]
    assert retire_effect.target == "deployment/old" and "superseded" in retire_effect.change
    assert retire_effect.immediate > 0 and retire_effect.eventual == 0
    assert frame(ctx, "deployment/new").lifecycle == "active"


def test_supersede_fast_path_in_any_op_order_and_with_revise(ctx: morphz.Context) -> None:
    commit(ctx, "(create old (v1))", "(create new (v0))")
    commit(ctx, "(retire old)", "(relate new supersedes old)", "(revise new (from old) (v2))")
    assert frame(ctx, "old").lifecycle == "retired"


@pytest.mark.parametrize(
    "ops",
    [
        # the successor does not cite the old frame
        ("(create new (v2))", "(relate new supersedes old)", "(retire old)"),
        # the relation is not supersedes
        ("(derive new (from old) (v2))", "(relate new refines old)", "(retire old)"),
        # no relation at all
        ("(derive new (from old) (v2))", "(retire old)"),
    ],
)
def test_without_the_fast_path_the_window_applies(
    ctx: morphz.Context, ops: tuple[str, ...]
) -> None:
    commit(ctx, "(create old (v1))")
    receipt = commit(ctx, *ops)
    old = frame(ctx, "old")
    assert (old.lifecycle, old.remaining_ticks) == ("retiring", 8)
    retire_effect = next(e for e in receipt.effects if e.op == "retire")
    assert retire_effect.immediate < 0 < retire_effect.eventual  # its marks now, all at the end


def test_supersede_fast_path_on_a_retiring_frame_reports_immediate_relief(
    ctx: morphz.Context,
) -> None:
    """A frame already in its window, superseded now, leaves the encoding at this commit: the
    receipt must count its tokens as immediate relief (its eventual relief is now moot)."""
    commit(ctx, "(create old (v1 with a longer body))")
    commit(ctx, "(retire old)")
    receipt = commit(
        ctx, "(derive new (from old) (v2))", "(relate new supersedes old)", "(retire old)"
    )
    assert frame(ctx, "old").lifecycle == "retired"
    retire_effect = receipt.effects[2]
    assert "superseded" in retire_effect.change
    assert retire_effect.immediate > 0


def test_supersede_relation_from_an_earlier_tx_is_not_the_fast_path(ctx: morphz.Context) -> None:
    commit(ctx, "(create old (v1))", "(derive new (from old) (v2))", "(relate new supersedes old)")
    commit(ctx, "(retire old)")
    assert frame(ctx, "old").lifecycle == "retiring"


# ------------------------------------------------------------------ all or nothing


FAILING_THIRD_OPS = [
    ("(derive late (from nope) (x))", NotFoundError),
    ("(retire guard)", ProtectedError),
    ("(relate a r b)", ValidationError),
    ("(unrelate a missing b)", NotFoundError),
    ("(restore b)", ValidationError),
    ("(protect guard)", ValidationError),
    ("(unprotect a)", ValidationError),
    ("(place a (before nope))", NotFoundError),
    ("(checkpoint cp)", ValidationError),
    ("(rollback nope)", NotFoundError),
    ("(drop-checkpoint nope)", NotFoundError),
    ("(retire-session nope)", NotFoundError),
    ("(restore-session default)", ValidationError),
    ("(create a (again))", ValidationError),
    ("(revise nope (x))", NotFoundError),
]


@pytest.mark.parametrize(
    ("third", "error"), FAILING_THIRD_OPS, ids=[t for t, _ in FAILING_THIRD_OPS]
)
def test_a_failing_operation_leaves_nothing_behind(
    ctx: morphz.Context, third: str, error: type[TxError]
) -> None:
    ev = ctx.observe("user_message", "hello")
    commit(ctx, "(create a (x))", "(create b (y))", "(create guard (g))", "(protect guard)")
    commit(ctx, "(relate a r b)", "(checkpoint cp)")
    err = refused(
        ctx,
        error,
        "(create fresh (from-nothing) (n))",
        f"(retire a {ev.ref})",
        third,
        op_index=2,
    )
    assert err.op_index == 2
    assert ctx.mind().frame("fresh") is None
    assert frame(ctx, "a").lifecycle == "active" and obs_life(ctx, ev.ref) == ("active", False)


def test_a_refused_rollback_and_fast_path_leave_nothing_behind(ctx: morphz.Context) -> None:
    commit(ctx, "(create old (v1))", "(checkpoint cp)", "(create later (x))")
    refused(
        ctx,
        NotFoundError,
        "(derive new (from old) (v2))",
        "(relate new supersedes old)",
        "(retire old)",
        "(rollback cp)",
        "(relate new r nope)",
        op_index=4,
    )
    assert ctx.mind().order == ["old", "later"]
    assert frame(ctx, "old").lifecycle == "active"


def test_refused_parse_and_validation_leave_nothing_behind(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))")
    before = state(ctx)
    for text in (
        "(context-tx (base-version 1) (create b (x)) (frobnicate))",
        "(context-tx (base-version 1) (create b (x)) (retire a))",
        "(context-tx (base-version 1) (create b (x))",
    ):
        with pytest.raises(TxError):
            ctx.commit(text)
    assert state(ctx) == before


# ------------------------------------------------------------------ versions


def test_each_commit_bumps_the_version_and_chains_receipts(ctx: morphz.Context) -> None:
    receipts = [commit(ctx, f"(create f{i} (x))") for i in range(3)]
    assert [r.after_version for r in receipts] == [1, 2, 3]
    assert [r.tx_id for r in receipts] == ["tx-1", "tx-2", "tx-3"]
    assert len({r.head for r in receipts}) == 3
    assert [r.seq for r in receipts] == sorted(r.seq for r in receipts)


def test_base_version_from_the_future_is_refused(ctx: morphz.Context) -> None:
    refused(ctx, ValidationError, "(create a (x))", base=5)


def test_stale_base_touching_a_changed_frame_conflicts(ctx: morphz.Context) -> None:
    commit(ctx, "(create a (x))", "(create b (y))")
    base = ctx.version
    commit(ctx, "(revise a (x2))")
    err = refused(ctx, ConflictError, "(revise a (x3))", base=base)
    assert "content:a" in err.details["changed_boundaries"]
    receipt = commit(ctx, "(revise b (y2))", base=base)  # a different frame rebases
    assert receipt.rebased is True and receipt.base_version == base


def test_unrelate_then_relate_the_same_edge_in_one_tx(ctx: morphz.Context) -> None:
    """Found by the state machine: the net effect is 'edge present', written without error."""
    ctx.commit("(context-tx (base-version 0) (create a (x 1)) (create b (y 1)) (relate a r b))")
    ctx.commit('(context-tx (base-version 1) (reason "redo") (unrelate a r b) (relate a r b))')
    assert ("a", "r", "b") in ctx.mind().relations
    assert ctx.audit().ok
