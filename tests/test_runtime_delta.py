"""ContextDelta in the engine (DESIGN §9, issue 4 item 6): with ``RuntimeConfig.delta`` each
request of an activation is the previous request plus an increment, except where a new seed is
needed (a contradiction, a new tool set, a batch, or pressure); without it every request is the
fresh encoding. Also the per-model ``delta`` setting of the configuration."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.capacity import Budget
from morphz.encoding.compile import Encoding
from morphz.encoding.prefix import BlockCacheMeter
from morphz.encoding.tokens import estimate_tokens
from morphz.errors import InputError
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings, load, make_model
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel, ScriptedModel

AGENT_TOOLS = {"context_tx", "recall"}
_VERSION = re.compile(r"\(mind-version (\d+)\)")
_REF = re.compile(r"\(observation (@e\d+) \(kind (\w+)\)")


def version_of(text: str) -> int:
    return int(_VERSION.findall(text)[-1])


def refs_of(text: str, kind: str) -> list[str]:
    return [ref for ref, k in _REF.findall(text) if k == kind]


def call(name: str, arguments: dict[str, Any], number: int) -> ToolCall:
    return ToolCall(f"call_{number}", name, json.dumps(arguments))


def tx(text: str, number: int) -> ModelResponse:
    return ModelResponse(None, (call("context_tx", {"tx": text}, number),))


def derive(request: ModelRequest, name: str, number: int) -> ModelResponse:
    """A context_tx deriving frame ``name`` from the root request (nothing already sent changes)."""
    root = refs_of(request.encoding, "user_message")[0]
    version = version_of(request.encoding)
    return tx(f"(context-tx (base-version {version}) (derive {name} (from {root}) (n 1)))", number)


@dataclass
class Run:
    """One activation with a recorded request sequence and the fresh encoding each request was
    made from (the last one the engine compiled before sending it)."""

    requests: list[ModelRequest] = field(default_factory=list)
    fresh: list[Encoding] = field(default_factory=list)  # one per request
    compiled: list[Encoding] = field(default_factory=list)
    result: ActivationResult | None = None

    def texts(self) -> list[str]:
        return [r.encoding for r in self.requests]


Agent = Callable[[ModelRequest, int], ModelResponse]


def activate(
    ctx: morphz.Context,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: Agent,
    *,
    delta: bool,
) -> Run:
    run = Run()
    compile_encoding = ctx.encode

    def recording(*args: Any, **kwargs: Any) -> Encoding:
        encoding = compile_encoding(*args, **kwargs)
        run.compiled.append(encoding)
        return encoding

    monkeypatch.setattr(ctx, "encode", recording)

    def model(request: ModelRequest) -> ModelResponse:
        run.requests.append(request)
        run.fresh.append(run.compiled[-1])
        return agent(request, len(run.requests))

    engine = Engine(
        ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(workspace, delta=delta)
    )
    run.result = asyncio.run(engine.run("keep track of the work", session="s1"))
    assert run.result.state == "delivered", run.result.reason
    monkeypatch.undo()
    return run


def kinds(ctx: morphz.Context, run: Run) -> list[object]:
    """What each answered request of ``run`` was, as its model_reply event records it:
    ``"increment"``, or why it was a seed."""
    replies = [e.payload for e in ctx.events() if e.kind == "model_reply" and e.payload]
    mine = [p for p in replies if p.get("activation") == run.result.activation]
    return [p["request"].get("delta", "absent") for p in mine]


def working(request: ModelRequest, step: int) -> ModelResponse:
    """Derives a frame, lists the workspace, searches, derives another frame, replies."""
    if step == 1:
        return derive(request, "work/one", step)
    if step == 2:
        return ModelResponse(None, (call("list_files", {}, step),))
    if step == 3:
        return ModelResponse(None, (call("recall", {"op": "search", "query": "work"}, step),))
    if step == 4:
        return derive(request, "work/two", step)
    return ModelResponse("done")


@pytest.fixture
def workspace(workspace: Path) -> Path:
    """conftest's workspace, holding a file for the file tools to find."""
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    return workspace


def test_delta_requests_extend_the_previous_one(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = activate(ctx, workspace, monkeypatch, working, delta=True)
    texts = run.texts()
    assert len(texts) == 5
    assert texts[0] == run.fresh[0].text  # the seed is the full encoding
    for before, after, fresh in zip(texts, texts[1:], run.fresh[1:], strict=False):
        assert after.startswith(before) and len(after) > len(before)
        increment = after[len(before) :]
        # what arrived since is in the increment, and the kernel figures are current
        new = {o.seq for o in fresh.state.observations} - {
            o.seq for o in run.fresh[texts.index(before)].state.observations
        }
        assert new and all(f"@e{seq}" in increment for seq in new)
        assert version_of(after) == fresh.state.version
    assert "work/two" in texts[-1][len(texts[-2]) :]
    # each increment starts a turn of its own (a message, for the OpenAI-compatible adapter)
    for number, request in enumerate(run.requests):
        assert request.layout is not None
        assert request.layout.turns == tuple(len(t) for t in texts[:number])


@pytest.mark.parametrize("delta", [False, True])
def test_every_request_carries_its_cache_layout(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch, delta: bool
) -> None:
    """Each request is cut and marked so that a cache storing only at its marks finds what the
    previous request stored (the layouts themselves: tests/test_cache_layout.py)."""
    run = activate(ctx, workspace, monkeypatch, working, delta=delta)
    meter = BlockCacheMeter()
    for request in run.requests:
        assert request.layout is not None and request.layout.size == len(request.encoding)
        meter.add(request.encoding, request.layout)
    assert meter.read > 0.5 * meter.total


def test_without_delta_every_request_is_the_fresh_encoding(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = activate(ctx, workspace, monkeypatch, working, delta=False)
    texts = run.texts()
    assert texts == [f.text for f in run.fresh]
    assert len(run.compiled) == len(texts)  # one compile per step, nothing else
    assert not any(after.startswith(before) for before, after in pairwise(texts))
    assert set(kinds(ctx, run)) == {"absent"}  # nothing to say of a request without ContextDelta


def test_retiring_what_an_increment_brought_is_an_increment_and_seed_content_rebuilds(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool result arrived in an increment: retiring it is one more increment. The note
    observed before the activation is in the seed: retiring it rebuilds the seed."""
    note = ctx.observe("external_event", "an old note").ref

    def agent(request: ModelRequest, step: int) -> ModelResponse:
        version = version_of(request.encoding)
        if step == 1:
            return ModelResponse(None, (call("list_files", {}, step),))
        if step == 2:
            listed = refs_of(request.encoding, "tool_result")[-1]
            return tx(f'(context-tx (base-version {version}) (reason "read") (retire {listed}))', 2)
        if step == 3:
            return tx(f'(context-tx (base-version {version}) (reason "old") (retire {note}))', 3)
        if step == 4:
            return ModelResponse(None, (call("recall", {"op": "search", "query": "x"}, step),))
        return ModelResponse("done")

    run = activate(ctx, workspace, monkeypatch, agent, delta=True)
    first, listed, retired, rebuilt, searched = run.texts()
    assert listed.startswith(first)
    listed_ref = refs_of(listed, "tool_result")[-1]
    assert retired.startswith(listed)
    assert f"\n (retired {listed_ref})\n" in retired[len(listed) :]
    # the note was in the seed: a new seed, without either retired observation
    assert not rebuilt.startswith(retired)
    assert rebuilt == run.fresh[3].text
    assert listed_ref not in refs_of(rebuilt, "tool_result")
    assert f"(observation {note} " in first and f"(observation {note} " not in rebuilt
    assert searched.startswith(rebuilt)  # and increments again after it
    assert kinds(ctx, run) == ["first", "increment", "increment", "seed-changed", "increment"]


def test_a_mode_flip_starts_a_new_seed(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused as too long: maintenance (a new tool set, a new seed); a search (still
    maintenance: an increment); a commit that frees room below what the provider said it
    takes, pressure normal: work again (a new seed)."""
    ctx.observe("tool_result", "build log line, status ok\n" * 300)  # about 2,000 tokens

    def agent(request: ModelRequest, step: int) -> ModelResponse:
        if step == 1:
            raise ContextTooLongError("prompt is too long: 1000 tokens > 900 maximum")
        if step == 2:
            return ModelResponse(None, (call("recall", {"op": "search", "query": "x"}, step),))
        if step == 3:
            log = refs_of(request.encoding, "tool_result")[0]
            version = version_of(request.encoding)
            return tx(f'(context-tx (base-version {version}) (reason "read") (retire {log}))', 3)
        return ModelResponse("done")

    run = activate(ctx, workspace, monkeypatch, agent, delta=True)
    texts = run.texts()
    modes = [f.options.scheduling["mode"] for f in run.fresh]
    assert modes == ["work", "maintenance", "maintenance", "work"]
    offered = [{t.name for t in r.tools} for r in run.requests]
    assert offered[1] == offered[2] == AGENT_TOOLS and offered[3] > AGENT_TOOLS
    assert texts[1] == run.fresh[1].text and not texts[1].startswith(texts[0])
    assert texts[2].startswith(texts[1])
    assert texts[3] == run.fresh[3].text and not texts[3].startswith(texts[2])
    assert kinds(ctx, run) == ["tool-set", "increment", "tool-set"]  # the refused one: no reply


def _history(ctx: morphz.Context, texts: list[str]) -> None:
    lines = [json.dumps({"kind": "external_event", "text": text}) for text in texts]
    ctx.import_history(io.StringIO("\n".join(lines)), session="feed")


def _lines(count: int) -> list[str]:
    return [f"log line {i}: " + "status ok " * 20 for i in range(count)]


def test_every_batch_is_a_new_seed(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is not a continuation of the previous request, even when it shows everything
    the previous batch showed and more (which an increment could otherwise express)."""
    small = [f"line {i}: " + "status ok " * 160 for i in range(10)]  # about 400 tokens each
    _history(ctx, [*small, "big: " + "status ok " * 1_550])  # about 3,900: never fits
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_300, reserve=500))

    def agent(request: ModelRequest, step: int) -> ModelResponse:
        if step < 3:  # withdrawn in maintenance: a short error result each time
            return ModelResponse(None, (call("list_files", {}, step),))
        return ModelResponse("done")

    run = activate(ctx, workspace, monkeypatch, agent, delta=True)
    shown = [f.options.only_observations for f in run.fresh]
    assert all(batch is not None for batch in shown)
    first, second, third = (set(batch or ()) for batch in shown)
    assert first < second < third  # each batch adds to the previous one
    assert 11 not in third and set(range(1, 11)) <= first  # the small lines, not the big one
    texts = run.texts()
    assert texts == [f.text for f in run.fresh]
    assert not any(after.startswith(before) for before, after in pairwise(texts))
    assert kinds(ctx, run) == ["first", "maintenance-batch", "maintenance-batch"]


def _sent_tokens(request: ModelRequest) -> int:
    return estimate_tokens(request.encoding) + sum(
        estimate_tokens(json.dumps(t.to_dict())) for t in request.tools
    )


def _deriving(request: ModelRequest, step: int) -> ModelResponse:
    """Derives a new frame at each step (nothing sent is contradicted), then replies."""
    return derive(request, f"work/f{step}", step) if step < 10 else ModelResponse("done")


def test_a_delta_request_reaching_critical_pressure_is_rebuilt(
    db: morphz.Database, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Increments restate what changed, so the delta request grows faster than the fresh
    encoding. With the critical level between the two, the engine sends a new seed instead of a
    request the budget would call critical."""
    measure = db.context("ctx-a", create=True)
    _history(measure, _lines(40))
    sizes = activate(measure, workspace, monkeypatch, _deriving, delta=True)
    assert all(b.startswith(a) for a, b in pairwise(sizes.texts()))
    fresh = max(f.tokens for f in sizes.fresh)
    sent = max(_sent_tokens(r) for r in sizes.requests)
    assert sent - fresh > 300  # room to put the critical level between them
    critical = (fresh + sent) // 2

    ctx = db.context("ctx-b", create=True)
    _history(ctx, _lines(40))
    reserve = 500
    budget = Budget(
        window=64_000, output_reserve=2_000, configured=critical + reserve, reserve=reserve
    )
    ctx.set_budget(budget)
    assert budget.critical == critical
    run = activate(ctx, workspace, monkeypatch, _deriving, delta=True)
    texts = run.texts()
    assert all(f.pressure.level != "critical" for f in run.fresh)
    assert all(_sent_tokens(r) < critical for r in run.requests)
    seeds = [i for i, (a, b) in enumerate(pairwise(texts), 1) if not b.startswith(a)]
    assert seeds, "the delta request was never rebuilt"
    for i in seeds:
        assert texts[i] == run.fresh[i].text
    assert {t.name for t in run.requests[-1].tools} > AGENT_TOOLS  # never in maintenance
    assert "critical" in kinds(ctx, run) and "critical" not in kinds(measure, sizes)


# --- the per-model setting --------------------------------------------------------------------


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "morphz.toml").write_text(text, encoding="utf-8")
    return folder


def test_delta_is_turned_on_per_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(home / ".morphz", '[models."openai:small"]\ndelta = true\n')
    project = _write(
        tmp_path / "project",
        'model = "openai:big"\n[models."openai:big"]\ndelta = false\n'
        '[models."anthropic:claude"]\ndelta = true\n',
    )
    settings = load(home, project, {})
    assert settings.delta_for("anthropic:claude")
    assert not settings.delta_for("openai:big")
    assert not settings.delta_for(settings.model)
    assert not settings.delta_for("openai:other")
    # a project file's [models] replaces the home file's per model, not as a whole
    assert settings.delta_for("openai:small")
    assert settings.delta_messages_for("openai:small")  # increments in messages of their own
    assert not load(tmp_path / "nobody", tmp_path / "nowhere", {}).delta_for("openai:small")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models."openai:x"]\ndelta = "yes"\n', "delta must be true or false"),
        ('[models."openai:x"]\ndelta_messages = 0\n', "delta_messages must be true or false"),
        ('[models."openai:x"]\ncache = true\n', "unknown keys ['cache']"),
        ('models = ["openai:x"]\n', "must be a table of model sections"),
        ('[models]\n"openai:x" = true\n', "must be a table"),
    ],
)
def test_bad_model_sections_are_refused(tmp_path: Path, text: str, message: str) -> None:
    project = _write(tmp_path / "project", text)
    with pytest.raises(InputError, match=re.escape(message)):
        load(tmp_path / "home", project, {})


def test_delta_increments_can_share_the_seed_message(tmp_path: Path) -> None:
    text = '[models."openai:strict"]\ndelta = true\ndelta_messages = false\n'
    settings = load(tmp_path / "home", _write(tmp_path / "project", text), {})
    assert settings.delta_for("openai:strict")
    assert not settings.delta_messages_for("openai:strict")
    assert settings.delta_messages_for("openai:other")


def test_anthropic_prompt_cache_is_configured_in_its_table(tmp_path: Path) -> None:
    project = _write(tmp_path / "project", '[anthropic]\nprompt_cache = "1h"\n')
    settings = load(tmp_path / "home", project, {})
    assert settings.anthropic_prompt_cache == "1h"
    assert load(tmp_path / "home", tmp_path / "nowhere", {}).anthropic_prompt_cache == "5m"
    model = make_model("anthropic:claude", settings, {"ANTHROPIC_API_KEY": "k"})
    assert isinstance(model, AnthropicMessagesModel) and model.prompt_cache == "1h"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[anthropic]\nprompt_cache = "1d"\n', "prompt_cache must be 5m, 1h or off"),
        ('[anthropic]\ncache = "1h"\n', "unknown keys ['cache'] in [anthropic]"),
        ('anthropic = "x"\n', "[anthropic] must be a table"),
    ],
)
def test_bad_anthropic_tables_are_refused(tmp_path: Path, text: str, message: str) -> None:
    project = _write(tmp_path / "project", text)
    with pytest.raises(InputError, match=re.escape(message)):
        load(tmp_path / "home", project, {})


def test_a_too_long_increment_is_retried_as_a_fresh_seed(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider refusing a ContextDelta request as too long first gets a fresh seed (the
    increments piled up); only a refused seed puts the activation into maintenance."""
    refused: list[int] = []

    def agent(request: ModelRequest, step: int) -> ModelResponse:
        if step == 3:
            refused.append(step)
            raise ContextTooLongError("prompt is too long")
        if step < 4:
            return derive(request, f"work/{step}", step)
        return ModelResponse("done")

    run = activate(ctx, workspace, monkeypatch, agent, delta=True)
    texts = run.texts()
    assert refused == [3]
    assert texts[1].startswith(texts[0]) and "\n(context-delta" in texts[1]  # an increment
    assert texts[3] == run.fresh[3].text  # the retry: a fresh seed, not an increment
    assert {t.name for t in run.requests[3].tools} > AGENT_TOOLS  # still working, no maintenance
    assert kinds(ctx, run)[:3] == ["first", "increment", "too-long"]  # the refused: no reply


def test_exec_turns_delta_on_from_the_configuration(tmp_path: Path) -> None:
    """`morphz exec` passes the per-model setting to the engine: with it the second request is
    the first plus an increment; without it, a fresh encoding."""
    script = tmp_path / "script.json"
    steps = [
        {"tool_calls": [{"name": "recall", "arguments": {"op": "search", "query": "x"}}]},
        {"reply": "done"},
    ]
    script.write_text(json.dumps(steps), encoding="utf-8")
    with_delta, without = (_exec_requests(tmp_path, script, delta) for delta in (True, False))
    assert len(with_delta) == len(without) == 2
    assert with_delta[1].startswith(with_delta[0]) and "\n(context-delta" in with_delta[1]
    assert not without[1].startswith(without[0])


def _exec_requests(tmp_path: Path, script: Path, delta: bool) -> list[str]:
    """The request texts of one `morphz exec` run whose project file sets ``delta``."""
    from click.testing import CliRunner

    from morphz.interfaces.cli import main

    setting = f'[models."scripted:{script}"]\ndelta = {str(delta).lower()}\n'
    project = _write(tmp_path / f"project-{delta}", setting)
    seen: list[str] = []
    original = ScriptedModel.request

    async def recording(self: ScriptedModel, request: ModelRequest) -> ModelResponse:
        seen.append(request.encoding)
        return await original(self, request)

    db = tmp_path / f"store-{delta}.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setenv("HOME", str(tmp_path / "home"))
        patch.setattr(ScriptedModel, "request", recording)
        args = ["exec", "hello", "--model", f"scripted:{script}", "--db", str(db)]
        outcome = CliRunner().invoke(main, [*args, "--workspace", str(project)])
    assert outcome.exit_code == 0, outcome.output
    return seen
