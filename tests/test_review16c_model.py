"""Review 16c: the agent runtime against an adversarial or sloppy model (FunctionModel and the
scripted model). Each test failed against the code as it was reviewed, and states the behaviour
a user expects once fixed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.capacity import Budget
from morphz.errors import InputError
from morphz.interfaces.cli_agent import build_tools
from morphz.interfaces.render import activity_line
from morphz.runtime.config import Settings
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel, ScriptedModel
from morphz.runtime.report import pick_activations, request_stats

Answer = Callable[[ModelRequest], ModelResponse]


def _engine(ctx: morphz.Context, answer: Answer, workspace: Path, **config: Any) -> Engine:
    config.setdefault("exact_tokens", False)
    runtime = RuntimeConfig(workspace=workspace, **config)
    return Engine(ctx, FunctionModel(answer, "openai:m"), build_tools(Settings()), runtime)


def _kinds(ctx: morphz.Context, result: ActivationResult) -> list[str]:
    return [ctx.event(ref).kind for ref in result.events]


# --- 1. one step's results larger than the hard limit -----------------------------------------

# a 32k-window model (a local one): hard limit 28,000 tokens
SMALL = Budget(window=32_000, output_reserve=4_000, reserve=2_000)


def _source(index: int) -> str:
    """A source file of 20,000 characters: one read_file page."""
    lines = (f"def function_{index}_{j}(value):\n    return value * {j}\n" for j in range(400))
    return "".join(lines)[:20_000]


def test_one_step_reading_many_files_does_not_fail_the_activation(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A model asks for ten files in one reply (parallel tool calls, as real models do); each
    result is one read_file page (some 3,000 tokens), together more than the hard limit of a
    32k-window model. The activation fails at once: "even the minimum maintenance request needs
    34677 tokens of 28000: the current request, its dependencies and protected content do not
    fit: raise the budget ..., or unprotect observations (`unprotect`) or retire some from
    another session first" (nothing is protected, and nothing of another session is there). The
    model never saw a batch, so it could not retire what it read; yet the next activation,
    facing the very same inbox, is served a batch ("9 of 12 shown, 3 left out") and works. The
    previous step's results are the last fallback of the batch's minimum (engine.py
    _Run._minimum); when even they do not fit, the batch should show the root request and as
    many of them as fit (the rest left out, keeping their state), as DESIGN §10 says of any
    batch, and the activation goes on in maintenance."""
    for i in range(10):
        (workspace / f"module_{i}.py").write_text(_source(i), encoding="utf-8")
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if len(seen) == 1:
            calls = tuple(
                ToolCall(f"c{i}", "read_file", json.dumps({"path": f"module_{i}.py"}))
                for i in range(10)
            )
            return ModelResponse(None, calls)
        return ModelResponse("I read the ten modules.")

    engine = _engine(ctx, answer, workspace, budget=SMALL)
    result = asyncio.run(engine.run("Read module_0.py to module_9.py and summarise them."))
    assert result.state == "delivered", result.reason
    assert len(seen) == 2
    assert '(mode "maintenance")' in seen[1].encoding  # a batch: some results left out
    assert ctx.audit().ok


# --- 2. too-long refusals that no reply follows -----------------------------------------------

TOO_LONG = "prompt is too long: 100001 tokens > 100000 maximum"


def _refusing(count: list[int]) -> Answer:
    def answer(request: ModelRequest) -> ModelResponse:
        count[0] += 1
        raise ContextTooLongError(TOO_LONG)

    return answer


def _crowded(ctx: morphz.Context) -> None:
    """An inbox of some 80,000 tokens: each refusal (a 5% cut) leaves a batch that fits."""
    for i in range(60):
        ctx.observe("external_event", f"report {i}: " + "lorem ipsum dolor sit amet " * 200)


def test_an_activation_ended_by_refusals_says_the_provider_refused(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The provider refuses every request as too long (its numbers allow a 5% cut each time),
    and the step limit ends the activation first. The reason recorded and printed is only "the
    step limit (3) was reached", as for a model that loops on tool calls: nothing says that no
    request was ever answered, nor what the provider said. The refusals are kept only to be
    recorded with the next reply (runtime/refusals.py Refusals.answered, engine.py _Run.loop),
    so with no reply they vanish. The end's reason should say the requests were refused as too
    long, with the provider's words (as the floor's reason does: "the provider refused larger:
    ...")."""
    _crowded(ctx)
    count = [0]
    engine = _engine(ctx, _refusing(count), workspace, step_limit=3)
    result = asyncio.run(engine.run("hello"))
    assert count[0] == 3
    assert result.state == "failed"
    assert "too long" in (result.reason or ""), result.reason
    assert ctx.audit().ok


def test_refused_requests_that_no_reply_follows_are_counted_as_sent(
    ctx: morphz.Context, workspace: Path
) -> None:
    """docs/cli.md (context requests): "`requests` counts every request sent, the ones the
    provider refused as too long included; `refused` is how many of them it refused". Three
    requests were sent and refused, yet the report says 0 and 0: a refused request leaves no
    event of its own and is recorded only in the payload of the model_reply that follows it
    (decisions.md, ninth session), and here none follows. Every fact should be an event: record
    the unanswered refusals with the activation's end (its payload) when no reply follows, and
    have the report count them."""
    _crowded(ctx)
    count = [0]
    engine = _engine(ctx, _refusing(count), workspace, step_limit=3)
    result = asyncio.run(engine.run("hello"))
    assert count[0] == 3
    (stats,) = request_stats(ctx, pick_activations(ctx, result.activation))
    assert (stats.requests, stats.refused) == (3, 3), stats.to_dict()


# --- 3. a usage figure that is no whole number ------------------------------------------------


def test_a_usage_figure_that_is_no_whole_number_does_not_lose_the_reply(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A model (an adapter of one's own: the Model protocol is public) reports its input tokens
    as 1500.0, as a JSON number may come. The engine calibrates before it records the reply
    (engine.py _Run.loop: _calibrate, then _handle), and the calibration refuses the figure
    (InputError "a calibration's reported tokens must be a whole number"): the reply "hello
    there" is never recorded nor delivered, the activation ends "interrupted" by "an unexpected
    error", and the InputError escapes Engine.run. A usage report only feeds calibration: one
    that cannot be used should teach nothing (Usage checked, or _calibrate skipping it), and the
    reply be recorded and delivered either way."""
    usage = Usage(1500.0, 3)  # type: ignore[arg-type]  # what a sloppy adapter passes
    engine = _engine(ctx, lambda request: ModelResponse("hello there", (), usage), workspace)
    result = asyncio.run(engine.run("hi"))
    assert (result.state, result.reply) == ("delivered", "hello there"), result.reason
    assert "model_reply" in _kinds(ctx, result)
    assert ctx.audit().ok


# --- 4. text written beside tool calls --------------------------------------------------------


def test_the_text_a_model_writes_beside_its_tool_calls_is_shown(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Real models often answer and call a tool in the same reply ("The cause is the expired
    certificate; I will note it." + context_tx), then close with a short "Done.". The text of a
    reply with tool calls is kept only in its model_reply event: `morphz chat` shows that event
    as "@e3 calls list_files({})" (render.py activity_line, the tool_calls branch, drops
    e.text), `exec` prints only the last reply, and the agent's next request does not carry it
    either, so the person never reads the answer and the agent cannot repeat it. The line
    chat shows for such a reply should carry its text (a preview, as for other events)."""
    calls = (ToolCall("c1", "list_files", "{}"),)
    said = "The cause is the expired certificate"
    replies = [ModelResponse(f"{said}; I will look at the folder.", calls), ModelResponse("Done.")]
    engine = _engine(ctx, lambda request: replies.pop(0), workspace)
    result = asyncio.run(engine.run("Why does the deployment fail?"))
    assert result.state == "delivered", result.reason
    (first,) = [
        ctx.event(ref)
        for ref in result.events
        if ctx.event(ref).kind == "model_reply" and (ctx.event(ref).payload or {})["tool_calls"]
    ]
    assert said in activity_line(first)


# --- 5. the scripted model's check of a script ------------------------------------------------


@pytest.mark.parametrize(
    "step",
    [
        {"reply": "done", "tool_call": [{"name": "exec", "arguments": {"command": "ls"}}]},
        {"tool_calls": [{"name": "write_file", "args": {"path": "a.txt", "content": "x"}}]},
    ],
    ids=["step-key", "call-key"],
)
def test_a_script_with_a_misspelt_key_is_refused_when_read(step: dict[str, Any]) -> None:
    """docs/cli.md: "The whole script is checked when it is read, before anything is written".
    A misspelt key passes that check and is ignored: a step {"reply", "tool_call"} replies and
    never makes the call, a call {"name", "args"} calls write_file with no arguments (scripted.py
    ScriptedModel.__init__ and _check_call look only for the keys they know). The check should
    refuse a key it does not know (InputError naming it), as the configuration does."""
    with pytest.raises(InputError):
        ScriptedModel([step])
