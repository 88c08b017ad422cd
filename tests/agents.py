"""Helpers the runtime and CLI tests share: an engine with the CLI's default tools, a history of
log lines, a scripted model spec, one CLI invocation, a small budget, a region's tokens, one
activation of given tool calls, a run cancelled while its activation starts, and the calls and
events the interruption tests look at."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz import staging
from morphz.capacity import Budget
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import Tool


def make_engine(ctx: morphz.Context, model: Any, workspace: Path, **config: Any) -> Engine:
    """An engine on ``ctx`` with the tools ``morphz exec`` offers by default."""
    return Engine(ctx, model, build_tools(Settings()), RuntimeConfig(workspace=workspace, **config))


def import_log_lines(ctx: morphz.Context, count: int, words: int = 60) -> None:
    """``count`` external events of ``words`` words each, imported in session ``feed``."""
    lines = [
        json.dumps({"kind": "external_event", "text": f"log line {i}: " + "status ok " * words})
        for i in range(count)
    ]
    ctx.import_history(io.StringIO("\n".join(lines)), session="feed")


def script_spec(tmp: Path, steps: list[dict[str, Any]]) -> str:
    """A ``scripted:PATH`` model spec replaying ``steps`` (written to ``tmp``/script.json)."""
    script = tmp / "script.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{script}"


def invoke(args: list[str], stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, args, input=stdin)


# critical 4,800: a budget small enough for a test to reach its levels with a few frames
SMALL_BUDGET = Budget(window=32_000, output_reserve=2_000, configured=5_000, reserve=200)


def region_tokens(ctx: morphz.Context, name: str = "mind") -> int:
    """The token estimate of one region of ``ctx``'s encoding now."""
    return next(r.tokens for r in ctx.encode().regions if r.name == name)


def run_steps(
    ctx: morphz.Context, workspace: Path, calls: tuple[ToolCall, ...], **config: Any
) -> list[int]:
    """One activation in session ``ops``: a first reply with ``calls``, then "done". Returns
    the context's clock as each request was sent (read when the model is asked)."""
    clocks: list[int] = []

    def model(request: ModelRequest) -> ModelResponse:
        clocks.append(ctx.status().clock)
        if len(clocks) == 1:
            return ModelResponse(None, calls)
        return ModelResponse("done", ())

    engine = make_engine(ctx, FunctionModel(model), workspace, **config)
    result = asyncio.run(engine.run("hi", session="ops"))
    assert result.state == "delivered", result.reason
    return clocks


def cancel_while_starting(ctx: morphz.Context, engine: Engine, session: str, cancels: int) -> None:
    """Run an activation whose start (``begin_activation``) is held in its thread, and cancel
    the run ``cancels`` times while it is held; the run must end cancelled."""
    release = threading.Event()
    original = ctx.begin_activation

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()

        def slow_start(*args: Any, **kwargs: Any) -> tuple[Any, str]:
            loop.call_soon_threadsafe(entered.set)
            release.wait()
            return original(*args, **kwargs)

        ctx.begin_activation = slow_start  # type: ignore[method-assign]
        task = asyncio.create_task(engine.run("hello", session=session))
        await entered.wait()
        for done in range(cancels):
            task.cancel()
            if done + 1 < cancels:
                for _ in range(5):  # let the task reach its `except CancelledError` block
                    await asyncio.sleep(0)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(scenario())  # its shutdown waits for the start's thread
    finally:
        release.set()
        del ctx.begin_activation


# a call that changes the workspace, and one that asks for approval: the interruption tests' reply
WRITE_A = ToolCall("c1", "write_file", json.dumps({"path": "a.txt", "content": "hi\n"}))
ECHO = ToolCall("c2", "exec", json.dumps({"command": "echo hi"}))


def results_of(ctx: morphz.Context, call: str) -> list[morphz.Event]:
    """The tool_result events recorded for the call of id ``call``."""
    return [
        e for e in ctx.events() if e.kind == "tool_result" and (e.meta or {}).get("call") == call
    ]


def end_of(ctx: morphz.Context) -> int:
    """The seq of the (first) activation_finished event."""
    return next(e.seq for e in ctx.events() if e.kind == "activation_finished")


def asking(*calls: ToolCall) -> FunctionModel:
    """A model whose every reply asks for ``calls``."""
    return FunctionModel(lambda request: ModelResponse(None, calls))


def approving_writes(asked: asyncio.Event) -> Callable[[Tool, dict[str, Any]], Awaitable[bool]]:
    """An approver that allows write_file and, for any other tool, sets ``asked`` and never
    answers (the person presses Ctrl-C first)."""

    async def approver(tool: Tool, args: dict[str, Any]) -> bool:
        if tool.name == "write_file":
            return True
        asked.set()
        await asyncio.Event().wait()
        return False

    return approver


def results_busy_once(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> None:
    """The write of a step's results (``staging.record``, the runtime's batch) fails
    (StoreBusyError, rolled back) the first time it is to write tool results, after ``before``
    (a test's synchronisation); it works as usual otherwise."""
    record = staging.record
    failed: list[bool] = []

    def busy_once(ctx: morphz.Context, *args: Any) -> Any:
        if not failed and has_tool_result(args[-1]):
            failed.append(True)
            before()
            raise morphz.StoreBusyError("the store is busy: another process holds its lock")
        return record(ctx, *args)

    monkeypatch.setattr(staging, "record", busy_once)


def has_tool_result(outcomes: Any) -> bool:
    """Whether ``outcomes`` (what ``staging.record`` records) hold a tool_result."""
    return any(outcome.observation.kind == "tool_result" for outcome, _ in outcomes)
