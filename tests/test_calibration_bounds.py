"""Calibration learns from provider usage reports, within bounds: one report far off the
estimate (a provider counting only the uncached part, or a whole batch) must neither make the
pressure figure vanish nor, saved with the context, make every later activation refuse to send."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import morphz
from morphz.encoding.tokens import RATIO_BOUNDS, Calibration, count, estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, Usage
from morphz.runtime.models.scripted import FunctionModel

_FIGURE = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")
LOW, HIGH = RATIO_BOUNDS


def _engine(ctx: morphz.Context, answer: Any, workspace: Path) -> Engine:
    workspace.mkdir(exist_ok=True)
    config = RuntimeConfig(workspace=workspace, exact_tokens=False)
    return Engine(ctx, FunctionModel(answer, "openai:m"), build_tools(Settings()), config)


def _replying(input_tokens: int, seen: list[ModelRequest]) -> Any:
    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse("ok", (), Usage(input_tokens=input_tokens, output_tokens=1))

    return answer


@given(st.integers(1, 10**6), st.integers(1, 10**12))
def test_one_sample_moves_the_factor_only_within_the_bounds(estimated: int, reported: int) -> None:
    calibration = Calibration()
    calibration.update(estimated, reported)
    assert LOW <= calibration.factor <= HIGH
    assert math.isclose(calibration.factor, min(max(reported / estimated, LOW), HIGH))


@pytest.mark.parametrize("factor", [277_854.96, 1e-6, float("inf"), float("nan")])
def test_a_factor_saved_before_the_bounds_is_read_within_them(factor: float) -> None:
    loaded = Calibration.from_dict({"factor": factor, "samples": 1, "alpha": 0.3})
    assert LOW <= loaded.factor <= HIGH


def test_a_huge_report_does_not_make_the_context_unusable(
    ctx: morphz.Context, tmp_path: Path
) -> None:
    """10**9 input tokens reported for a request of about 2,000: the next activation (a new
    engine, which starts from the saved calibration) still sends and delivers."""
    first = asyncio.run(_engine(ctx, _replying(10**9, []), tmp_path / "ws").run("hello"))
    assert first.state == "delivered"
    assert ctx.calibration("openai:m").factor == HIGH
    seen: list[ModelRequest] = []
    again = asyncio.run(_engine(ctx, _replying(2_500, seen), tmp_path / "ws").run("again"))
    assert again.state == "delivered", again.reason
    assert len(seen) == 1


def test_a_report_of_one_token_does_not_make_the_figure_vanish(
    ctx: morphz.Context, tmp_path: Path
) -> None:
    seen: list[ModelRequest] = []
    engine = _engine(ctx, _replying(1, seen), tmp_path / "ws")
    asyncio.run(engine.run("hello"))
    asyncio.run(engine.run("hello again"))
    _, shown = _FIGURE.findall(seen[-1].encoding)[-1]
    assert int(shown) >= LOW * estimate_tokens(seen[-1].encoding)


@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0, 3.0, 4.0])
def test_the_figure_covers_the_calibrated_count_of_its_own_request(
    ctx: morphz.Context, factor: float
) -> None:
    """The slack for the pressure figures' own text is calibrated like the rest, so the figure
    the kernel states is never below the calibrated count of the text that states it."""
    ctx.observe("user_message", "prepare the deployment " * 40)
    calibration = Calibration(factor, 1)
    encoding = ctx.encode(calibration=calibration)
    assert encoding.tokens >= count([encoding.text], calibration).tokens
