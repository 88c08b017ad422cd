"""Review 9b, the contract: the protocol region (src/morphz/encoding/protocol.py) read as the
only thing a model knows about maintaining its context, checked against what commits, the
engine and the error texts really do. Each test fails on the code it was written against; its
docstring states the expected behaviour."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import morphz
from agents import make_engine as _engine
from morphz.capacity import Budget
from morphz.encoding.protocol import PROTOCOL
from morphz.errors import BudgetError, ParseError, ValidationError
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang import SList, Str, read_one

_MODE = re.compile(r'\(scheduling[^\n]*?\(mode "(\w+)"\)')
_LEVEL = re.compile(r"\(pressure \(level (\w+)\)")


def _protocol_entry(*path: str) -> str:
    """The text of one entry of the protocol region, e.g. ("context-tx", "operations",
    "revise") or ("capacity",): its strings joined."""
    node = read_one(PROTOCOL)
    for name in path:
        assert isinstance(node, SList)
        node = next(i for i in node.items if isinstance(i, SList) and i.head == name)
    assert isinstance(node, SList)
    return " ".join(i.value for i in node.items if isinstance(i, Str))


def _history(ctx: morphz.Context, count: int, words: int = 60) -> None:
    for i in range(count):
        ctx.observe("external_event", f"log line {i}: " + "status ok " * words, session="feed")


# --- the protocol names a `budget` refusal that no commit ever gives ----------------------------


def test_a_transaction_that_makes_the_context_unservable_is_refused_with_budget(
    ctx: morphz.Context,
) -> None:
    """The protocol's receipts entry (and DESIGN §5) lists `budget` among the refusals of a
    transaction, and BudgetError exists, but nothing raises it: a context_tx whose frame alone
    is larger than the hard limit commits, and from then on every activation of the context
    fails with "even the minimum maintenance request needs N tokens" (the mind is never cut),
    so the agent cannot maintain its way out. Expected: a transaction that would put the
    encoding over the hard limit is refused with a `budget` error and changes nothing."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    assert ctx.encode().pressure.level == "normal"
    huge = "x" * 40_000  # about 10,000 tokens, over the 9,000 hard limit on its own
    with pytest.raises(BudgetError):
        ctx.commit(f'(context-tx (base-version 0) (create notes "{huge}"))')
    assert ctx.version == 0


# --- maintenance: when it starts, when it ends, and what the model is told -----------------------


def test_maintenance_after_a_too_long_refusal_tells_the_model_what_to_reach(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The protocol says maintenance happens "at critical pressure". The engine also enters it
    when the provider refuses a request as too long, and stays in it until the request is
    under the size the provider refused. The request the model then gets offers only
    context_tx and recall, says (mode "maintenance") and (pressure (level normal) ...), and
    nowhere states the refusal or a figure to get under: a model following the protocol has
    no reason to maintain and no target. Expected: a maintenance request tells the model why
    it is in maintenance (the kernel names the refusal or states the ceiling, or its pressure
    level is not normal)."""
    _history(ctx, 40)
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            raise ContextTooLongError(
                "This model's maximum context length is 3000 tokens, however you requested "
                "9000 tokens"
            )
        return ModelResponse("done", ())

    result = asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi", session="ops"))
    assert result.state == "delivered", result.reason
    second = requests[1].encoding
    assert {t.name for t in requests[1].tools} == {"context_tx", "recall"}
    assert _MODE.findall(second)[-1] == "maintenance"
    kernel = second[second.rfind("\n(kernel") :]
    told = "refus" in kernel or "ceiling" in kernel or _LEVEL.findall(kernel)[-1] != "normal"
    assert told, "in maintenance, yet the kernel reads normal pressure and names no target"


def test_maintenance_ends_below_warning_and_the_agent_is_told_so(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The engine keeps an activation in maintenance until pressure is back to normal
    (docs/decisions.md, "Maintenance"), but the protocol says only context_tx and recall are
    offered "until a commit brings pressure down", and a withdrawn tool answers "until pressure
    goes down". A model whose commit took pressure from critical to warning has brought it
    down, and is still refused. Expected: the protocol's capacity entry and the withdrawn
    tool's answer both say maintenance lasts until pressure is back to normal. (Review 13: the
    rule is now below warning, which a small window's fixed part cannot keep out of reach.)"""
    capacity = " ".join(_protocol_entry("capacity").split())
    _history(ctx, 25)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=3_000))
    assert ctx.encode().pressure.level == "critical"
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            return ModelResponse(None, (ToolCall("c1", "list_files", "{}"),))
        return ModelResponse("done", ())

    result = asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi", session="ops"))
    assert result.state == "delivered", result.reason
    answers = [e.text or "" for e in ctx.events() if e.kind == "tool_result"]
    assert len(answers) == 1 and "withdrawn during maintenance" in answers[0]
    assert "below warning" in answers[0], answers[0]
    assert "bring pressure below warning" in capacity, capacity


# --- error texts that do not say what to do next --------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "(fact (place paris))",
        "(todo (create the release notes))",
        '(text "hi") (from "alice")',
    ],
)
def test_a_data_list_headed_by_a_reserved_word_is_refused_with_a_way_to_write_it(
    ctx: morphz.Context, body: str
) -> None:
    """A body list headed by an operation name (place, create, restore, protect, checkpoint...)
    or `from` is refused even when it is plain data (docs/decisions.md, "Operation names
    inside bodies"). The protocol only says "Never nest an operation inside a body", and the
    error says the operation goes "at the top level of the context-tx" (or that (from ...) is
    only allowed after the id of derive or revise): a model that wrote data learns neither that
    the word is reserved nor how to write it. Expected: the refusal says how to keep it as data
    (quote the word, e.g. (fact (place "paris")) or ("place" paris), or use another head)."""
    with pytest.raises((ValidationError, ParseError)) as refused:
        ctx.commit(f"(context-tx (base-version 0) (create note {body}))")
    message = refused.value.message
    assert "data" in message or "quote" in message or '"' in message, message


@pytest.mark.parametrize(
    "text",
    [
        "```lisp\n(context-tx (base-version 0) (create plan (step 1)))\n```",
        "Here is my transaction: (context-tx (base-version 0) (create plan (step 1)))",
        "context-tx (base-version 0) (create plan (step 1))",
    ],
)
def test_text_around_the_transaction_is_what_the_parse_error_points_at(
    ctx: morphz.Context, text: str
) -> None:
    """A transaction wrapped in a markdown code fence or preceded by a sentence (what models
    commonly send), or written without its outer parentheses, is refused with "stray text after
    the first S-expression" pointing at the (context-tx ...) itself (line 2 column 1, or the
    column of the first list): the model is told its transaction is the stray part. Expected:
    the error points at the first thing that is not the transaction (line 1, column 1) and
    says what is expected: only the (context-tx ...) form."""
    with pytest.raises(ParseError) as refused:
        ctx.commit(text)
    err = refused.value
    assert (err.line, err.column) == (1, 1), str(err)
    assert "(context-tx" in err.message, err.message


# --- rules the protocol does not state ----------------------------------------------------------


def test_the_protocol_says_revising_a_retired_frame_makes_it_active(ctx: morphz.Context) -> None:
    """revise of a retired frame brings it back to active (docs/decisions.md), which costs the
    frame's tokens again and puts it back in view; the protocol's revise entry only says it
    "cancels a pending retirement". A model that corrects a retired frame so that recall finds
    the right text finds it back in its mind and must retire it again (with a new window).
    Expected: the revise entry states that a retired frame becomes active again."""
    ctx.commit("(context-tx (base-version 0) (create old (x 1)))")
    ctx.set_window(0)
    ctx.commit('(context-tx (base-version 1) (reason "done") (retire old))')
    ctx.commit("(context-tx (base-version 2) (revise old (x 2)))")
    frame = ctx.mind().frame("old")
    assert frame is not None and frame.lifecycle == "active"  # what the code does
    revise = " ".join(_protocol_entry("context-tx", "operations", "revise").split())
    assert "retired" in revise, revise


def test_relate_says_both_ends_are_frames(ctx: morphz.Context) -> None:
    """The protocol gives (relate S RELATION O) without saying S and O must be frames; derive
    and the lifecycle operations take @e refs, so a model relating a frame to the observation
    it answers, (relate plan answers @e1), is refused with a parse error whose list of id rules
    ends "event refs look like @e42" — which is what it wrote. Expected: the protocol's relate
    entry says both ends are frames, and the refusal says so and points to (from @e1) for
    citing an observation."""
    ctx.observe("user_message", "what is the plan?")
    ctx.commit("(context-tx (base-version 0) (create plan (step 1)))")
    relate = _protocol_entry("context-tx", "operations", "relate")
    with pytest.raises(ParseError) as refused:
        ctx.commit("(context-tx (base-version 1) (relate plan answers @e1))")
    assert "frame" in relate, relate
    assert "from" in refused.value.message, refused.value.message


def test_a_retired_session_stays_restorable_from_the_encoding(ctx: morphz.Context) -> None:
    """restore-session takes a session id, but once a session is retired the session directory
    only counts it, (excluded (retired 1)), so a model cannot find the id it would restore
    (once that session's observations are retired, nothing in the encoding names it).
    Expected: the encoding names retired sessions (in the excluded note, for instance)."""
    ctx.observe("user_message", "from the other session", session="other")
    ctx.observe("user_message", "here")
    ctx.commit('(context-tx (base-version 0) (reason "done") (retire @e1) (retire-session other))')
    text = ctx.encode().text
    directory = text[text.find("\n(session-directory") : text.find("\n(kernel")]
    assert "(retired 1 (latest other))" in directory  # named: restore-session can use it
    assert "other" in directory, directory


def test_the_protocol_says_receipts_arrive_in_the_inbox(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Every context_tx call's receipt (or refusal) arrives as a `tx_receipt` observation that
    stays in the inbox, costing tokens, until the model retires it. The protocol's inbox
    description lists "user messages, tool results, external events, recall results,
    approvals", and its receipts entry says a transaction "returns a receipt", so a model
    following it does not expect receipts to pile up in its inbox or to need retiring.
    Expected: the protocol says receipts arrive in the inbox as observations (tx_receipt)."""
    calls = iter(
        [
            ModelResponse(
                None,
                (
                    ToolCall(
                        "c1",
                        "context_tx",
                        '{"tx": "(context-tx (base-version 0) (create plan (step 1)))"}',
                    ),
                ),
            ),
            ModelResponse("done", ()),
        ]
    )
    result = asyncio.run(
        _engine(ctx, FunctionModel(lambda _: next(calls)), workspace).run("hi", session="ops")
    )
    assert result.state == "delivered", result.reason
    assert "(kind tx_receipt)" in ctx.encode(session="ops").text  # what the model sees
    regions = " ".join(_protocol_entry("regions").split())
    receipts = " ".join(_protocol_entry("receipts").split())
    assert "receipt" in regions or "inbox" in receipts, (regions, receipts)


def test_the_store_sums_frame_tokens_as_the_mind_layer_counts_them(ctx: morphz.Context) -> None:
    """The budget check's SQL sum of the frames in view equals mind.lifecycle.frame_tokens
    summed over them (sources or none, retired frames left out)."""
    from morphz.mind.lifecycle import frame_tokens

    ctx.observe("user_message", "évidence ✓")
    ctx.commit(
        '(context-tx (base-version 0) (create a (x 1)) (derive b (from @e1 a) (y "é✓"))'
        " (create c (z 3)))"
    )
    ctx.set_window(0)
    ctx.commit('(context-tx (base-version 1) (reason "gone") (retire c))')
    with ctx.db.store.read(ctx.id) as r:
        summed = r.active.frame_tokens()
        assert summed == sum(frame_tokens(f) for f in r.active.frames())
    assert summed > 0


def test_over_the_budget_a_transaction_that_frees_tokens_still_commits(
    ctx: morphz.Context,
) -> None:
    """The budget refusal only stops transactions that add to the encoding: once frames fill
    the budget (the budget lowered under them), retiring or shortening them still commits."""
    big = "x" * 8_000
    ctx.commit(f'(context-tx (base-version 0) (create notes "{big}") (create more "{big}"))')
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=5_000, reserve=200))
    with pytest.raises(BudgetError) as refused:
        ctx.commit("(context-tx (base-version 1) (create extra (x 1)))")
    assert "critical" in refused.value.message and refused.value.details["critical"] == 4_800
    assert ctx.version == 1
    ctx.commit("(context-tx (base-version 1) (revise notes (short)))")
    assert ctx.version == 2


def test_in_maintenance_the_kernel_authority_lists_only_the_tools_on_offer(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The kernel's authority states what the agent may call: in maintenance the external
    tools are withdrawn, so it lists only context_tx and recall (it used to list every tool as
    allowed while they were refused)."""
    _history(ctx, 25)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=3_000))
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("done", ())

    asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi", session="ops"))
    first = requests[0].encoding
    assert _MODE.findall(first)[-1] == "maintenance"
    authority = re.findall(r"\(authority(.*)\)\n", first)[-1]
    assert re.findall(r"\((\S+) \w+\)", authority) == ["context_tx", "recall"], authority
    work = ctx.encode(_engine(ctx, FunctionModel(model), workspace).options("ops")).text
    assert "(exec " in re.findall(r"\(authority(.*)\)\n", work)[-1]  # work mode: all of them
