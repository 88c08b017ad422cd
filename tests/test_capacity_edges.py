"""Review 9, capacity: token accounting, budgets, pressure and the maintenance batch
(DESIGN §10, issue 4 items 4-5). Each test fails on the code as reviewed; its docstring states
the expected behaviour."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import morphz
from agents import import_log_lines as _history
from agents import make_engine as _engine
from morphz.capacity import Budget
from morphz.encoding.tokens import RATIO_BOUNDS
from morphz.runtime.engine import ActivationResult
from morphz.runtime.models.base import ModelRequest, ModelResponse, Usage
from morphz.runtime.models.scripted import FunctionModel

_OBSERVATION = re.compile(r"^ \(observation (@e\d+) ", re.M)
_FIGURE = re.compile(r"\(pressure \(level \w+\) \(tokens (\d+)\)")


def _figure(request: ModelRequest) -> int:
    """The token figure the request's kernel states."""
    return int(_FIGURE.findall(request.encoding)[-1])


def _shown(request: ModelRequest) -> set[str]:
    return set(_OBSERVATION.findall(request.encoding))


def test_an_absurd_reported_usage_is_bounded_not_a_crash(
    ctx: morphz.Context, workspace: Path
) -> None:
    """decisions.md: each provider report teaches a ratio held within RATIO_BOUNDS, so a report
    "counting something else" cannot break the context. A usage figure too large for a float
    (the adapters accept any JSON integer as prompt_tokens / input_tokens) makes
    Calibration.update raise a bare OverflowError out of Engine.run, and the activation is
    recorded as interrupted. Expected: the report is bounded (or ignored) like any other
    outlier, and the activation delivers its reply."""
    model = FunctionModel(lambda request: ModelResponse("ok", usage=Usage(10**400, 5)))
    engine = _engine(ctx, model, workspace)
    result: ActivationResult = asyncio.run(engine.run("hi"))
    assert result.state == "delivered", result.reason
    low, high = RATIO_BOUNDS
    assert low <= engine.calibration.factor <= high


def test_the_minimum_failure_says_what_to_do_next(ctx: morphz.Context, workspace: Path) -> None:
    """DESIGN §13: every refusal has a message that says what to do next. When even the minimum
    maintenance request cannot fit, the activation fails with "even the minimum maintenance
    request needs N tokens of H: the current request, its dependencies and protected content
    do not fit", which names no remedy. Expected: it points at one, e.g. raising the budget
    (`morphz context budget --limit/--window`) or unprotecting content."""
    _history(ctx, 4)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=1_500, reserve=100))
    result = asyncio.run(
        _engine(ctx, FunctionModel(lambda r: ModelResponse("x")), workspace).run("hi")
    )
    assert result.state == "failed"
    reason = result.reason or ""
    assert "minimum maintenance request" in reason
    assert "context budget" in reason or "unprotect" in reason, reason
