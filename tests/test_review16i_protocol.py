"""Review 16i: the protocol region read as the only contract a model has (issue 4: "written so a
capable model can maintain its context from it alone"). A dozen maintenance situations were
played through `morphz context tx` acting only on the encoding; these tests keep the places
where the protocol, or a refusal the protocol relies on, told the model something false or left
out a rule it could not guess. Each docstring states the expectation."""

from __future__ import annotations

import re

import pytest

import morphz
from morphz.capacity import Budget
from morphz.errors import BudgetError, ValidationError
from morphz.runtime.agent_tools import RECALL
from protocol_text import entry as protocol_entry


def _frame_line(ctx: morphz.Context, fid: str) -> str | None:
    """The frame's line in the mind region, or None when it is not in view."""
    for line in ctx.encode().text.splitlines():
        if line.startswith(f" (frame {fid} "):
            return line
    return None


# --- the supersede fast path, as the refusals advise it ----------------------------------------


def test_budget_refusal_advice_names_the_citation_the_fast_path_needs(
    ctx: morphz.Context,
) -> None:
    """The `budget` refusal (committing.py _check_room, the BudgetError text) tells a model at the
    limit: "supersede what it replaces ((relate NEW supersedes OLD) and (retire OLD) retire OLD at
    once)". The protocol's lifecycle entry (and decisions.md "Supersede fast path") say the fast
    path also needs NEW to cite OLD. A model that follows the refusal with a NEW derived from the
    observations (not from OLD) gets OLD "retiring: 8 ticks left": it stays in view for the whole
    window, which is exactly what the refusal was trying to avoid. Expected: the refusal's advice
    states the citation, e.g. "(derive NEW (from OLD ...) ...)"."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    huge = "x" * 40_000
    with pytest.raises(BudgetError) as refused:
        ctx.commit(f'(context-tx (base-version 0) (create notes "{huge}"))')
    advice = str(refused.value)
    assert "(relate NEW supersedes OLD)" in advice  # the fast path is what it advises
    # following it literally, with a NEW that does not cite OLD: OLD stays in view
    ctx.commit("(context-tx (base-version 0) (create old (v 1)) (create new (v 2)))")
    ctx.commit(
        '(context-tx (base-version 1) (reason "replaced") (relate new supersedes old) (retire old))'
    )
    assert "(lifecycle retiring)" in (_frame_line(ctx, "old") or "")
    assert re.search(r"\(from OLD|cites? OLD|citing OLD", advice), advice


def test_relate_refusal_for_an_existing_supersedes_edge_keeps_the_fast_path_working(
    ctx: morphz.Context,
) -> None:
    """A model that declared (relate NEW supersedes OLD) earlier (NEW derived from OLD) and now
    retires OLD writes the fast path as the protocol shows it: relate + retire. The relate is
    refused as validation, "edge ... already exists: drop this operation". Following that advice,
    (retire OLD) alone puts OLD in the organizing window (the fast path needs the relate in the
    same transaction: mind/supersede.py, decisions.md "Supersede fast path"), so the advice never
    gets the retirement the model asked for; the only way is an unrelate and a relate again in one
    transaction, which neither the protocol nor the refusal says. Expected: either an existing
    supersedes edge counts for the fast path, or the refusal (when the same transaction retires
    OLD) says how to keep it instead of "drop this operation"."""
    ctx.commit(
        "(context-tx (base-version 0) (create old (v 1)) (derive new (from old) (v 2)) "
        "(relate new supersedes old))"
    )
    with pytest.raises(ValidationError) as refused:
        ctx.commit(
            '(context-tx (base-version 1) (reason "replaced") (relate new supersedes old) '
            "(retire old))"
        )
    advice = str(refused.value)
    if "drop this operation" in advice:  # follow it
        ctx.commit('(context-tx (base-version 1) (reason "replaced") (retire old))')
        assert _frame_line(ctx, "old") is None, (
            f"the refusal said {advice!r}; following it left {_frame_line(ctx, 'old')}"
        )
    else:
        assert "unrelate" in advice, advice
        ctx.commit(  # following it: old retires at once
            '(context-tx (base-version 1) (reason "replaced") (unrelate new supersedes old) '
            "(relate new supersedes old) (retire old))"
        )
        assert _frame_line(ctx, "old") is None
    # an existing edge of another relation, or no retire of its object: the plain advice
    with pytest.raises(ValidationError) as plain:
        ctx.commit("(context-tx (base-version 2) (relate new supersedes old))")
    assert str(plain.value).endswith("already exists: drop this operation")


# --- rollback: "the mind returns to the snapshot" -------------------------------------------------


def test_protocol_says_a_rollback_brings_an_expired_retiring_frame_back_retired(
    ctx: morphz.Context,
) -> None:
    """The checkpoint entry says a checkpoint snapshots "lifecycle" and the rollback entry says
    "the mind returns to the snapshot". A frame that was retiring (2 ticks left) when the
    checkpoint was taken, and whose window ended since, does not come back retiring after the
    rollback: it comes back retired, out of view (decisions.md "Rollback": "comes back retired,
    at the rollback itself"). A model that rolls back to see that frame again finds it gone and
    has no sentence telling it why or that it must restore it. Expected: the rollback (or
    checkpoint) entry says a retiring frame whose window has ended meanwhile comes back retired
    (restore brings it back)."""
    ctx.set_window(2)
    ctx.commit("(context-tx (base-version 0) (create x/a (v 1)))")
    ctx.commit('(context-tx (base-version 1) (reason "r") (retire x/a) (checkpoint cp))')
    for i in range(3):
        ctx.observe("user_message", f"tick {i}")
    # a change to undo: a rollback that changes nothing is refused (review 20b)
    ctx.commit(f"(context-tx (base-version {ctx.version}) (create x/b (v 2)))")
    version = ctx.mind().version
    ctx.commit(f'(context-tx (base-version {version}) (reason "back") (rollback cp))')
    assert _frame_line(ctx, "x/a") is None  # the snapshot had it retiring, in view
    told = (
        protocol_entry("context-tx", "operations", "rollback")
        + " "
        + protocol_entry("context-tx", "operations", "checkpoint")
    )
    assert re.search(r"window (has )?ended|deadline|comes back retired|returns retired", told), told


# --- the clock: "a real tool result" -----------------------------------------------------------


def test_protocol_defines_which_tool_results_tick_the_clock() -> None:
    """The lifecycle entry says the clock ticks for "a user message, an external event or a real
    tool result" and never says what a tool result that is not real is. In the runtime
    (runtime/calls.py run: "no real tool result") it is a call refused before its tool ran
    (unknown tool, withdrawn in maintenance, malformed arguments, not approved). A model cannot
    tell whether its own context_tx/recall results, an error result or a denied call advance the
    window. Expected: the sentence says what "real" means (a tool that ran, errors included; a
    call refused before it ran does not tick)."""
    lifecycle = protocol_entry("lifecycle")
    sentence = next(s for s in re.split(r"(?<=\.)\s", lifecycle) if "ticks" in s)
    assert "real tool result" not in sentence or re.search(
        r"\bran\b|refused before|not approved|that ran", sentence
    ), sentence


# --- recall: how to narrow a search -------------------------------------------------------------


def test_recall_contract_names_the_kinds_a_search_takes() -> None:
    """The protocol sends the model to "the recall tool"; its schema (runtime/agent_tools.py
    RECALL) offers `kinds` "to narrow it" as an array of free strings, without an enum or a
    single example. The values it accepts are groups (observations, frames, replies,
    transactions) and event kinds (tool_result, context_tx_committed, ...): `context recall
    search --help` lists them, a model never sees that. A model searching only its frames (the
    earlier body of a revised frame, say) has to guess "frame" or "frames" and learns from an
    error. Expected: the schema (enum or description) or the protocol's recall entry names them."""
    kinds = RECALL.parameters["properties"]["kinds"]
    named = "enum" in kinds.get("items", {}) or "observations" in (
        RECALL.description + kinds.get("description", "") + protocol_entry("recall")
    )
    assert named, RECALL.description
