"""What activations sent to their models (`morphz context requests`, morphz.runtime.report): the
engine records each request's bytes and the bytes that began its previous request in the
model_reply event, and the report adds them up as the prefix-reuse meter would."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import morphz
from morphz.encoding import PrefixMeter
from morphz.encoding.prefix import request_text
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall, Usage
from morphz.runtime.models.scripted import FunctionModel


def _engine(ctx: morphz.Context, tmp_path: Path, seen: list[ModelRequest]) -> Engine:
    def agent(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        usage = Usage(input_tokens=1_000 + len(seen), output_tokens=5, cached_input_tokens=800)
        if len(seen) % 3 != 0:  # two searches, then a reply
            search = ToolCall(
                f"call_{len(seen)}", "recall", json.dumps({"op": "search", "query": "x"})
            )
            return ModelResponse(None, (search,), usage)
        return ModelResponse("done", (), usage)

    config = RuntimeConfig(workspace=tmp_path, delta=True)
    return Engine(ctx, FunctionModel(agent, "openai:m"), build_tools(Settings()), config)


def _run(db: Path, tmp_path: Path, seen: list[ModelRequest], prompts: list[str]) -> None:
    with morphz.open(db) as opened:
        ctx = opened.context("work", create=True)
        engine = _engine(ctx, tmp_path, seen)  # one engine: one process, one run
        for prompt in prompts:
            assert asyncio.run(engine.run(prompt)).state == "delivered"


def _report(db: Path, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(
        main, ["context", "requests", "work", "--db", str(db), "--format", "json", *args]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert isinstance(doc, dict)
    return doc


def test_the_report_is_the_prefix_meter_over_the_requests_sent(tmp_path: Path) -> None:
    db, seen = tmp_path / "m.db", []
    _run(db, tmp_path, seen, ["first question", "second question"])
    assert len(seen) == 6
    meter = PrefixMeter()
    for request in seen:
        meter.add(request_text(request.encoding, [t.text for t in request.tools]))
    doc = _report(db, "--last", "2")
    first, second = doc["activations"]
    assert (first["requests"], first["measured"]) == (3, 2)  # the engine's first is not measured
    assert (second["requests"], second["measured"]) == (3, 3)  # it follows the first activation's
    overall = doc["total"]
    assert overall["bytes"] == meter.total and overall["reused"] == meter.reused
    assert overall["prefix_reuse"] == round(meter.rate, 4)
    assert overall["input_tokens"] == sum(1_000 + n for n in range(1, 7))
    assert overall["cached_tokens"] == 6 * 800
    # with ContextDelta, each step's request extends the previous one: most bytes are reused
    assert first["prefix_reuse"] > 0.9
    assert first["delta"] == second["delta"] == {"increments": 2, "seeds": {"first": 1}}
    assert overall["delta"] == {"increments": 4, "seeds": {"first": 2}}
    text = CliRunner().invoke(main, ["context", "requests", "work", "--db", str(db), "--last", "2"])
    assert text.exit_code == 0, text.output
    assert "ContextDelta requests (increments; seeds by reason):" in text.stdout
    assert f"  {first['activation']}: 2 increments; 1 seed (first 1)" in text.stdout


def test_a_new_process_starts_a_new_run(tmp_path: Path) -> None:
    db, seen = tmp_path / "m.db", []
    _run(db, tmp_path, seen, ["first question"])
    _run(db, tmp_path, seen, ["second question"])  # another engine: its first request is new
    doc = _report(db, "--last", "2")
    assert [a["measured"] for a in doc["activations"]] == [2, 2]
    one = _report(db, "--activation", doc["activations"][0]["activation"])
    assert [a["activation"] for a in one["activations"]] == [doc["activations"][0]["activation"]]
    assert _report(db)["activations"] == doc["activations"][-1:]  # the last one by default


def test_unknown_activation_and_empty_context(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with morphz.open(db) as opened:
        opened.context("work", create=True)
    empty = CliRunner().invoke(main, ["context", "requests", "work", "--db", str(db)])
    assert empty.exit_code == 0 and "no activations in this context yet" in empty.stdout
    missing = CliRunner().invoke(
        main, ["context", "requests", "work", "--db", str(db), "--activation", "act-nope"]
    )
    assert missing.exit_code == 1 and "no activation 'act-nope'" in missing.stderr


def test_request_tools_are_the_schemas_as_one_sorted_json_array(tmp_path: Path) -> None:
    """Each schema is serialized once (``ToolSchema.text``); joined they are the bytes a
    sorted dump of the whole list gives, which the meter and the benchmarks have always seen."""
    schemas = [t.schema for t in build_tools(Settings()).offered(maintenance=False)]
    assert len(schemas) > 3
    whole = json.dumps([s.to_dict() for s in schemas], sort_keys=True)
    assert request_text("(evaluate)", [s.text for s in schemas]) == f"{whole}\n(evaluate)"
    assert request_text("x") == "[]\nx"
