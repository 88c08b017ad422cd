"""Review 14, the protocol region (src/morphz/encoding/protocol.py) read sentence by sentence as
the only thing a model knows about maintaining its context, checked against real stores. Each
test shows what the runtime does (those assertions pass) and then fails where the protocol says
otherwise or says nothing of a rule the runtime enforces; its docstring states the expectation."""

from __future__ import annotations

import re

import pytest

import morphz
from morphz import Observation
from morphz.capacity import Budget
from morphz.encoding.protocol import PROTOCOL
from morphz.errors import BudgetError, ConflictError, ValidationError
from morphz.txlang.validate import MAX_BODY_DEPTH
from protocol_text import entry as protocol_entry


def _clock(ctx: morphz.Context) -> int:
    found = re.findall(r"\(clock (\d+)\)", ctx.encode().text)
    return int(found[-1])


def _inbox(ctx: morphz.Context, session: str) -> str:
    text = ctx.encode(session=session).text
    return text[text.index("\n(inbox") : text.index("\n(observation-state")]


# --- retire-session: "the session leaves the working set" -----------------------------------------


def test_retiring_a_session_leaves_its_observations_in_the_inbox_and_the_protocol_says_so(
    ctx: morphz.Context,
) -> None:
    """The protocol's regions entry says the session directory shows "how much of each [session]
    is shown", and retire-session says "the session leaves the working set". A model under
    pressure reads that as: retiring a noisy session takes its observations out of view. It does
    not: the working set only decides the session-directory entry (encoding/sessions.py); the
    inbox shows every active observation of every session (encoding/compile.py), so the
    retired session's items stay in the inbox and the receipt frees 0 tokens. Expected: the
    retire-session entry says its observations stay in the inbox (retire them to free room)."""
    feed = ctx.observe("external_event", "feed item " * 200, session="feed")
    ctx.observe("user_message", "hello", session="ops")
    receipt = ctx.commit('(context-tx (base-version 0) (reason "noise") (retire-session feed))')
    assert receipt.tokens_immediate == 0  # nothing left the request
    assert f"(observation {feed.ref} " in _inbox(ctx, "ops")  # still in view
    entry = protocol_entry("context-tx", "operations", "retire-session")
    assert "inbox" in entry or "observation" in entry, entry


# --- concurrency: a rollback is a barrier the protocol never names --------------------------------


def test_a_transaction_based_before_a_rollback_is_refused_and_the_protocol_says_so(
    ctx: morphz.Context,
) -> None:
    """The concurrency entry: a transaction whose base-version is behind "is rebased when
    nothing it reads or writes changed since (frame content, a lifecycle target, an exact edge,
    the order, a checkpoint)". After a rollback every transaction based before it is refused
    (mind/conflicts.py decide_rebase: ``barrier_version > base`` adds "mind (rolled back)"),
    even one that only retires an observation, which a rollback never touches (checkpoints
    hold "not observations"). The barrier is a deliberate rule (docs/decisions.md,
    "Rollback"), but a model that followed the protocol expects that retire to be rebased.
    Expected: the concurrency entry states that nothing based before a rollback is rebased."""
    note = ctx.observe("user_message", "note")
    ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
    ctx.commit("(context-tx (base-version 1) (checkpoint c))")
    ctx.commit("(context-tx (base-version 2) (create b (x 1)))")
    ctx.commit('(context-tx (base-version 3) (reason "undo b") (rollback c))')
    with pytest.raises(ConflictError) as refused:  # only the observation: untouched since 3
        ctx.commit(f'(context-tx (base-version 3) (reason "read") (retire {note.ref}))')
    assert refused.value.details["changed_boundaries"] == ["mind (rolled back)"]
    concurrency = protocol_entry("concurrency")
    said = ("before a rollback", "across a rollback", "after a rollback", "rolled back")
    assert any(s in concurrency for s in said), concurrency


# --- operations whose refusals the protocol does not foresee --------------------------------------


def test_the_protocol_says_a_checkpoint_name_must_be_new(ctx: morphz.Context) -> None:
    """(checkpoint NAME) "snapshots frames, relations, order, lifecycle, protection": nothing
    says the name must be unused. A model that checkpoints "before-refactor" again to move the
    snapshot forward is refused (mind/checkpoints.py checkpoint: "already exists: drop it
    first"), while the create entry states the matching rule for frame ids. Expected: the
    checkpoint entry says a name in use is refused (drop it first, or choose a new name)."""
    ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
    ctx.commit("(context-tx (base-version 1) (checkpoint before-refactor))")
    with pytest.raises(ValidationError):
        ctx.commit("(context-tx (base-version 2) (checkpoint before-refactor))")
    entry = protocol_entry("context-tx", "operations", "checkpoint")
    assert any(s in entry for s in ("exist", "new", "unused", "in use", "drop")), entry


def test_the_protocol_says_protect_refuses_retired_content(ctx: morphz.Context) -> None:
    """The protect entry says "protected content stays active and cannot be retired", which
    reads as if protecting retired content keeps it (brings it back) active. Protecting a
    retired frame or observation is refused ("is retired: restore it first",
    mind/apply.py _protect), while protecting a retiring frame cancels its retirement.
    Expected: the protect entry says retired content must be restored first."""
    note = ctx.observe("user_message", "keep me")
    ctx.commit("(context-tx (base-version 0) (create a (x 1)))")
    ctx.commit(f'(context-tx (base-version 1) (reason "read") (retire {note.ref}))')
    with pytest.raises(ValidationError, match="restore it first"):
        ctx.commit(f"(context-tx (base-version 2) (protect {note.ref}))")
    entry = protocol_entry("context-tx", "operations", "protect")
    assert "restore" in entry, entry


def test_the_protocol_says_when_a_transaction_is_refused_for_budget(ctx: morphz.Context) -> None:
    """The receipts entry lists `budget` among the typed refusals, but no sentence says when a
    transaction gets one: committing.py _check_room refuses a transaction that grows the frames
    in view when the smallest maintenance request with them would pass the critical level
    (maintenance batches leave out observations, never frames). The capacity entry only advises
    keeping room, so a model deriving a large frame has no way to foresee it. Expected: the
    capacity (or receipts) entry states that a transaction adding frames or relations is refused
    with `budget` when the frames alone would pass critical."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    huge = "x" * 40_000  # about 10,000 tokens: more than the hard limit on its own
    with pytest.raises(BudgetError):
        ctx.commit(f'(context-tx (base-version 0) (create notes "{huge}"))')
    sentences = re.split(
        r"(?<=[.:;])\s", protocol_entry("capacity") + " " + protocol_entry("receipts")
    )
    told = [s for s in sentences if "budget" in s and ("frame" in s or "transaction" in s)]
    assert told, "no sentence says when a transaction is refused with budget"


@pytest.mark.parametrize(
    ("rule", "body", "words"),
    [
        # txlang/validate.py _twice: "'@e1' is listed twice in retire"
        ("a target listed twice", "(retire {ref} {ref})", ("twice", "more than once", "duplicate")),
        # txlang/validate.py _too_deep: bodies nest at most MAX_BODY_DEPTH lists
        (
            "a body nested too deep",
            "(create deep " + "(" * (MAX_BODY_DEPTH + 1) + "x" + ")" * (MAX_BODY_DEPTH + 1) + ")",
            ("deep", "levels", str(MAX_BODY_DEPTH)),
        ),
    ],
)
def test_the_protocol_states_the_text_rules_a_transaction_can_break(
    ctx: morphz.Context, rule: str, body: str, words: tuple[str, ...]
) -> None:
    """txlang/validate.py refuses, before reading any state, rules the protocol never states:
    a target, source, checkpoint or session listed twice in one operation, and a body whose
    lists nest deeper than MAX_BODY_DEPTH (the encoding shows bodies 4 lists deep). Each is a
    `validation` error a model following the protocol cannot foresee. Expected: the
    context-tx rules state them."""
    note = ctx.observe("user_message", "x")
    text = f'(context-tx (base-version 0) (reason "r") {body.format(ref=note.ref)})'
    with pytest.raises(ValidationError):
        ctx.commit(text)
    rules = protocol_entry("context-tx", "rules")
    assert any(w in rules for w in words), f"{rule}: not in the rules: {rules}"


# --- lifecycle sentences narrower or looser than the runtime --------------------------------------


def test_a_batch_of_arrivals_ticks_the_clock_once_and_the_protocol_says_so(
    ctx: morphz.Context,
) -> None:
    """The lifecycle entry: "The cognitive clock ticks when a user message, an external event
    or a real tool result arrives": a model counting an organizing window in arrivals expects
    three parallel tool results to advance it by three. The clock ticks once per appended
    batch (observe.py append: ``clock += 1`` for the batch's first event; the engine records
    one step's tool results as one batch, runtime/outcomes.py), so the retiring frame stays for
    three times as many results. Expected: the lifecycle entry says a batch that arrives
    together ticks once."""
    before = _clock(ctx)
    ctx.observe_batch(
        [
            Observation("tool_result", "one"),
            Observation("tool_result", "two"),
            Observation("user_message", "three"),
        ]
    )
    assert _clock(ctx) == before + 1
    lifecycle = protocol_entry("lifecycle")
    assert "once" in lifecycle.split("Supersede")[0] or "batch" in lifecycle, lifecycle


def test_the_supersede_fast_path_is_stated_for_a_successor_that_already_cites_old(
    ctx: morphz.Context,
) -> None:
    """The lifecycle entry states the supersede fast path as "when one transaction derives NEW
    citing OLD, declares (relate NEW supersedes OLD) and retires OLD". The runtime needs less
    (mind/supersede.py _supersede): OLD retired in this transaction, the supersedes edge added
    in it, and a successor citing OLD, whenever it came to cite it (an earlier derive, or a
    revise with (from ...)). A model that already has the summary frame is told to derive
    another one, a near-copy the capacity entry warns against. Expected: the sentence says NEW
    must cite OLD (derived, revised or already), not that it must be derived in the same
    transaction."""
    ctx.commit("(context-tx (base-version 0) (create old (x 1)))")
    ctx.commit("(context-tx (base-version 1) (derive summary (from old) (x summary)))")
    receipt = ctx.commit(
        '(context-tx (base-version 2) (reason "summarised") '
        "(relate summary supersedes old) (retire old))"
    )
    assert receipt.effects[-1].change == "retired at once: superseded by summary"
    lifecycle = protocol_entry("lifecycle")
    assert "derives NEW citing OLD" not in lifecycle, lifecycle


def test_the_depth_the_protocol_states_is_the_validators() -> None:
    assert f"at most {MAX_BODY_DEPTH} lists deep" in " ".join(PROTOCOL.split())
