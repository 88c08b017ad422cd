"""Review 10 (final: the session's last commits, bf3aa8d..HEAD). Each test fails on the code it
was written against; its docstring states the expected behaviour.

Areas: the '(ticked)' marker of an engine step's batch, which refused calls tick the clock
(ArgumentError), a rollback receipt's relations, reads nested in a read, and the kept total's
new retiring marks on stores that already had migration 0012."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import morphz
from agents import run_steps
from histories import tx as _tx
from morphz.errors import ContextNotFoundError
from morphz.mind.lifecycle import edge_tokens, kept_tokens, view_tokens
from morphz.runtime.models.base import ToolCall


def _kept(db: morphz.Database, ctx: morphz.Context) -> int:
    with db.store.read(ctx.id) as r:
        return r.active.frame_tokens()


# --- the '(ticked)' marker of an engine step --------------------------------------------------


def test_the_ticked_marker_is_not_on_a_refused_call_when_a_real_tool_result_ticked(
    ctx: morphz.Context, workspace: Path
) -> None:
    """b24add0 put the "(ticked)" marker on "the observation that ticks" (observe.py: the
    batch's first observation of a clock kind), and the engine decides the tick from the calls
    that ran. A step calling an unknown tool and then list_files appends [tool_result (refused,
    never ran), tool_result (list_files)]: the tick is due to list_files, but the marker lands on
    the refusal (observe.append picks the first tool_result by kind, not the one that ran), so
    `morphz context events` shows the unknown tool's error as "(ticked)" and the real result
    without it. decisions.md: calls that never ran "are no real tool results: their batch does
    not tick the clock". Expected: the marker sits on the first result of a call that ran (here
    list_files), never on a refused call's result."""
    calls = (
        ToolCall("c1", "browse_web", '{"url": "https://example.org"}'),
        ToolCall("c2", "list_files", "{}"),
    )
    clocks = run_steps(ctx, workspace, calls)
    assert clocks[1] == clocks[0] + 1  # list_files ran: the step ticked once
    results = [e for e in ctx.events() if e.kind == "tool_result"]
    assert len(results) == 2 and "browse_web" in (results[0].text or "")
    marked = [e.ref for e in results if (e.payload or {}).get("tick")]
    assert marked == [results[1].ref], (
        f"the tick marker is on {marked}: {results[0].ref} is the refusal of a call to a tool that "
        f"does not exist; the result that ticked is {results[1].ref} (list_files)"
    )


# --- ArgumentError: refusals of malformed arguments -------------------------------------------


def test_a_blank_exec_command_is_refused_without_a_tick_like_an_empty_one(
    ctx: morphz.Context, workspace: Path
) -> None:
    """b24add0: a call refused by its argument check never ran and does not tick
    (ArgumentError, ran=False). exec's schema refuses an empty command ("" breaks minLength:
    ArgumentError, no tick), but a blank one ("   ") passes the schema and is refused by exec's
    own check right after it (shell.py: ``raise ToolError("exec: command must not be blank")``),
    a plain ToolError, so _run_tool takes it as a tool that ran and the clock ticks although no
    shell was started (the same for a NUL in the command). Expected: argument refusals made
    before the tool's work starts are ArgumentErrors: a blank command arrives without a tick,
    as an empty one does."""
    empty = run_steps(ctx, workspace, (ToolCall("c1", "exec", '{"command": ""}'),),
                       ask_default=True)  # fmt: skip
    assert empty[1] == empty[0]  # the schema's refusal: no tick
    blank = run_steps(ctx, workspace, (ToolCall("c1", "exec", '{"command": "   "}'),),
                       ask_default=True)  # fmt: skip
    refused = [e for e in ctx.events() if e.kind == "tool_result"][-1]
    assert "blank" in (refused.text or "")
    assert blank[1] == blank[0], (
        f"the clock went from {blank[0]} to {blank[1]} for an exec call refused before any shell "
        "ran (a blank command), while an empty command does not tick"
    )


# --- a rollback's receipt and its relations ---------------------------------------------------


def test_a_rollback_receipt_counts_relations_as_the_kept_total_and_relate_receipts_do(
    db: morphz.Database, ctx: morphz.Context
) -> None:
    """99ae4f5 made a rollback's receipt state the relations it removes or brings back, but it
    estimates them "as one text" (lifecycle.edges_tokens), while a relate's receipt, the kept
    total (write_changes), migration 0012's recount and the audit all count each relation on its
    own (edge_tokens, rounded up per relation; view_tokens' docstring: "receipts, the store's
    kept total and the audit all count so"). Sixty relations a -rN-> b: their relates' receipts
    say they take 180 tokens, the kept total grows by 180; a rollback to before them moves the
    kept total back by 180 but its receipt says 148 tokens leave. Expected: the rollback's token
    effect equals what the kept total moves by (and undoes what the relates' receipts said)."""
    _tx(ctx, '(create a "x") (create b "y") (checkpoint cp)')
    before = _kept(db, ctx)
    relate = _tx(ctx, " ".join(f"(relate a r{i} b)" for i in range(60)))
    grown = _kept(db, ctx) - before
    assert (
        -relate.tokens_immediate
        == grown
        == sum(edge_tokens(("a", f"r{i}", "b")) for i in range(60))
    )
    rollback = _tx(ctx, "(rollback cp)", "undo the relations")
    freed = grown - (_kept(db, ctx) - before)
    assert freed == grown  # the kept total is back where it was
    assert rollback.tokens_immediate == freed, (
        f"the rollback's receipt says {rollback.tokens_immediate} tokens leave; the kept total "
        f"(and the relates' receipts) moved by {freed}"
    )


# --- reads nested in a read ---------------------------------------------------------------------


def test_a_nested_read_of_a_context_that_does_not_exist_is_context_not_found(
    db: morphz.Database,
) -> None:
    """99ae4f5 turned a nested read's ContextNotFoundError into a StoreError saying the context
    "may have been created since" and to "read it after the outer read ends", for any context
    the outer snapshot lacks, including one that exists nowhere. A progress callback of an audit
    that opens a context by a wrong name (db.context("no-such-context")) gets code "store" and
    that advice, instead of ``not-found`` with the hint to create it; a caller catching
    ContextNotFoundError (as Database.context's own comment promises) misses it. Expected: a
    context that is not in the store now either is ContextNotFoundError, as outside a read; the
    StoreError is for one created after the outer read began."""
    ctx = db.context("work", create=True)
    ctx.observe("user_message", "note")
    errors: list[morphz.MorphzError] = []

    def progress(done: int, total: int) -> None:
        try:
            db.context("no-such-context")
        except morphz.MorphzError as exc:
            errors.append(exc)

    ctx.audit(progress=progress)
    assert errors, "the callback ran no read"
    assert isinstance(errors[0], ContextNotFoundError), (
        f"{type(errors[0]).__name__} ({errors[0].code}): {errors[0]}"
    )


# --- the kept total's new rule on stores that already had 0012 ---------------------------------


def test_a_store_counted_before_the_retiring_marks_still_audits_clean(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    """99ae4f5 changed what the stored kept total (``frame_tokens``) counts: a retiring frame now
    counts its marks (kept_tokens) and wide characters in sources count one token each; the
    audit checks the stored total against the new rule and migration 0012's recount uses it.
    But 0012 had already run on stores written at 2c77bcd..bf3aa8d, and nothing recounts them:
    such a store with a frame retiring (here the total as that code kept it, without the marks)
    opens with no migration and its audit reports "frame tokens in view: replay N, stored M"
    although nothing is damaged, and its budget refusal keeps measuring without the marks until
    that frame finalizes. Expected: opening such a store recounts the kept total (a migration
    0013 running the same recount), so the audit is clean."""
    db = open_db()
    ctx = db.context("work", create=True)
    _tx(ctx, '(create a "a frame") (create b "another")')
    _tx(ctx, "(retire a)", "superseded by b, which says the same more shortly; " * 3)
    with db.store.read(ctx.id) as r:
        frame = r.frame("a")
    marks = kept_tokens(frame) - view_tokens(frame)
    assert marks > 0
    db.close()
    conn = sqlite3.connect(tmp_path / "morphz.db")
    with conn:  # the total as write_changes kept it before 99ae4f5 (view_tokens: no marks),
        # in a store whose migrations stop at 0012 (as those commits' stores did)
        conn.execute("UPDATE frame_tokens SET n = n - ? WHERE context_id = 'work'", (marks,))
        conn.execute("DELETE FROM schema_migrations WHERE number >= 13")
    conn.close()
    report = open_db().context("work").audit()
    assert report.differences == [], report.differences
