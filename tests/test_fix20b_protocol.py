"""Fix 20b: the cases around review 20b's findings (tests/test_review20b_protocol.py) that its
tests leave open: what a rollback over protected frames may still do, which rollbacks and
revises still commit, that stores of earlier releases holding the newly refused commits still
pass their audit, and which operation a reader error names."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz import committing
from morphz.mind.apply import Env
from morphz.txlang import parse_tx


def _tx(ctx: morphz.Context, ops: str, reason: str = "") -> morphz.Receipt:
    why = f' (reason "{reason}")' if reason else ""
    return ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


# --- rollback and protection ------------------------------------------------------------------


def test_a_rollback_that_would_bring_a_protected_frame_back_retired_is_refused(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(create prefs (language fr)) (create other (x 1))")
    _tx(ctx, "(retire prefs)", reason="not needed")  # retiring at the checkpoint
    _tx(ctx, "(checkpoint k)")
    _tx(ctx, "(restore prefs) (protect prefs)")
    version = ctx.version
    with pytest.raises(morphz.ProtectedError) as caught:
        _tx(ctx, "(rollback k)", reason="undo")
    error = caught.value
    assert "prefs (comes back retir" in error.message
    assert "unprotect them first" in error.message
    assert error.details["frames"] == ["prefs"]
    assert ctx.version == version


def test_unprotecting_first_lets_the_rollback_remove_the_frame(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(checkpoint empty-ish) (create keep (x 1))")
    _tx(ctx, "(create prefs (language fr)) (protect prefs keep)")
    with pytest.raises(morphz.ProtectedError) as caught:
        _tx(ctx, "(rollback empty-ish)", reason="undo")
    assert "prefs (created since)" in caught.value.message
    assert "keep" in caught.value.message  # created after the checkpoint, in the same tx
    _tx(ctx, "(unprotect prefs keep) (rollback empty-ish)", reason="undo all")
    assert [f.id for f in ctx.mind().frames] == []


def test_a_protected_frame_the_rollback_keeps_active_does_not_stop_it(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(create prefs (language fr)) (protect prefs)")
    _tx(ctx, "(checkpoint k)")
    _tx(ctx, "(create experiment (step 1)) (revise prefs (language de))")
    _tx(ctx, "(rollback k)", reason="undo the experiment")
    frames = ctx.mind().frames
    assert [(f.id, f.body, f.protected) for f in frames] == [("prefs", "(language fr)", True)]


# --- no-ops -----------------------------------------------------------------------------------


def test_a_rollback_to_a_checkpoint_of_the_same_transaction_is_a_no_op(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(create plan (step 1))")
    with pytest.raises(morphz.ValidationError) as caught:
        _tx(ctx, "(checkpoint k) (rollback k)", reason="try")
    assert caught.value.message == "the mind is at checkpoint 'k' already: drop this operation"
    assert caught.value.op_index == 1


def test_a_rollback_that_changes_only_a_relation_or_the_order_commits(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(create a (x 1)) (create b (x 2))")
    _tx(ctx, "(checkpoint k)")
    _tx(ctx, "(relate a depends-on b)")
    _tx(ctx, "(rollback k)", reason="no edge")
    assert not ctx.mind().relations
    _tx(ctx, "(place b first)")
    _tx(ctx, "(rollback k)", reason="old order")
    assert [f.id for f in ctx.mind().frames] == ["a", "b"]


def test_a_revise_that_changes_the_lifecycle_or_the_sources_commits(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    _tx(ctx, "(create plan (step 1)) (create notes (n 1))")
    _tx(ctx, "(revise plan (from notes) (step 1))")  # same body, new sources
    _tx(ctx, "(retire plan)", reason="done")
    _tx(ctx, "(revise plan (step 1))")  # same body and sources: cancels the retirement
    frame = next(f for f in ctx.mind().frames if f.id == "plan")
    assert (frame.lifecycle, frame.revision) == ("active", 3)
    with pytest.raises(morphz.ValidationError, match="has this body and these sources already"):
        _tx(ctx, "(revise plan (from notes) (step 1))")


# --- the audit of a store that committed them before --------------------------------------


def test_a_history_holding_the_newly_refused_commits_still_passes_its_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous release committed a revise and a rollback that changed nothing, and a
    rollback that removed a protected frame: the audit replays them as they were committed."""
    with morphz.open(tmp_path / "old.db") as db:
        ctx = db.context("c", create=True, window=0)
        ctx.observe("user_message", "hello")
        _tx(ctx, "(create plan (step 1))")
        _tx(ctx, "(checkpoint k)")
        with monkeypatch.context() as old_release:  # no such refusals then
            old_release.setattr(committing, "Env", lambda *args: Env(*args, live=False))
            _tx(ctx, "(revise plan (step 1))")
            _tx(ctx, "(checkpoint k2) (rollback k2)", reason="safe")
            _tx(ctx, "(create prefs (language fr)) (protect prefs)")
            _tx(ctx, "(rollback k)", reason="undo")
        assert [f.id for f in ctx.mind().frames] == ["plan"]
        report = ctx.audit()
    assert report.ok, report.differences


# --- reader errors name their operation -------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "op", "index"),
    [
        ('(create a (x 1)) (retire a) (create b "tab\\there")', "create", 2),
        ("(create a (x 1)) (derive b (from a) (x (y 2)", "derive", 1),
        ('(create a (x 1)) ; a comment\n (revise a "open)', "revise", 1),
        ('("create" a "x\\n")', None, 0),  # a list without an atom head: the index alone
    ],
)
def test_a_reader_error_names_the_operation_after_a_reason(
    ops: str, op: str | None, index: int
) -> None:
    text = f'(context-tx\n (base-version 3)\n (reason "why")\n {ops})'
    with pytest.raises(morphz.ParseError) as caught:
        parse_tx(text)
    assert (caught.value.op, caught.value.op_index) == (op, index), caught.value.to_dict()


def test_a_reader_error_in_the_header_names_no_operation() -> None:
    with pytest.raises(morphz.ParseError) as caught:
        parse_tx('(context-tx (base-version 3) (reason "a\\nb") (create a (x 1)))')
    error = caught.value
    assert (error.op, error.op_index) == (None, None)
    assert "write the line break itself inside the quotes" in error.message


def test_the_tab_escape_error_says_to_write_the_tab() -> None:
    with pytest.raises(morphz.ParseError, match="write the tab itself inside the quotes"):
        parse_tx('(context-tx (base-version 3) (create a "x\\ty"))')
