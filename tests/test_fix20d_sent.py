"""Fix 20d: what an activation measures with and records of what it sends. The floors (an empty
context's requests) are read under the calibration as it is at each step and commit, not as the
activation started; a request that got no reply (a provider error, an unexpected error, a
cancellation) is recorded with the activation's end and counted by `context requests`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.capacity import Budget
from morphz.encoding.tokens import estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime import engine as engine_module
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.floor import Floors
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.report import pick_activations, request_stats

_MODE = re.compile(r'\(mode "(\w+)"\)')
_VERSION = re.compile(r"\(mind-version (\d+)\)")

Answer = Callable[[ModelRequest], ModelResponse]


def _engine(ctx: morphz.Context, workspace: Path, model: Answer, **config: Any) -> Engine:
    name = config.pop("name", "scripted:function")
    tools = build_tools(Settings())
    return Engine(ctx, FunctionModel(model, name), tools, RuntimeConfig(workspace, **config))


def _usage(request: ModelRequest, factor: float) -> Usage:
    """What a provider counting ``factor`` times the estimate reports."""
    sent = estimate_tokens(request.encoding) + sum(estimate_tokens(t.text) for t in request.tools)
    return Usage(int(sent * factor), 5)


def _list_files(step: int) -> ModelResponse:
    return ModelResponse(None, (ToolCall(f"call_{step}", "list_files", "{}"),))


def _report(ctx: morphz.Context) -> dict[str, Any]:
    stats: dict[str, Any] = request_stats(ctx, pick_activations(ctx))[0].to_dict()
    return stats


def _end(ctx: morphz.Context) -> dict[str, Any]:
    """The payload of the context's last activation_finished event."""
    ends = [e for e in ctx.events() if e.kind == "activation_finished"]
    payload: dict[str, Any] = ends[-1].payload or {}
    return payload


# ---------------------------------------------------------------- floors under the calibration


def test_pressure_starts_no_maintenance_once_the_calibrated_floor_is_at_critical(
    ctx: morphz.Context, workspace: Path
) -> None:
    """From the second request on, the provider's usage (1.3x the estimate) puts even an
    empty context's work request at critical: maintenance could not bring pressure down, so
    pressure alone never starts it (decisions, "Maintenance ends below warning"). The floor
    measured as the activation started (uncalibrated) was below critical."""
    modes: list[str] = []

    def model(request: ModelRequest) -> ModelResponse:
        modes.append(_MODE.findall(request.encoding)[-1])
        if len(modes) == 4:
            return ModelResponse("done", (), _usage(request, 1.3))
        response = _list_files(len(modes))
        return ModelResponse(None, response.tool_calls, _usage(request, 1.3))

    budget = Budget(window=32_000, output_reserve=2_000, configured=7_500, reserve=2_000)
    engine = _engine(ctx, workspace, model, budget=budget)
    start = Floors().get(engine.options("default"), False)  # uncalibrated: as it started
    assert start < budget.critical
    result = asyncio.run(engine.run("work please", session="s1"))
    assert result.state == "delivered", result.reason
    assert engine.floor(False) >= budget.critical  # under the calibration learned
    assert modes == ["work"] * 4


def test_the_budget_refusal_of_a_commit_counts_the_floor_under_the_calibration_now(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's commit at the second step is measured with the maintenance floor under the
    calibration the replies taught so far, not the one measured as the activation started."""
    floors: list[tuple[object, int]] = []  # the floor the commit got, the engine's then
    commit = ctx.commit
    engines: list[Engine] = []

    def noting(*args: Any, **kwargs: Any) -> morphz.Receipt:
        floors.append((kwargs.get("request_floor"), engines[0].floor(True)))
        return commit(*args, **kwargs)

    monkeypatch.setattr(ctx, "commit", noting)
    ctx.observe("external_event", "a note")
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        usage = _usage(request, 1.5)
        if len(asked) == 2:
            version = _VERSION.findall(request.encoding)[-1]
            tx = f'(context-tx (base-version {version}) (reason "seen") (retire @e1))'
            call = ToolCall("call_2", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (call,), usage)
        if len(asked) == 1:
            return ModelResponse(None, _list_files(1).tool_calls, usage)
        return ModelResponse("done", (), usage)

    engine = _engine(ctx, workspace, model)
    engines.append(engine)
    started = Floors().get(engine.options("default", batch=True, maintenance=True), True)
    result = asyncio.run(engine.run("work please", session="s1"))
    assert result.state == "delivered", result.reason
    [(given, now)] = floors
    assert given == now > started  # counted 1.5x, as the provider reported


def test_with_the_exact_tokenizer_the_floor_is_the_exact_count_whatever_the_calibration(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exact count is not calibrated: the provider's reports still teach the calibration,
    but the floor each step reads stays the exact figure of the empty request."""

    def per_char(text: str) -> int:
        return len(text)

    monkeypatch.setattr(engine_module, "exact_counter", lambda model, wait=0.0: per_char)
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        usage = _usage(request, 1.3)
        if len(asked) < 3:
            return ModelResponse(None, _list_files(len(asked)).tool_calls, usage)
        return ModelResponse("done", (), usage)

    engine = _engine(ctx, workspace, model, name="openai:per-char")
    result = asyncio.run(engine.run("work please", session="s1"))
    assert result.state == "delivered", result.reason
    assert engine.calibration.samples  # it learned, and it changes nothing exact
    fresh = Floors().get(engine.options("default"), False)
    assert engine.floor(False) == fresh
    assert "(figure exact)" in asked[-1].encoding


# ------------------------------------------------------- requests no reply followed, recorded


def test_a_request_an_unexpected_error_cut_off_is_counted(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The model's adapter raises something that is no provider error on the second request:
    the activation ends interrupted, and its end records that request as sent."""
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) == 1:
            return _list_files(1)
        raise RuntimeError("adapter bug")

    engine = _engine(ctx, workspace, model, delta=True)
    with pytest.raises(RuntimeError, match="adapter bug"):
        asyncio.run(engine.run("list the files", session="s1"))
    end = _end(ctx)
    assert end["state"] == "interrupted"
    assert set(end["unanswered"]) == {"failed_sent"}
    assert end["unanswered"]["failed_sent"]["delta"] == "increment"
    report = _report(ctx)
    assert report["requests"] == 2 and report["refused"] == 0
    assert report["delta"] == {"increments": 1, "seeds": {"first": 1}}
    assert report["measured"] == 1  # the second followed the first: measured
    assert ctx.audit().ok


def test_a_request_cancelled_in_flight_is_counted(ctx: morphz.Context, workspace: Path) -> None:
    """Ctrl-C while the second request waits for its reply (the run's task cancelled): the end,
    recorded interrupted, records that request as sent."""
    asked: list[ModelRequest] = []
    waiting = asyncio.Event()

    async def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) == 1:
            return _list_files(1)
        waiting.set()
        await asyncio.Event().wait()  # never answered
        raise AssertionError("not reached")

    engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(workspace))

    async def main() -> None:
        run = asyncio.ensure_future(engine.run("list the files", session="s1"))
        await waiting.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    end = _end(ctx)
    assert end["state"] == "interrupted" and "failed_sent" in end["unanswered"]
    assert _report(ctx)["requests"] == 2
    assert ctx.audit().ok


def test_a_refusal_then_a_provider_error_are_both_recorded_with_the_end(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Answered, refused as too long, then a 502: three requests, one refused; the end keeps
    the refused one and the failed one apart, and the reason says both."""
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) == 1:
            return _list_files(1)
        if len(asked) == 2:
            raise ContextTooLongError("prompt is too long")
        raise ProviderError("upstream 502")

    engine = _engine(ctx, workspace, model)
    result = asyncio.run(engine.run("list the files", session="s1"))
    assert result.state == "failed"
    assert "502" in (result.reason or "") and "too long" in (result.reason or "")
    unanswered = _end(ctx)["unanswered"]
    assert unanswered["refused"] == 1 and len(unanswered["refused_sent"]) == 1
    assert set(unanswered["failed_sent"]) == {"bytes", "prefix"}
    report = _report(ctx)
    assert (report["requests"], report["refused"], report["measured"]) == (3, 1, 2)
    assert ctx.audit().ok


def test_an_answered_activation_records_nothing_unanswered(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Every request answered and recorded: the end has no ``unanswered``, as before."""

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse("done")

    result = asyncio.run(_engine(ctx, workspace, model).run("hi", session="s1"))
    assert result.state == "delivered"
    assert "unanswered" not in _end(ctx)
    assert _report(ctx)["requests"] == 1
