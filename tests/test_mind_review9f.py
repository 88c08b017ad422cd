"""Review 9f, the pure mind layer: receipts' token effects and the rebase boundaries.

Token effects follow the protocol's sign convention: positive frees tokens. For the frames in
view, the immediate effects of a committed transaction must equal minus the change of the
frames' token estimate (the per-context total write_changes keeps, which the budget refusal
reads), and its eventual effects the change of what pending retirements will free when their
windows end.
"""

from __future__ import annotations

import morphz
from morphz.mind.lifecycle import kept_tokens
from morphz.mind.state import Frame


def _tokens(frame: object) -> int:
    """What a frame counts in view: its entry, and while it retires its marks (kept_tokens)."""
    f = frame  # a FrameView
    life, reason = f.lifecycle, f.reason  # type: ignore[attr-defined]
    copy = Frame(f.id, f.body, tuple(f.sources), 1, life, False, 0.0, 0, reason)  # type: ignore[attr-defined]
    return kept_tokens(copy)


def _in_view(ctx: morphz.Context) -> int:
    return sum(_tokens(f) for f in ctx.mind().frames if f.lifecycle != "retired")


def _pending(ctx: morphz.Context) -> int:
    return sum(_tokens(f) for f in ctx.mind().frames if f.lifecycle == "retiring")


def _commit(ctx: morphz.Context, ops: str) -> morphz.Receipt:
    return ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "r") {ops})')


def _frame_effects(receipt: morphz.Receipt) -> tuple[int, int]:
    """Sum of (immediate, eventual) over the effects on frames (not edges or observations)."""
    effects = [e for e in receipt.effects if " " not in e.target and not e.target.startswith("@")]
    return sum(e.immediate for e in effects), sum(e.eventual for e in effects)


def test_supersede_fast_path_counts_one_retirement_once(ctx: morphz.Context) -> None:
    """A frame retired, restored and retired again in one tx, then superseded, is retired once:
    the receipt frees its tokens once (the first retire was cancelled by the restore), and
    nothing is left to free later. Today the fast path rewrites *every* earlier retire effect of
    that frame to "retired at once", so the receipt frees it twice (and keeps the restore's
    -eventual): immediate 2x too much, eventual negative."""
    _commit(ctx, '(create b "' + "b" * 60 + '")')
    before_view, before_pending = _in_view(ctx), _pending(ctx)
    receipt = _commit(
        ctx,
        '(retire b) (restore b) (retire b) (derive b2 (from b) "x") (relate b2 supersedes b)',
    )
    assert ctx.mind().frame("b").lifecycle == "retired"  # type: ignore[union-attr]
    immediate, eventual = _frame_effects(receipt)
    assert immediate == -(_in_view(ctx) - before_view), receipt.effects
    assert eventual == _pending(ctx) - before_pending == 0, receipt.effects
    at_once = [e for e in receipt.effects if e.change.startswith("retired at once")]
    assert len(at_once) == 1, receipt.effects


def test_revise_of_a_retiring_frame_cancels_its_eventual_relief(ctx: morphz.Context) -> None:
    """Revise cancels a pending retirement (DESIGN §7), like restore and protect, which state
    the cancelled relief as a negative eventual effect. Revise states 0, so a tx that retires a
    frame and then revises it reports tokens_eventual > 0 although nothing will ever finalize,
    and a revise of a frame retired earlier does not take back the relief the retire promised."""
    _commit(ctx, '(create a "' + "a" * 40 + '") (create c "' + "c" * 40 + '")')
    retire = _commit(ctx, "(retire a)")
    old_tokens = _tokens(ctx.mind().frame("a"))  # with its retiring marks
    assert retire.tokens_eventual == old_tokens
    revise = _commit(ctx, '(revise a "short")')
    assert _pending(ctx) == 0
    assert revise.tokens_eventual == -old_tokens, revise.effects  # as restore/protect state it

    same_tx = _commit(ctx, '(retire c) (revise c "shorter")')
    assert ctx.mind().frame("c").lifecycle == "active"  # type: ignore[union-attr]
    assert same_tx.tokens_eventual == 0, same_tx.effects  # nothing is pending: nothing to free


def test_rollback_receipt_states_its_token_effect(ctx: morphz.Context) -> None:
    """Each operation's receipt entry carries its token effect (protocol, receipts). A rollback
    that removes a large frame frees its tokens at once, and one that brings frames back adds
    them; today the rollback's effect always states 0 and 0."""
    _commit(ctx, '(create keep "k") (checkpoint cp)')
    _commit(ctx, '(create big "' + "x" * 400 + '")')
    before = _in_view(ctx)
    receipt = _commit(ctx, "(rollback cp)")
    assert ctx.mind().frame("big") is None
    assert receipt.tokens_immediate == -(_in_view(ctx) - before) > 0, receipt.effects


def test_rollback_receipt_states_restored_frames(ctx: morphz.Context) -> None:
    """A rollback to a checkpoint where a now-retired frame was active brings its tokens back
    into view: the receipt's immediate effect is negative by that much (today 0)."""
    _commit(ctx, '(create big "' + "x" * 400 + '") (checkpoint cp)')
    ctx.set_window(0)
    _commit(ctx, "(retire big)")
    before = _in_view(ctx)
    receipt = _commit(ctx, "(rollback cp)")
    assert ctx.mind().frame("big").lifecycle == "active"  # type: ignore[union-attr]
    assert receipt.tokens_immediate == -(_in_view(ctx) - before) < 0, receipt.effects


def test_stale_unrelate_supersedes_rebases_over_a_revised_subject(ctx: morphz.Context) -> None:
    """`relate NEW supersedes OLD` declares content:NEW because the fast path reads NEW's
    sources (docs/decisions.md); an *unrelate* adds no edge and can never fire the fast path,
    so it reads only its edge and must rebase over another activation's revise of NEW. Today
    op_boundaries gives unrelate the same content:NEW and the stale unrelate is refused as a
    conflict on content:n."""
    _commit(ctx, '(create o "old") (derive n (from o) "new") (relate n supersedes o)')
    base = ctx.version
    _commit(ctx, '(revise n (from o) "newer")')  # another activation
    receipt = ctx.commit(
        f'(context-tx (base-version {base}) (reason "wrong edge") (unrelate n supersedes o))'
    )
    assert receipt.rebased
    assert ctx.mind().relations == ()
