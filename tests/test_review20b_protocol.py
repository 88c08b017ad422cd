"""Review 20b (protocol): the protocol region read as the whole contract a model has, each claim
checked against what the mind layer and the store do when transactions are committed through
the library. Each test fails against the code as it was reviewed; its docstring states what
happens, what the protocol promises, and what is expected."""

from __future__ import annotations

import pytest

import morphz
from protocol_text import entry as _entry


def _tx(ctx: morphz.Context, ops: str, reason: str | None = None, base: int | None = None) -> str:
    version = ctx.version if base is None else base
    why = f' (reason "{reason}")' if reason else ""
    return f"(context-tx (base-version {version}){why} {ops})"


def _commit(
    ctx: morphz.Context, ops: str, reason: str | None = None, base: int | None = None
) -> morphz.Receipt:
    return ctx.commit(_tx(ctx, ops, reason, base))


# --- rollback and protection ------------------------------------------------------------------


def test_a_rollback_does_not_silently_remove_protected_frames(ctx: morphz.Context) -> None:
    """The protocol's protect entry promises "protected content stays active and cannot be
    retired", and its lifecycle entry "Protected content must be unprotected before it can be
    retired". A rollback ignores protection: a frame created and protected after the
    checkpoint is deleted outright, and a frame protected after the checkpoint (retired there)
    comes back retired, both without a word (checkpoints.rollback in
    src/morphz/mind/checkpoints.py:37-76 never looks at ``protected``). A model that protects
    what must survive (the user's preferences) loses it to a rollback meant to undo an
    unrelated experiment. Expected: the rollback is refused as `protected`, naming the frames
    it would remove or retire (unprotect them first, as for a retire); or, if overriding
    protection is the intended rule, the protocol's protect entry says that a rollback does."""
    ctx.observe("user_message", "hello")
    _commit(ctx, "(create experiment (step 1))")
    _commit(ctx, "(checkpoint before-prefs)")
    _commit(ctx, '(create user/preferences (language "fr")) (protect user/preferences)')
    try:
        _commit(ctx, "(rollback before-prefs)", reason="undo the experiment")
    except morphz.ProtectedError:
        return  # the promise is kept: protected content is not removed behind the model's back
    kept = [f.id for f in ctx.mind().frames]
    protect = _entry("context-tx", "operations", "protect")
    assert "rollback" in protect or "user/preferences" in kept, (
        "a rollback deleted the protected frame user/preferences, and the protocol's protect "
        f"entry says nothing of rollbacks: {protect!r}"
    )


# --- no-ops that commit ---------------------------------------------------------------------


def test_a_rollback_to_the_mind_as_it_is_is_refused_as_a_no_op(ctx: morphz.Context) -> None:
    """The protocol says "Asking for the state a target is in already is an error", and
    every other no-op is refused (restore of an active frame, place where a frame already is,
    relate of an existing edge...). A rollback to a checkpoint the mind still equals (a model
    that checkpointed, saw its risky transaction refused, and rolls back "to be safe")
    commits: it takes a version and raises the rollback barrier (mind/checkpoints.py:71 sets
    ``barrier`` for any rollback, committing.py:162 stores it), so every other activation's
    transaction based before it is refused as a conflict over "mind (rolled back)" although
    nothing changed. Expected:
    such a rollback is refused as `validation` ("the mind is at checkpoint ... already: drop
    this operation"), nothing committed, and a concurrent stale transaction still rebases."""
    ctx.observe("user_message", "hello")
    _commit(ctx, "(create plan (step 1))")
    _commit(ctx, "(checkpoint before-risk)")
    other_base = ctx.version  # another activation read the mind here
    with pytest.raises(morphz.ValidationError):
        _commit(ctx, "(rollback before-risk)", reason="be safe")
    assert ctx.version == other_base
    # the other activation's work is unaffected
    receipt = _commit(ctx, "(create notes (n 1))", base=other_base)
    assert receipt.after_version == other_base + 1


def test_a_revise_that_changes_nothing_is_refused_as_a_no_op(ctx: morphz.Context) -> None:
    """A revise of an active frame with the body and sources it has already commits: the
    revision goes up, a version is taken and the frame's content boundary is written
    (mind/apply.py _revise, lines 227-239, compares nothing), so a concurrent transaction that
    derives from the frame or revises it, based before this no-op, is refused as a conflict
    on content:F over a change that changed nothing. The protocol says "Asking for the state a
    target is in already is an error", and a place that moves nothing was made a refusal for
    this very reason (review 17b). Expected: a revise that leaves an active frame's body and
    sources as they are is refused as `validation` (nothing committed); a revise of a retiring
    or retired frame with the same body stays allowed (it changes the lifecycle)."""
    ctx.observe("user_message", "hello")
    _commit(ctx, '(create plan (steps "build" "ship"))')
    base = ctx.version
    with pytest.raises(morphz.ValidationError):
        _commit(ctx, '(revise plan (steps "build" "ship"))')
    assert ctx.version == base
    receipt = _commit(ctx, "(derive review (from plan) (ok))", base=base)
    assert receipt.after_version == base + 1


# --- errors: the operation, line and column ---------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ('(create note "line one\\nline two")', "unknown escape"),
        ('(create note "never closed)', "unterminated string"),
    ],
)
def test_a_reader_error_inside_an_operation_names_that_operation(
    ctx: morphz.Context, bad: str, problem: str
) -> None:
    """The receipts entry promises that a refused transaction returns "a typed error (parse,
    validation, ...) naming the operation, line and column". An error the S-expression reader
    raises inside an operation (an unknown escape in a body's string, a string never closed)
    names no operation: ``op`` and ``op_index`` are None (sexpr.py:104 _error builds the
    ParseError without them and parse.py:387 _parse_general re-raises it as it is), so in a
    transaction of several operations the model must count columns to find which one to fix.
    Expected: the error names the operation whose text holds the fault (here ``create``, at
    index 1)."""
    ctx.observe("user_message", "hello")
    text = _tx(ctx, f"(create plan (step 1)) {bad}")
    with pytest.raises(morphz.ParseError) as caught:
        ctx.commit(text)
    error = caught.value
    assert problem in error.message
    assert (error.op, error.op_index) == ("create", 1), error.to_dict()


def test_the_unknown_escape_error_says_how_to_write_a_line_break(ctx: morphz.Context) -> None:
    """Models write ``\\n`` in strings by habit (JSON, most languages); the protocol says only
    "write a double quote as backslash-quote and a backslash as two backslashes", and the
    refusal says 'unknown escape \\n in string: only \\" and \\\\ are allowed' (sexpr.py
    _unescape), with no word of how a line break is written. A string may hold a line break as
    it is (the reader takes it, and the mind shows it), but neither the protocol nor the error
    says so: the model is left to guess, or to flatten its text. Expected: the error for
    ``\\n`` (and ``\\t``) says to write the line break (tab) itself inside the quotes."""
    ctx.observe("user_message", "hello")
    with pytest.raises(morphz.ParseError) as caught:
        ctx.commit(_tx(ctx, '(create note "line one\\nline two")'))
    message = caught.value.message
    assert "line break" in message, message
    # what the error should point to works today
    _commit(ctx, '(create note "line one\nline two")')
    assert ctx.mind().frames[0].body == '"line one\nline two"'


def test_citing_an_event_of_an_empty_context_names_no_event_ref_that_cannot_exist(
    ctx: morphz.Context,
) -> None:
    """On a context with no event yet, a transaction citing @e1 is refused with "@e1 does not
    exist: the latest event is @e0" (mind/apply.py need_obs, line 173): @e0 is not a ref
    (refs start at @e1, ids.py) and there is no latest event. Expected: the message says the
    context has no event yet."""
    with pytest.raises(morphz.NotFoundError) as caught:
        ctx.commit("(context-tx (base-version 0) (derive plan (from @e1) (step 1)))")
    assert "@e0" not in caught.value.message, caught.value.message
