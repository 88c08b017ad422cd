"""The choices made fixing review 16c (tests/test_review16c_model.py): what a batch shows when the
previous step's results do not all fit, what the minimum's failure advises, and how an activation
that ended on too-long refusals records them."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

import morphz
from agents import make_engine as _engine
from morphz import events as ev
from morphz.capacity import Budget
from morphz.errors import InputError
from morphz.interfaces.render import activity_line
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel, ScriptedModel
from morphz.runtime.report import RequestStats, pick_activations, request_stats

_OBSERVATION = re.compile(r"^ \(observation @e(\d+) ", re.M)
_BATCH = re.compile(r'\(batch "(\d+) of (\d+) shown, (\d+) left out"\)')
SMALL = Budget(window=32_000, output_reserve=4_000, reserve=2_000)  # hard limit 28,000


def _shown(request: ModelRequest) -> list[int]:
    return [int(seq) for seq in _OBSERVATION.findall(request.encoding)]


def _calls(arguments: list[str]) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"c{i}", "read_file", a) for i, a in enumerate(arguments))


def _module(index: int) -> str:
    lines = (f"def function_{index}_{j}(value):\n    return value * {j}\n" for j in range(400))
    return "".join(lines)[:20_000]


def _first_batch(ctx: morphz.Context, workspace: Path, logs: int) -> tuple[list[int], int]:
    """After ``logs`` older log lines, one step reads ten files, more than the hard limit
    together: the seqs of the results the batch that follows shows, and how many log lines."""
    for i in range(logs):
        ctx.observe("external_event", _module(100 + i))
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if len(seen) == 1:
            return ModelResponse(
                None, _calls([json.dumps({"path": f"module_{i}.py"}) for i in range(10)])
            )
        return ModelResponse("read")

    model = FunctionModel(answer, "openai:m")
    engine = _engine(ctx, model, workspace, budget=SMALL, exact_tokens=False)
    result = asyncio.run(engine.run("Read the ten modules."))
    assert result.state == "delivered", result.reason
    assert ctx.audit().ok
    fact = _BATCH.search(seen[1].encoding)
    assert fact is not None and int(fact.group(3)) > 0
    shown = set(_shown(seen[1]))
    results = [e.seq for e in ctx.events() if e.kind == "tool_result"]
    assert len(results) == 10
    logged = [e.seq for e in ctx.events() if e.kind == "external_event"]
    in_view = [seq for seq in results if seq in shown]
    assert in_view == results[: len(in_view)], "the first results are shown"
    return in_view, len(shown & set(logged))


def test_a_batch_shows_the_previous_steps_results_before_older_observations(
    db: morphz.Database, workspace: Path
) -> None:
    """When one step's results are more than the hard limit together, the batch's minimum is the
    root; the step's results are offered first, in their order, so the batch shows the first
    ones that fit (the others keep their state), as many as with no older observation at all,
    and older ones only in the room left after them (oldest first, the ten log lines' previews
    would have taken the room of two results)."""
    for i in range(10):
        (workspace / f"module_{i}.py").write_text(_module(i), encoding="utf-8")
    alone, none = _first_batch(db.context("alone", create=True), workspace, 0)
    crowded, logs = _first_batch(db.context("crowded", create=True), workspace, 10)
    assert none == 0 and 0 < len(alone) < 10
    assert len(crowded) == len(alone) and 0 < logs < 10


def test_a_minimum_that_does_not_fit_advises_only_what_applies(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The failure of a minimum (the root and the protected observations) names unprotecting
    only when something beside the root is protected; with nothing protected it says the
    current request does not fit, and neither unprotecting nor another session."""
    budget = Budget(window=32_000, output_reserve=2_000, configured=4_000, reserve=200)
    model = FunctionModel(lambda request: ModelResponse("done"), "openai:m")
    prompt = "please read this " * 2_000  # some 6,000 tokens: over the limit alone
    result = asyncio.run(_engine(ctx, model, workspace, budget=budget).run(prompt))
    assert result.state == "failed"
    reason = result.reason or ""
    assert "the current request does not fit" in reason, reason
    assert "unprotect" not in reason and "another session" not in reason, reason
    assert "raise the budget" in reason and "shorter request" in reason, reason

    protected = [ctx.observe("external_event", "keep " * 1_500) for _ in range(2)]
    refs = " ".join(e.ref for e in protected)
    ctx.commit(f"(context-tx (base-version {ctx.version}) (protect {refs}))")
    result = asyncio.run(_engine(ctx, model, workspace, budget=budget).run("hi"))
    assert result.state == "failed"
    reason = result.reason or ""
    assert "the current request and 2 protected observations do not fit" in reason, reason
    assert "unprotect" in reason, reason


TOO_LONG = "prompt is too long: 100001 tokens > 100000 maximum"


def _crowd(ctx: morphz.Context) -> None:
    for i in range(60):
        ctx.observe("external_event", f"report {i}: " + "lorem ipsum dolor sit amet " * 200)


def test_refusals_no_reply_followed_are_recorded_with_the_end(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The end's payload holds them as a reply's would (``unanswered``: ``refused``,
    ``refused_sent``, ``ceiling``, ``said``); the reason adds them, in the provider's words,
    to why the activation ended; the report counts them; the log replays clean."""

    def refuse(request: ModelRequest) -> ModelResponse:
        raise ContextTooLongError(TOO_LONG)

    _crowd(ctx)
    engine = _engine(ctx, FunctionModel(refuse, "openai:m"), workspace, step_limit=2)
    result = asyncio.run(engine.run("hello"))
    assert result.reason == (
        f"the step limit (2) was reached; the provider refused the last 2 requests as too long: "
        f"{TOO_LONG}"
    )
    end = ctx.event(ctx.activation(result.activation).finished_seq)  # type: ignore[union-attr]
    assert end.kind == ev.ACTIVATION_FINISHED
    unanswered = (end.payload or {})["unanswered"]
    assert unanswered["refused"] == 2 and len(unanswered["refused_sent"]) == 2
    assert unanswered["said"] == TOO_LONG and isinstance(unanswered["ceiling"], int)
    (stats,) = request_stats(ctx, pick_activations(ctx, result.activation))
    assert (stats.requests, stats.refused, stats.measured) == (2, 2, 1)
    assert ctx.audit().ok


def test_a_refusal_a_reply_answers_is_not_recorded_again_with_the_end(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A refusal followed by a reply is recorded with the reply only: the end has no
    ``unanswered`` and the reason says nothing of it."""
    calls = [0]

    def once(request: ModelRequest) -> ModelResponse:
        calls[0] += 1
        if calls[0] == 1:
            raise ContextTooLongError(TOO_LONG)
        return ModelResponse("done")

    _crowd(ctx)
    result = asyncio.run(_engine(ctx, FunctionModel(once, "openai:m"), workspace).run("hi"))
    assert (result.state, result.reason) == ("delivered", None)
    end = ctx.event(ctx.activation(result.activation).finished_seq)  # type: ignore[union-attr]
    assert "unanswered" not in (end.payload or {})
    (stats,) = request_stats(ctx, pick_activations(ctx, result.activation))
    assert (stats.requests, stats.refused) == (2, 1)


def test_an_end_recorded_before_unanswered_was_reads_as_before() -> None:
    """An end without ``unanswered`` (older stores, or no refusal) counts nothing; a malformed
    one is ignored."""
    stats = RequestStats("a", "s", "failed")
    for value in (None, "3", [1]):
        stats.add_unanswered(value)
    assert (stats.requests, stats.refused) == (0, 0)
    stats.add_unanswered({"refused": 2})  # the count only, as replies once recorded it
    assert (stats.requests, stats.refused) == (2, 2)


def test_an_end_refuses_what_the_log_cannot_hold(ctx: morphz.Context) -> None:
    """``Context.finish_activation``'s ``unanswered`` is written into the log: strict JSON."""
    ctx.observe("user_message", "hi")
    activation = ctx.start_activation("default", "@e1")
    for bad in ({"ceiling": float("nan")}, ["refused"], {1: object()}):
        with pytest.raises(InputError, match="unanswered must be a JSON object"):
            ctx.finish_activation(activation, "failed", "x", unanswered=bad)  # type: ignore[arg-type]
    ctx.finish_activation(activation, "failed", "x", unanswered={"refused": 1})
    assert ctx.audit().ok


@pytest.mark.parametrize("figure", [1500.0, None, "1500", -3, True])
def test_a_usage_figure_that_is_no_whole_number_is_recorded_unknown(
    ctx: morphz.Context, workspace: Path, figure: object
) -> None:
    """The reply is recorded and delivered; the figure is recorded as null (the others as
    given), teaches the calibration nothing, and the report counts no input tokens for it."""
    usage = Usage(figure, 3, 7)  # type: ignore[arg-type]  # what a sloppy adapter passes
    model = FunctionModel(lambda request: ModelResponse("hello there", (), usage), "openai:m")
    engine = _engine(ctx, model, workspace, exact_tokens=False)
    result = asyncio.run(engine.run("hi"))
    assert (result.state, result.reply) == ("delivered", "hello there"), result.reason
    (reply,) = [e for e in ctx.events() if e.kind == ev.MODEL_REPLY]
    assert (reply.payload or {})["usage"] == {"input": None, "output": 3, "cached": 7}
    assert engine.calibration.samples == 0
    (stats,) = request_stats(ctx, pick_activations(ctx, result.activation))
    assert (stats.input_tokens, stats.cached_tokens) == (None, 7)


@pytest.mark.parametrize("text", [None, "", " \n "])
def test_a_reply_of_calls_alone_shows_the_calls_alone(
    ctx: morphz.Context, workspace: Path, text: str | None
) -> None:
    """No text (or only blanks) beside the calls: the activity line names the calls only."""
    replies = [ModelResponse(text, (ToolCall("c1", "list_files", "{}"),)), ModelResponse("Done.")]
    model = FunctionModel(lambda request: replies.pop(0), "openai:m")
    result = asyncio.run(_engine(ctx, model, workspace, exact_tokens=False).run("look"))
    assert result.state == "delivered", result.reason
    first = next(e for e in ctx.events() if e.kind == ev.MODEL_REPLY)
    assert activity_line(first) == f"{first.ref} calls list_files({{}})"


def test_a_scripts_unknown_key_is_named_with_the_keys_allowed() -> None:
    """The error names the key and the keys a step (or a call) may have; a step may hold a
    reply and tool calls together."""
    with pytest.raises(InputError, match=r"unknown key 'tool_call'.*'reply', 'tool_calls'"):
        ScriptedModel([{"reply": "done"}, {"reply": "x", "tool_call": []}])
    with pytest.raises(InputError, match=r"step 0: a tool call has an unknown key 'args'"):
        ScriptedModel([{"tool_calls": [{"name": "exec", "args": {}}]}])
    ScriptedModel([{"reply": "looking", "tool_calls": [{"name": "list_files", "arguments": {}}]}])
