"""An engine made while the exact tokenizer was still on its way (tiktoken fetching its encoding
on a slow network) counts with it once it has arrived, from the next activation that starts
while none runs on the engine: every figure of one activation is counted one way."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.encoding import tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime import engine as engine_module
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

MODEL = "openai:engine-counter-slow-model"


class _Encoding:
    """A stand-in for tiktoken's encoding: one token per character."""

    _pat_str = "(?s:.)"

    def encode_ordinary(self, text: str) -> list[int]:
        return [0] * len(text)


@pytest.fixture
def slow_tiktoken(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """A tiktoken whose encoding arrives once the test sets the event; lookups do not wait
    for it (an engine is made at once, on estimates)."""
    arrived = threading.Event()

    def slow(name: str) -> _Encoding:
        arrived.wait(60)
        return _Encoding()

    fake = types.ModuleType("tiktoken")
    fake.encoding_for_model = slow  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    monkeypatch.setattr(engine_module, "exact_counter", _no_wait)
    tokens._tiktoken_counter.cache_clear()
    try:
        yield arrived
    finally:
        arrived.set()
        tokens._tiktoken_counter.cache_clear()


def _no_wait(model: str, wait: float = 0.0) -> Any:
    return tokens.exact_counter(model, wait=0.0)


def _land(arrived: threading.Event) -> None:
    """Let the background fetch end, and wait until it has."""
    arrived.set()
    for thread in threading.enumerate():
        if thread.name == f"tiktoken encoding of {MODEL.partition(':')[2]}":
            thread.join(60)


def _figure(request: ModelRequest) -> str:
    return re.findall(r"\(figure (\w+)\)", request.encoding)[-1]


def _noting(ctx: morphz.Context, config: RuntimeConfig) -> tuple[Engine, list[str]]:
    """An engine whose model replies at once, and the figure kind each request stated."""
    figures: list[str] = []

    def model(request: ModelRequest) -> ModelResponse:
        figures.append(_figure(request))
        return ModelResponse("done")

    return Engine(ctx, FunctionModel(model, MODEL), build_tools(Settings()), config), figures


def test_the_tokenizer_that_arrives_later_counts_from_the_next_activation(
    ctx: morphz.Context, workspace: Path, slow_tiktoken: threading.Event
) -> None:
    engine, figures = _noting(ctx, RuntimeConfig(workspace))
    assert engine.counter is None  # not arrived: estimates for now
    assert asyncio.run(engine.run("first", session="s1")).state == "delivered"
    _land(slow_tiktoken)
    assert asyncio.run(engine.run("second", session="s1")).state == "delivered"
    assert figures == ["estimated", "exact"]
    assert engine.counter is not None and engine.counter("abcd") == 4


def test_an_activation_keeps_the_counting_it_started_with(
    ctx: morphz.Context, workspace: Path, slow_tiktoken: threading.Event
) -> None:
    """The tokenizer arrives while an activation runs and another starts beside it: neither
    changes how it counts (a refusal's ceiling is compared with figures counted as it was);
    the next activation that starts alone counts exactly."""
    figures: dict[str, list[str]] = {}
    engine: Engine | None = None

    async def model(request: ModelRequest) -> ModelResponse:
        prompt = re.findall(r'\(text "(\w+)"\)', request.encoding)[-1]
        figures.setdefault(prompt, []).append(_figure(request))
        if prompt == "outer" and len(figures["outer"]) == 1:
            _land(slow_tiktoken)
            assert engine is not None
            inner = await engine.run("inner", session="s2")  # starts while outer runs
            assert inner.state == "delivered"
            return ModelResponse(None, (ToolCall("c1", "list_files", "{}"),))  # one more step
        return ModelResponse("done")

    engine = Engine(
        ctx, FunctionModel(model, MODEL), build_tools(Settings()), RuntimeConfig(workspace)
    )
    assert asyncio.run(engine.run("outer", session="s1")).state == "delivered"
    assert asyncio.run(engine.run("after", session="s1")).state == "delivered"
    assert figures["inner"] == ["estimated"]
    assert set(figures["outer"]) == {"estimated"}
    assert figures["after"] == ["exact"]


def test_an_engine_told_to_estimate_never_takes_the_tokenizer(
    ctx: morphz.Context, workspace: Path, slow_tiktoken: threading.Event
) -> None:
    engine, figures = _noting(ctx, RuntimeConfig(workspace, exact_tokens=False))
    _land(slow_tiktoken)
    assert asyncio.run(engine.run("first", session="s1")).state == "delivered"
    assert figures == ["estimated"] and engine.counter is None
