"""The runtime engine driven by an adversarial or buggy model (FunctionModel; review 9b): each
test failed against the code as it was, and states the behaviour expected once fixed."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import cancel_while_starting
from morphz.interfaces.cli_agent import build_tools
from morphz.interfaces.render import activity_line
from morphz.runtime.config import Settings
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import Policy

_VERSION = re.compile(r"\(mind-version (\d+)\)")


def _engine(
    ctx: morphz.Context,
    replies: list[ModelResponse | Callable[[ModelRequest], ModelResponse]],
    workspace: Path,
    policies: dict[str, Policy] | None = None,
    **config: Any,
) -> Engine:
    """An engine whose model answers with ``replies`` in order (a callable is given the
    request), then "done"."""
    queue = list(replies)

    def model(request: ModelRequest) -> ModelResponse:
        if not queue:
            return ModelResponse("done")
        step = queue.pop(0)
        return step(request) if callable(step) else step

    registry = build_tools(Settings())
    for name, policy in (policies or {}).items():
        registry.set_policy(name, policy)
    return Engine(ctx, FunctionModel(model), registry, RuntimeConfig(workspace=workspace, **config))


def _call(name: str, arguments: dict[str, Any] | str, call_id: str = "c1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(call_id, name, text)


def _recorded(ctx: morphz.Context, result: ActivationResult) -> list[morphz.Event]:
    return [ctx.event(ref) for ref in result.events]


# --- 1. model-supplied arguments that raise untyped errors -------------------------------------


def test_deeply_nested_tool_arguments_are_a_tool_error_not_a_crash(
    ctx: morphz.Context, workspace: Path
) -> None:
    """DESIGN §13: broken tool arguments yield an observation the agent can act on, never a
    crash. Arguments nested deeper than the JSON decoder recurses ("[[[[...") must be a tool
    error like any other invalid JSON, and the other calls of the same reply keep their
    results. Today json.loads raises RecursionError (not JSONDecodeError), which escapes
    Engine.run: the activation is recorded interrupted "the process stopped mid-activation",
    and the context_tx call of the same reply committed with no tx_receipt ever recorded."""

    def reply(request: ModelRequest) -> ModelResponse:
        version = _VERSION.findall(request.encoding)[-1]
        tx = f"(context-tx (base-version {version}) (create plan/a (x 1)))"
        return ModelResponse(
            None,
            (_call("context_tx", {"tx": tx}, "tx"), _call("read_file", "[" * 100_000, "deep")),
        )

    engine = _engine(ctx, [reply], workspace)
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    kinds = [e.kind for e in _recorded(ctx, result)]
    assert kinds.count("tx_receipt") == 1  # the commit's receipt is recorded
    (failed,) = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert (failed.meta or {}).get("error") is True
    assert "not valid JSON" in (failed.text or "") or "nest" in (failed.text or "")
    assert ctx.audit().ok


def test_an_integer_argument_too_long_to_convert_is_a_tool_error(
    ctx: morphz.Context, workspace: Path
) -> None:
    """An integer literal of more than 4,300 digits in a call's arguments is broken input from
    the model, so a tool error the agent reads. Today json.loads raises ValueError ("Exceeds
    the limit (4300 digits) for integer string conversion"), which escapes Engine.run and
    records the activation as interrupted."""
    arguments = '{"path": "a.txt", "offset": 1' + "0" * 5000 + "}"
    engine = _engine(ctx, [ModelResponse(None, (_call("read_file", arguments),))], workspace)
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    (failed,) = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert (failed.meta or {}).get("error") is True


def test_exec_with_a_nul_byte_in_the_command_is_a_tool_error(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A NUL character in exec's command (JSON "\\u0000") cannot be passed to a shell: it is a
    tool error naming the argument. Today asyncio's subprocess_shell raises
    ValueError("embedded null byte"), which exec does not translate (it catches OSError only),
    so an approved call ends the activation as interrupted and Engine.run raises."""
    call = _call("exec", {"command": "echo a\x00b"})
    engine = _engine(ctx, [ModelResponse(None, (call,))], workspace, {"exec": "allow"})
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    (failed,) = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert (failed.meta or {}).get("error") is True
    assert "command" in (failed.text or "")


# --- 2. a lone surrogate in a call's id or name ------------------------------------------------


@pytest.mark.parametrize(
    ("call_id", "name"),
    [("call_\ud800", "write_file"), ("c1", "write_file\udfff")],
    ids=["id", "name"],
)
def test_a_lone_surrogate_in_a_call_id_or_name_does_not_end_the_activation(
    ctx: morphz.Context, workspace: Path, call_id: str, name: str
) -> None:
    """A provider's JSON may carry "\\ud800" anywhere; the engine already records the reply's
    calls with U+FFFD (valid_text), and every call gets a result observation. The result's
    meta ({"tool": call.name, "call": call.id}) is not made valid: observe_batch refuses it
    with an InputError raised outside the per-call handling, after the tool ran, so a file is
    written with no tool_result recorded and the activation ends interrupted."""
    call = ToolCall(call_id, name, json.dumps({"path": "notes.txt", "content": "hi"}))
    engine = _engine(ctx, [ModelResponse(None, (call,))], workspace, {"write_file": "allow"})
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    results = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert len(results) == 1
    assert ctx.audit().ok


# --- 3. a failed recall recorded as a transaction receipt -------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"op": "search", "query": "hello", "cursor": "not-a-cursor"},
        {"op": "read", "ref": "@e999"},
        {"op": "frame", "frame_id": "no/such"},
    ],
    ids=["bad-cursor", "unknown-ref", "unknown-frame"],
)
def test_a_failed_recall_is_not_recorded_as_a_transaction_receipt(
    ctx: morphz.Context, workspace: Path, arguments: dict[str, Any]
) -> None:
    """tx_receipt is the kind of context_tx receipts and refusals (docs/decisions.md: "Tool
    results as observations"); a recall that fails is not a transaction. Today every error of
    a non-external tool becomes a tx_receipt (engine._record_outcomes), so the agent reads a
    recall error as a transaction receipt and `morphz chat` / `exec` show it as
    "@eN context_tx refused ...". The failure should be recorded as the recall's own result
    (a recall_result, or a tool_result naming recall), with error set."""
    engine = _engine(ctx, [ModelResponse(None, (_call("recall", arguments),))], workspace)
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    skip = ("user_message", "model_reply", "agent_reply")
    (failed,) = [e for e in _recorded(ctx, result) if e.kind not in skip]
    assert failed.kind != "tx_receipt", failed
    assert (failed.meta or {}).get("tool") == "recall"
    assert "context_tx" not in activity_line(failed)


# --- 4. cancellation while the activation is being started ------------------------------------


def test_an_activation_cancelled_while_it_starts_is_recorded_interrupted(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A cancelled activation is recorded as interrupted (the engine's `except BaseException`).
    A cancellation that arrives while begin_activation is being written (a busy store makes
    that window long) skips it: the thread still records the start, but Engine.run's try
    begins only after, so the activation stays running for as long as this process lives.
    interrupt_orphaned cannot mark it (its owner is alive), its root request cannot be retired
    (causal protection) and every kernel lists it among the running activations."""
    cancel_while_starting(ctx, _engine(ctx, [], workspace), "s1", cancels=1)
    assert ctx.activations(running_only=True) == []
    assert [a.state for a in ctx.activations()] in ([], ["interrupted"])
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "done") (retire @e1))')
    assert ctx.audit().ok


# --- 5. what a failed model call is recorded with ----------------------------------------------


def test_a_model_raising_an_unexpected_error_is_recorded_with_that_error(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A model (adapter) that raises something other than a ProviderError ends the activation,
    and the recorded reason says what happened. Today any exception is recorded as "the process
    stopped mid-activation", which is false here: the process goes on (the same engine runs
    the next activation), and the error itself is recorded nowhere."""

    def broken(request: ModelRequest) -> ModelResponse:
        raise ValueError("unexpected payload from the provider")

    engine = _engine(ctx, [broken], workspace)
    with pytest.raises(ValueError):
        asyncio.run(engine.run("hello"))
    (row,) = ctx.activations()
    assert row.state == "interrupted"
    finished = ctx.events()[-1]
    assert finished.payload is not None
    assert "unexpected payload" in (finished.payload["reason"] or ""), finished.payload
    assert asyncio.run(engine.run("again")).state == "delivered"
    assert ctx.audit().ok


# --- 6. a blank reply ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", [" ", "\n\n", " \t\n"])
def test_a_whitespace_only_reply_is_not_delivered(
    ctx: morphz.Context, workspace: Path, text: str
) -> None:
    """A reply with no text and no tool calls fails the activation ("the model returned neither
    a reply nor tool calls"), but a reply of whitespace only (what some servers return when the
    model emits nothing but a stop) is delivered as the answer: the user gets a blank reply and
    the activation reads as delivered. It should fail the same way as an empty one."""
    engine = _engine(ctx, [ModelResponse(text)], workspace)
    result = asyncio.run(engine.run("hello"))
    assert result.state == "failed", (result.state, result.reply)
    assert result.reply is None


# --- 7. an ask tool's arguments reach the approval record before they are checked --------------


def test_a_non_finite_argument_of_an_ask_tool_names_the_argument(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A non-finite number in a tool's arguments is a tool error naming the argument (as for
    read_file: "argument 'offset' must be a finite number"). For a tool under "ask" the engine
    records the approval request with the raw arguments first, so the model is told instead
    "meta must be a JSON object (strict JSON, string keys): Out of range float values...",
    about a "meta" it never sent."""
    call = _call("exec", '{"command": "ls", "timeout_s": NaN}')
    engine = _engine(ctx, [ModelResponse(None, (call,))], workspace, ask_default=True)
    result = asyncio.run(engine.run("hello"))
    (failed,) = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert "timeout_s" in (failed.text or ""), failed.text
    assert "meta" not in (failed.text or "")


def test_a_tool_that_raises_unexpectedly_is_that_calls_error_and_the_others_keep_theirs(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A tool with a bug (an exception that is no MorphzError) gives its call an error result
    naming the exception; the other calls of the same reply keep their results and the
    activation goes on."""
    from morphz.runtime.models.base import ToolSchema
    from morphz.runtime.tools.base import Tool

    async def broken(args: dict[str, Any], tc: Any) -> Any:
        raise KeyError("missing piece")

    engine = _engine(ctx, [], workspace)
    schema = ToolSchema("broken", "always fails", {"type": "object", "properties": {}})
    engine.tools.add(Tool(schema, broken))
    calls = (_call("broken", {}, "a"), _call("list_files", {}, "b"))
    engine.model = FunctionModel(
        lambda r: (
            ModelResponse("done") if "broken failed" in r.encoding else ModelResponse(None, calls)
        )
    )
    result = asyncio.run(engine.run("hello"))
    assert result.state == "delivered", result.reason
    results = [e for e in _recorded(ctx, result) if e.kind == "tool_result"]
    assert [(e.meta or {}).get("tool") for e in results] == ["broken", "list_files"]
    assert "KeyError" in (results[0].text or "") and (results[0].meta or {}).get("error")
    assert not (results[1].meta or {}).get("error")
    assert ctx.audit().ok
