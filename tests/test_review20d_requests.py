"""Review 20d: what the agent runtime actually sends, request by request, with ContextDelta on
and off. Each finding is a failing test: what a user meets, what should happen instead."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from histories import Clock
from morphz.capacity import Budget
from morphz.encoding.tokens import estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel

_VERSION = re.compile(r"\(mind-version (\d+)\)")
_OBSERVATION = re.compile(r"\(observation (@e\d+) \(kind (\w+)\)")
_MODE = re.compile(r'\(mode "(\w+)"\)')


def call(name: str, arguments: dict[str, Any], number: int) -> ToolCall:
    return ToolCall(f"call_{number}", name, json.dumps(arguments))


def engine_on(
    ctx: morphz.Context,
    workspace: Path,
    model: Callable[[ModelRequest], ModelResponse],
    **config: Any,
) -> Engine:
    """An engine with the tools ``morphz exec`` offers by default."""
    return Engine(
        ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(workspace, **config)
    )


def context_requests(db: Path, ctx_id: str, *extra: str) -> dict[str, Any]:
    """`morphz context requests CTX --format json`, run as a user runs it."""
    source = str(Path(morphz.__file__).parent.parent)
    command = ["context", "requests", ctx_id, "--db", str(db), "--format", "json", *extra]
    done = subprocess.run(
        [sys.executable, "-m", "morphz", *command],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": source, "PATH": "/usr/bin:/bin", "HOME": str(db.parent)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture
def store(tmp_path: Path) -> Iterator[morphz.Database]:
    db = morphz.open(tmp_path / "morphz.db", now=Clock())
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def workspace(workspace: Path) -> Path:
    """conftest's workspace, holding a file for the file tools to find."""
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    return workspace


# ------------------------------------------------ a calibration that arrives within an activation


def test_work_resumes_when_a_calibration_mid_run_puts_even_an_empty_request_at_warning(
    store: morphz.Database, workspace: Path
) -> None:
    """The provider reports 1.3x the estimated input on the first reply, so from the second
    request on every figure is calibrated, and even an empty context's work request (the run's
    floor: protocol, kernel, tool schemas) is above warning. docs/decisions.md, "Maintenance
    ends below warning": where even an empty context's work request is at warning, maintenance
    ends below critical. The engine measures the floor once, as the activation starts
    (uncalibrated, ``Run.floor``), and ``_decide`` keeps comparing calibrated figures with the
    warning level that stale floor chose: the agent retires everything but its root request,
    the request falls well below critical, and work never resumes (every later request is a
    maintenance one, tools withdrawn, until the agent gives up or the step limit)."""
    ctx = store.context("c1", create=True)
    ctx.observe("external_event", "a log line " * 330)
    modes: list[str] = []

    def model(request: ModelRequest) -> ModelResponse:
        text = request.encoding
        modes.append(_MODE.findall(text)[-1])
        sent = estimate_tokens(text) + sum(estimate_tokens(t.text) for t in request.tools)
        usage = Usage(int(sent * 1.3), 5)  # the provider counts 1.3x the estimate
        step = len(modes)
        if (modes[-1] == "work" and "maintenance" in modes) or step >= 8:
            return ModelResponse("done", (), usage)
        if modes[-1] == "maintenance":  # retire everything but the root request
            refs = [ref for ref, kind in _OBSERVATION.findall(text) if kind != "user_message"]
            if refs:
                version = _VERSION.findall(text)[-1]
                tx = (
                    f'(context-tx (base-version {version}) (reason "processed") '
                    f"(retire {' '.join(dict.fromkeys(refs))}))"
                )
                return ModelResponse(None, (call("context_tx", {"tx": tx}, step),), usage)
        return ModelResponse(None, (call("list_files", {}, step),), usage)

    budget = Budget(window=32_000, output_reserve=2_000, configured=7_500, reserve=300)
    engine = engine_on(ctx, workspace, model, budget=budget)
    result = asyncio.run(engine.run("work please", session="s1"))
    assert result.state == "delivered", result.reason
    floor = engine.floors()[0]  # the work floor under the calibration the run learned
    assert budget.warning <= floor < budget.critical  # the rule: resume below critical
    first = modes.index("maintenance")  # pressure reached critical on the calibrated figure
    assert "work" in modes[first:], modes


# -------------------------------------------------------- morphz context requests and the events


@pytest.mark.parametrize("delta", [False, True])
def test_a_request_that_met_a_provider_error_is_counted_by_context_requests(
    store: morphz.Database, workspace: Path, tmp_path: Path, delta: bool
) -> None:
    """docs/cli.md (context requests): "`requests` counts every request sent". The second
    request of this activation is sent and the provider fails it (a 502 after the adapter's
    retries): the activation ends failed, and nothing records that request: no model_reply,
    and the activation_finished event keeps only too-long refusals (``unanswered``). The report
    says the activation sent 1 request (with ContextDelta: no increment), yet the engine's
    prefix meter counted it, so the next request of the same chat is measured against a
    request the report never shows. Expected: 2 requests, the second an increment."""
    ctx = store.context("c1", create=True)
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) == 1:
            return ModelResponse(None, (call("list_files", {}, 1),))
        raise ProviderError("upstream 502 after 3 retries")

    engine = engine_on(ctx, workspace, model, delta=delta)
    result = asyncio.run(engine.run("list the files", session="s1"))
    assert result.state == "failed" and "502" in (result.reason or "")
    assert len(asked) == 2 and engine.meter.requests == 2  # both sent, both measured
    report = context_requests(tmp_path / "morphz.db", "c1")["activations"][0]
    assert report["activation"] == result.activation
    assert report["requests"] == 2, report
    if delta:
        assert report["delta"] == {"increments": 1, "seeds": {"first": 1}}, report
