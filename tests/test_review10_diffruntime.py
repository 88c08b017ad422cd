"""Review 10 (the session's runtime diff): begin_activation, in_thread/settle, the signal
handling of exec/chat, agent_reply, the clock of refused tool calls, null arguments, cut replies.
Each test fails against the code as it was reviewed; its docstring states the behaviour expected."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import make_engine, run_steps
from morphz import Observation
from morphz.interfaces.stopping import stopped_like_ctrl_c
from morphz.runtime.agent_tools import agent_tools
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import ToolContext, ToolError, ToolOutcome, run_guarded

# --- the clock: a refused call still ticks when another call of its step ran -----------------


def test_a_refused_call_beside_a_recall_does_not_tick_the_clock(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The session made tool calls that never ran (unknown tool, withdrawn in maintenance, not
    approved, malformed) arrive without a clock tick (decisions.md: "their batch does not tick the
    clock"; the protocol: the clock ticks when a real tool result arrives). engine.py
    _record_outcomes decides the batch's tick with ``any(outcome.ran for _, outcome in
    outcomes)``, over every outcome of the step, including a recall (delivered on its own as a
    recall_result, which never ticks) or a context_tx (a tx_receipt, which never ticks). So a step
    of one recall and one unknown tool ticks the clock: the only clock-kind result in the batch is
    the refusal of a call that never ran. The commonest case is maintenance: the model calls
    context_tx and a withdrawn external tool in one reply, and the refusal ticks the clock
    (retiring frames move toward finalization while no work happened). Expected: the tick is
    decided by the results that are real tool results (ran, and of a clock kind): here none, so
    the clock stays where it was."""
    calls = (
        ToolCall("c1", "recall", '{"op": "search", "query": "hi"}'),
        ToolCall("c2", "browse_web", '{"url": "https://example.org"}'),
    )
    clocks = run_steps(ctx, workspace, calls)
    assert clocks[1] == clocks[0], (
        f"the clock went from {clocks[0]} to {clocks[1]}: the only tool_result of the step is "
        "the refusal of a call to a tool that does not exist"
    )


def test_a_call_refused_by_its_schema_does_not_tick_the_clock(
    ctx: morphz.Context, workspace: Path
) -> None:
    """decisions.md lists "malformed arguments" among the calls refused before their tool ran,
    whose results do not tick. Arguments that are not JSON are caught in _run_tool (ran=False),
    but arguments that are JSON and break the tool's schema (a wrong type, a missing required
    argument) are refused by parse_args inside run_guarded, so the ToolError comes back through
    the second except of _run_tool with ran=True and the refusal ticks the clock although
    read_file never ran. Expected: a call refused by its argument check, before the tool's work
    starts, arrives without a tick, like a call whose arguments are not JSON."""
    calls = (ToolCall("c1", "read_file", '{"path": 5}'),)
    clocks = run_steps(ctx, workspace, calls)
    refused = [e for e in ctx.events() if e.kind == "tool_result"]
    assert refused and "must be a string" in (refused[0].text or "")
    assert clocks[1] == clocks[0], (
        f"the clock went from {clocks[0]} to {clocks[1]} for a call refused by its schema"
    )


def test_a_batch_tick_is_not_shown_on_an_observation_that_never_ticks(
    ctx: morphz.Context,
) -> None:
    """The session moved a batch's clock tick to its first event (observe.append: ``tick and
    index == 0``), whatever that event's kind. The review-10 observe test that motivated the
    move objected that a recall_result coming last "carries the tick (its event payload says
    {"tick": true}) although recall results never tick"; now a recall_result or tx_receipt
    coming first carries it, and `morphz context events` shows it as "(ticked)" (render.py).
    The engine's batches often start that way: a step that calls context_tx then exec appends
    [tx_receipt, tool_result]. Expected: the tick's marker is on the batch's first observation
    of a clock kind (here the tool_result), so no observation of a kind that never ticks is
    recorded as having ticked; every observation still shows the batch's one arrival tick."""
    events = ctx.observe_batch(
        [Observation("tx_receipt", '{"ok": true}'), Observation("tool_result", "listing")]
    )
    assert ctx.status().clock == 1
    assert (events[0].payload or {}).get("tick") is None, (
        f"{events[0].kind} {events[0].ref} is recorded as the event that ticked the clock"
    )
    assert (events[1].payload or {}).get("tick") is True


# --- null arguments: recall under strict function calling -------------------------------------


def test_recall_takes_null_for_the_parameters_of_other_ops(ctx: morphz.Context, ws: Path) -> None:
    """The session made null arguments take their defaults because strict function calling
    "sends every optional argument" as null (decisions.md; parse_args). recall's schema holds
    the parameters of all three ops, so such a model sends e.g. {"op": "search", "query": "x",
    "ref": null, "offset": null, "frame_id": null, ...}. _recall checks for parameters the op
    does not take on the raw arguments, nulls included, before it drops the nulls, so every
    recall call of such a model is refused ("recall op=search does not take ['depth', ...]").
    Expected: a null parameter counts as not given, as everywhere else: the search runs."""
    recall = next(t for t in agent_tools() if t.name == "recall")
    ctx.observe("user_message", "the release code is in the runbook")
    # the tool's result names its activation, which must be one of the session (fix 16f)
    tc = ToolContext(ctx, "session-1", ctx.start_activation("session-1"), ws, ())
    args: dict[str, Any] = dict.fromkeys(recall.schema.parameters["properties"])
    args |= {"op": "search", "query": "runbook"}
    try:
        outcome: ToolOutcome | ToolError = asyncio.run(run_guarded(recall, args, tc))
    except ToolError as exc:
        outcome = exc
    assert isinstance(outcome, ToolOutcome), str(outcome)
    assert outcome.delivered is not None


# --- signals: nohup ----------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_an_ignored_sighup_stays_ignored_while_the_agent_runs() -> None:
    """`nohup morphz exec ...` (or a shell that started it with SIGHUP ignored) says: closing the
    terminal must not stop this run. stopped_like_ctrl_c installs _as_sigint for SIGTERM and
    SIGHUP whatever their disposition was, so under nohup a closed terminal now interrupts the
    activation and kills the exec tool's command, the opposite of what the user asked for (and
    of Python itself, which leaves SIGINT alone when it starts ignored). Expected: a signal that
    is ignored when the agent starts stays ignored (only signals at their default disposition
    are turned into Ctrl-C)."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stopped_like_ctrl_c():
            during = signal.getsignal(signal.SIGHUP)
        assert during == signal.SIG_IGN, f"SIGHUP was ignored (nohup); morphz set it to {during}"
    finally:
        signal.signal(signal.SIGHUP, previous)


# --- a reply cut at the output limit -----------------------------------------------------------


def test_an_empty_reply_cut_at_the_output_limit_says_so(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The session records a reply cut at the output limit (ModelResponse.cut): a delivered one
    says "the reply was cut at the model's output limit". A reasoning model that spends the
    whole output budget before writing (finish_reason "length", empty content: common with a
    small max_output_tokens) returns nothing, and the activation fails with "the model returned
    neither a reply (empty or only blanks) nor tool calls": the one fact that explains it, and
    its remedy (a larger max_output_tokens), is in the model_reply payload only. Expected: the
    failure reason says the output limit cut the reply."""

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse("", (), cut=True)

    result = asyncio.run(make_engine(ctx, FunctionModel(model), workspace).run("hi"))
    assert result.state == "failed"
    assert "output limit" in (result.reason or ""), result.reason


# --- docs ---------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_name_agent_reply_where_they_list_kinds_and_what_is_indexed() -> None:
    """The session added the observation kind agent_reply (never ticks, not indexed for recall;
    docs/cli.md says both). Two documents still state the old sets: README's `ctx.observe`
    entry lists the kinds as user_message, tool_result, external_event, recall_result,
    approval_result and tx_receipt (a reader concludes agent_reply is refused), and
    decisions.md's "What is indexed" says "Observations except `recall_result`" are indexed,
    while recall/documents.py leaves agent_reply out too (searching for it is refused).
    Expected: both name agent_reply (README among the kinds that do not tick; decisions.md among
    the observations that are not indexed)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    kinds = readme[readme.find("`ctx.observe(kind") :][:400]
    assert "agent_reply" in kinds, kinds
    decisions = " ".join((ROOT / "docs" / "decisions.md").read_text(encoding="utf-8").split())
    indexed = decisions[decisions.find("**What is indexed.**") :][:300]
    assert "agent_reply" in indexed, indexed
