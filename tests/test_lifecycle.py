"""The organizing window on the cognitive clock (DESIGN §7)."""

from __future__ import annotations

import morphz
from morphz import Observation


def _frame(ctx: morphz.Context, fid: str) -> tuple[str, int | None]:
    frame = ctx.mind().frame(fid)
    assert frame is not None
    return frame.lifecycle, frame.remaining_ticks


def _retire(ctx: morphz.Context, fid: str) -> None:
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "done") (retire {fid}))')


def test_window_counts_down_only_on_clock_advances(ctx: morphz.Context) -> None:
    ctx.commit("(context-tx (base-version 0) (create plan (step 1)))")
    _retire(ctx, "plan")
    assert _frame(ctx, "plan") == ("retiring", 8)
    ctx.observe("recall_result", "recalled text")  # does not tick
    ctx.commit(f"(context-tx (base-version {ctx.version}) (create other (o 1)))")  # nor this
    ctx.mind()
    ctx.status()  # nor inspection
    assert _frame(ctx, "plan") == ("retiring", 8)
    kinds = ["user_message", "tool_result", "external_event"]
    for tick in range(1, 8):
        ctx.observe(kinds[tick % 3], f"fact {tick}")
        assert _frame(ctx, "plan") == ("retiring", 8 - tick)
    finalized_before = [e for e in ctx.events() if e.kind == "retirements_finalized"]
    assert finalized_before == []
    ctx.observe("user_message", "eighth")
    assert _frame(ctx, "plan") == ("retired", None)
    finalized = [e for e in ctx.events() if e.kind == "retirements_finalized"]
    assert len(finalized) == 1 and finalized[0].payload == {"frames": ["plan"], "clock": 8}
    assert ctx.status().frames["retired"] == 1
    assert ctx.audit().ok


def test_a_batch_ticks_once(ctx: morphz.Context) -> None:
    events = ctx.observe_batch(
        [
            Observation("user_message", "a"),
            Observation("tool_result", "b"),
            Observation("recall_result", "c"),
        ]
    )
    assert [e.ref for e in events] == ["@e1", "@e2", "@e3"]
    assert ctx.status().clock == 1
    ctx.observe_batch([Observation("recall_result", "d")])
    assert ctx.status().clock == 1
    assert ctx.audit().ok


def test_revise_restore_and_protect_cancel_the_window(ctx: morphz.Context) -> None:
    ctx.commit("(context-tx (base-version 0) (create a (x 1)) (create b (y 1)) (create c (z 1)))")
    for fid in ("a", "b", "c"):
        _retire(ctx, fid)
    ctx.observe("user_message", "tick")
    ctx.commit(f"(context-tx (base-version {ctx.version}) (revise a (x 2)))")
    ctx.commit(f"(context-tx (base-version {ctx.version}) (restore b))")
    ctx.commit(f"(context-tx (base-version {ctx.version}) (protect c))")
    for tick in range(10):
        ctx.observe("user_message", f"tick {tick}")
    for fid in ("a", "b", "c"):
        assert _frame(ctx, fid) == ("active", None)
    assert [e for e in ctx.events() if e.kind == "retirements_finalized"] == []
    assert ctx.audit().ok


def test_repeated_retire_keeps_the_original_window(ctx: morphz.Context) -> None:
    ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
    _retire(ctx, "a")
    for _ in range(3):
        ctx.observe("user_message", "tick")
    receipt = ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "again") (retire a))')
    assert "keeps its window (5 ticks left)" in receipt.effects[0].change
    assert _frame(ctx, "a") == ("retiring", 5)
    assert ctx.audit().ok


def test_window_is_a_per_context_setting(db: morphz.Database) -> None:
    short = db.context("short", create=True, window=2)
    zero = db.context("zero", create=True, window=0)
    for ctx in (short, zero):
        ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
        _retire(ctx, "a")
    assert _frame(short, "a") == ("retiring", 2)
    assert _frame(zero, "a") == ("retired", None)
    short.observe("user_message", "1")
    short.observe("user_message", "2")
    assert _frame(short, "a") == ("retired", None)
    short.set_window(5)
    short.commit(f"(context-tx (base-version {short.version}) (create b (y 1)))")
    _retire(short, "b")
    assert _frame(short, "b") == ("retiring", 5)
    assert short.audit().ok and zero.audit().ok


def test_retired_content_stays_in_history(ctx: morphz.Context) -> None:
    ev = ctx.observe("tool_result", "a long build log")
    ctx.commit(
        f'(context-tx (base-version 0) (reason "processed") (derive diag (from {ev.ref}) '
        f"(fact ok)) (retire {ev.ref}))"
    )
    assert ctx.mind().observation(ev.ref) is None
    assert ctx.event(ev.ref).text == "a long build log"
    ctx.commit(f"(context-tx (base-version {ctx.version}) (restore {ev.ref}))")
    restored = ctx.mind().observation(ev.ref)
    assert restored is not None and restored.lifecycle == "active"
    assert ctx.audit().ok


def test_reopen_keeps_everything(open_db: object) -> None:
    assert callable(open_db)
    db = open_db()
    ctx = db.context("c", create=True)
    ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
    _retire(ctx, "a")
    ctx.observe("user_message", "tick")
    status = ctx.status()
    db.close()
    again = open_db().context("c")
    assert again.status() == status
    assert _frame(again, "a") == ("retiring", 7)
    assert again.audit().ok
