"""The exact tokenizer (issue 4, token accounting): when tiktoken is installed and knows the
model, the runtime, ``ctx.encode`` and ``morphz context encoding --model`` count with it and the
kernel says ``(figure exact)``; otherwise the estimate (or its calibration) is used.

tiktoken here is the real package with a small BPE registered as ``o200k_base`` (the
``tiny_tiktoken`` fixture in conftest.py): the real encoding files come from the network."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz.encoding.compile import PRESSURE_SLACK, pressure_figures
from morphz.encoding.tokens import Calibration, exact_counter
from morphz.errors import InputError
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings, _settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import ToolRegistry

TEXT = "the context of the session: observation, frame, mind and pressure (level normal)"


def test_without_tiktoken_there_is_no_exact_counter() -> None:
    # conftest makes ``import tiktoken`` fail unless a test asks for it
    assert exact_counter("openai:gpt-4o") is None
    assert exact_counter("gpt-4o") is None


def test_openai_models_are_counted_with_their_encoding(tiny_tiktoken: Any) -> None:
    counter = exact_counter("openai:gpt-4o")
    assert counter is not None
    assert counter(TEXT) == len(tiny_tiktoken.encode_ordinary(TEXT))
    assert counter(TEXT) < len(TEXT.encode())  # merges happened: not one token per byte
    bare = exact_counter("gpt-4o-mini")  # a bare OpenAI name resolves the same way
    assert bare is not None and bare(TEXT) == counter(TEXT)


def test_special_token_text_is_counted_as_ordinary_text(tiny_tiktoken: Any) -> None:
    counter = exact_counter("openai:gpt-4o")
    assert counter is not None
    text = "a tool printed <|endoftext|> in its output"
    with pytest.raises(ValueError):  # what tiktoken's plain encode does with it
        tiny_tiktoken.encode(text)
    assert counter(text) == len(tiny_tiktoken.encode_ordinary(text)) > 1


@pytest.mark.parametrize(
    "spec",
    [
        "anthropic:claude-sonnet-4-5",  # another provider's tokenizer: tiktoken would be wrong
        "scripted:demo.json",
        "openai:qwen2.5-7b-instruct",  # a local model behind an OpenAI-compatible server
        "none",
    ],
)
def test_models_tiktoken_does_not_know_get_the_estimate(tiny_tiktoken: Any, spec: str) -> None:
    assert exact_counter(spec) is None


def test_an_encoding_file_that_cannot_be_fetched_means_the_estimate(
    tiny_tiktoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, tiktoken raises an OSError (requests' ConnectionError) on its first use of an
    encoding whose file is not cached: the answer is None, and it is not asked again."""
    asked: list[str] = []

    def offline(name: str) -> Any:
        asked.append(name)
        raise ConnectionError(f"cannot fetch the encoding of {name}")

    import tiktoken  # the real package, put back by the fixture

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    assert exact_counter("openai:gpt-4.1") is None
    assert exact_counter("openai:gpt-4.1") is None
    assert asked == ["gpt-4.1"]


def _populate(ctx: morphz.Context) -> None:
    ctx.observe("user_message", TEXT * 20)
    ctx.commit(f'(context-tx (base-version {ctx.version}) (create the/mind (note "{TEXT}")))')


def test_encode_with_the_counter_reports_an_exact_figure(
    ctx: morphz.Context, tiny_tiktoken: Any
) -> None:
    _populate(ctx)
    counter = exact_counter("openai:gpt-4o")
    estimated = ctx.encode(model="openai:gpt-4o")
    exact = ctx.encode(model="openai:gpt-4o", counter=counter)
    assert "(figure estimated)" in estimated.region("kernel")
    assert exact.pressure.kind == "exact" and "(figure exact)" in exact.region("kernel")
    assert counter is not None
    # the figure is the tokenizer's count of every region, counted before the figures were known
    # (the kernel's "(pressure )"), plus the fixed slack kept for them
    figures = f"(pressure {pressure_figures(exact.pressure)})"
    assert figures in exact.region("kernel")
    draft = [exact.region(r.name).replace(figures, "(pressure )") for r in exact.regions]
    assert exact.tokens == sum(counter(part) for part in draft) + PRESSURE_SLACK
    assert exact.tokens != estimated.tokens


# --- the runtime ------------------------------------------------------------------------------


def _engine(
    ctx: morphz.Context, name: str, tmp_path: Path, **config: Any
) -> tuple[Engine, list[ModelRequest]]:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse("done", ())

    registry: ToolRegistry = build_tools(Settings())
    engine = Engine(
        ctx, FunctionModel(answer, name), registry, RuntimeConfig(workspace=tmp_path, **config)
    )
    return engine, seen


def test_the_runtime_counts_exactly_when_it_can(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "openai:gpt-4o", tmp_path)
    assert asyncio.run(engine.run("hello")).state == "delivered"
    assert "(figure exact)" in seen[0].encoding
    assert engine.encoding().pressure.kind == "exact"  # what chat's /encoding shows


def test_the_runtime_estimates_when_told_to(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "openai:gpt-4o", tmp_path, exact_tokens=False)
    asyncio.run(engine.run("hello"))
    assert "(figure estimated)" in seen[0].encoding


def test_the_runtime_estimates_for_models_tiktoken_does_not_know(
    ctx: morphz.Context, tiny_tiktoken: Any, tmp_path: Path
) -> None:
    engine, seen = _engine(ctx, "anthropic:claude-sonnet-4-5", tmp_path)
    asyncio.run(engine.run("hello"))
    assert "(figure estimated)" in seen[0].encoding


def test_the_tokenizer_setting() -> None:
    assert _settings({}, {}, ()).exact_tokens is True
    assert _settings({"tokenizer": "auto"}, {}, ()).exact_tokens is True
    assert _settings({"tokenizer": "estimate"}, {}, ()).exact_tokens is False
    with pytest.raises(InputError, match="tokenizer must be auto or estimate"):
        _settings({"tokenizer": "tiktoken"}, {}, ())


# --- the command line -------------------------------------------------------------------------


def _pressure_kind(db_path: Path, *args: str) -> str:
    out = CliRunner().invoke(
        main, ["context", "encoding", "work", "--db", str(db_path), "--format", "json", *args]
    )
    assert out.exit_code == 0, out.output
    return str(json.loads(out.output)["pressure"]["kind"])


def test_context_encoding_counts_for_the_model_named(tmp_path: Path, tiny_tiktoken: Any) -> None:
    db_path = tmp_path / "m.db"
    with morphz.open(db_path) as db:
        ctx = db.context("work", create=True)
        _populate(ctx)
        calibration = Calibration()
        calibration.update(1_000, 1_200)
        ctx.save_calibration("openai:local-llama", calibration)
    assert _pressure_kind(db_path) == "estimated"
    assert _pressure_kind(db_path, "--model", "openai:gpt-4o") == "exact"
    # what the runtime learned about a model tiktoken does not know
    assert _pressure_kind(db_path, "--model", "openai:local-llama") == "calibrated"
    assert _pressure_kind(db_path, "--model", "anthropic:claude-sonnet-4-5") == "estimated"
