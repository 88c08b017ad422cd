"""Runtime scenarios (issue 5, DESIGN §10-§11): whole activations with deterministic models.

Every scenario drives :class:`~morphz.runtime.engine.Engine` with a scripted or function model
(no network), on a temporary store and workspace, and then checks what the store recorded: the
mind, the events, the activation rows and the audit replay.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import morphz
from histories import Clock as HistoryClock
from morphz import events as ev
from morphz.capacity import Budget
from morphz.encoding.tokens import estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime import batches as batches_module
from morphz.runtime.config import Settings
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import (
    AuthError,
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel, ScriptedModel
from morphz.runtime.tools.base import Policy, Tool, ToolRegistry

AGENT_TOOLS = {"context_tx", "recall"}
ALL_TOOLS = AGENT_TOOLS | {
    "edit_file",
    "exec",
    "list_files",
    "read_file",
    "search_files",
    "write_file",
}

# --- reading an encoding the way a model would ------------------------------------------------

_VERSION = re.compile(r"\(mind-version (\d+)\)")
_PRESSURE = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")
_MODE = re.compile(r'\(scheduling \(mode "(\w+)"\)')
_OBSERVATION = re.compile(r"^ \(observation (@e\d+) \(kind (\w+)\) \(session ([^)\s]+)\)", re.M)


def version_of(encoding: str) -> int:
    return int(_VERSION.findall(encoding)[-1])


def pressure_of(encoding: str) -> str:
    return str(_PRESSURE.findall(encoding)[-1][0])


def mode_of(encoding: str) -> str:
    return str(_MODE.findall(encoding)[-1])


@dataclass(frozen=True)
class Seen:
    """An inbox entry as shown: its ref, kind, session and the whole rendered line."""

    ref: str
    kind: str
    session: str
    line: str


def inbox_of(encoding: str) -> list[Seen]:
    lines = encoding.splitlines()
    out: list[Seen] = []
    for index, line in enumerate(lines):
        match = _OBSERVATION.match(line)
        if match:
            # an observation may span lines (its text keeps newlines): take it to the next one
            rest = []
            for more in lines[index + 1 :]:
                if more.startswith((" (observation", "(")):
                    break
                rest.append(more)
            ref, kind, session = match.groups()
            out.append(Seen(ref, kind, session, "\n".join([line, *rest])))
    return out


def frame_body(encoding: str, frame_id: str) -> str | None:
    """The body of a frame as the mind region shows it (one line per frame)."""
    prefix = f" (frame {frame_id} "
    for line in encoding.splitlines():
        if line.startswith(prefix):
            return line[line.index("(body ") + len("(body ") : -2]
    return None


# --- building engines ---------------------------------------------------------------------


def tools(**policies: Policy) -> ToolRegistry:
    """context_tx, recall, the workspace tools and exec, with the default policies overridden."""
    registry = build_tools(Settings())
    for name, policy in policies.items():
        registry.set_policy(name, policy)
    return registry


def engine(
    ctx: morphz.Context,
    model: Any,
    workspace: Path,
    registry: ToolRegistry | None = None,
    **config: Any,
) -> Engine:
    return Engine(ctx, model, registry or tools(), RuntimeConfig(workspace=workspace, **config))


def call(name: str, arguments: dict[str, Any] | str, number: int = 0) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(f"call_{name}_{number}", name, text)


def tx_call(text: str, number: int = 0) -> ToolCall:
    return call("context_tx", {"tx": text}, number)


def reply(text: str) -> ModelResponse:
    return ModelResponse(text)


def acts(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(None, calls)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def events_of(ctx: morphz.Context, result: ActivationResult) -> list[ev.Event]:
    return [ctx.event(ref) for ref in result.events]


def kinds(events: list[ev.Event]) -> list[str]:
    return [e.kind for e in events]


def activation_row(ctx: morphz.Context, activation: str) -> Any:
    return next(a for a in ctx.activations() if a.activation_id == activation)


def finished_event(ctx: morphz.Context, activation: str) -> ev.Event:
    found = [
        e
        for e in ctx.events()
        if e.kind == ev.ACTIVATION_FINISHED and (e.payload or {}).get("activation") == activation
    ]
    assert len(found) == 1, found
    return found[0]


def receipt(event: ev.Event) -> dict[str, Any]:
    """The JSON a context_tx call returned, as its tx_receipt observation holds it."""
    assert event.kind == "tx_receipt", event
    data: dict[str, Any] = json.loads(event.text or "")
    return data


# --- 1. the deployment story --------------------------------------------------------------

PROMPT = "Please prepare the deployment of the checkout service to production."
PRODUCTION = "# current production configuration\nservice: checkout\nregion: cn-shanghai\n"

DEPLOYMENT_SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {
                "name": "context_tx",
                "arguments": {
                    "tx": '(context-tx (base-version {version}) (reason "plan the deployment") '
                    "(derive deployment/target-v1 (from {last_ref}) (fact (region cn-hangzhou))))"
                },
            }
        ]
    },
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "production.yaml"}}]},
    {
        "tool_calls": [
            {
                "name": "context_tx",
                "arguments": {
                    "tx": "(context-tx (base-version {version})\n"
                    '  (reason "current production configuration confirms cn-shanghai")\n'
                    "  (derive deployment/target-v2 (from {last_ref} deployment/target-v1)\n"
                    "    (fact (region cn-shanghai)))\n"
                    "  (relate deployment/target-v2 supersedes deployment/target-v1)\n"
                    "  (retire deployment/target-v1)\n"
                    "  (retire {last_ref}))"
                },
            }
        ]
    },
    {"reply": "The deployment will target cn-shanghai, as production.yaml says."},
]


def test_deployment_story_as_an_agent_run(ctx: morphz.Context, workspace: Path) -> None:
    (workspace / "production.yaml").write_text(PRODUCTION, encoding="utf-8")
    model = ScriptedModel(json.loads(json.dumps(DEPLOYMENT_SCRIPT)))
    result = run(engine(ctx, model, workspace).run(PROMPT, session="ops"))

    assert result.state == "delivered", result.reason
    assert result.reply == "The deployment will target cn-shanghai, as production.yaml says."
    assert result.steps == 4 and model.position == 4
    row = activation_row(ctx, result.activation)
    assert (row.state, row.session_id) == ("delivered", "ops")

    recorded = events_of(ctx, result)
    assert kinds(recorded) == [
        "user_message",
        "model_reply",
        "tx_receipt",
        "model_reply",
        "tool_result",
        "model_reply",
        "tx_receipt",
        "model_reply",
        "agent_reply",  # the delivered reply, in the session's inbox
    ]
    user, _, first, read_call, config, _, second, final, _ = recorded
    assert user.text == PROMPT and user.session_id == "ops"
    assert row.root_seq == user.seq
    assert receipt(first)["ok"] and receipt(second)["ok"]
    assert read_call.payload is not None
    assert read_call.payload["tool_calls"][0]["name"] == "read_file"
    assert "region: cn-shanghai" in (config.text or "")
    assert config.meta == {"tool": "read_file", "call": "call_1_0", "error": False}
    assert final.text == result.reply
    # the whole history: root, activation bookkeeping, the two commits, nothing else
    history = ctx.events()
    bookkeeping = [ev.ACTIVATION_STARTED, ev.ACTIVATION_FINISHED, ev.TX_COMMITTED, ev.TX_COMMITTED]
    assert Counter(kinds(history)) == Counter([*kinds(recorded), *bookkeeping])
    commits = [e for e in history if e.kind == ev.TX_COMMITTED]
    assert [receipt(first)["event"], receipt(second)["event"]] == [e.ref for e in commits]
    assert "(retire deployment/target-v1)" in (commits[1].text or "")
    assert f"(retire {config.ref})" in (commits[1].text or "")
    assert finished_event(ctx, result.activation).payload == {
        "activation": result.activation,
        "state": "delivered",
        "reason": None,
    }

    mind = ctx.mind(all_observations=True)
    new, old = mind.frame("deployment/target-v2"), mind.frame("deployment/target-v1")
    assert new is not None and old is not None
    assert new.lifecycle == "active" and "cn-shanghai" in new.body
    assert set(new.sources) == {config.ref, "deployment/target-v1"}
    assert old.lifecycle == "retired" and "cn-hangzhou" in old.body  # supersede fast path
    assert old.sources == (user.ref,)
    assert ("deployment/target-v2", "supersedes", "deployment/target-v1") in mind.relations
    config_state = mind.observation(config.ref)
    assert config_state is not None and config_state.lifecycle == "retired"
    user_state = mind.observation(user.ref)
    assert user_state is not None and user_state.lifecycle == "active"
    assert ctx.event(config.ref).text == config.text  # retired, still readable
    assert ctx.activations(running_only=True) == []
    assert ctx.audit().ok


def test_deployment_story_through_exec_cli_script_file(ctx: morphz.Context, tmp_path: Path) -> None:
    """The same script loaded from a JSON file (the form ``--model scripted:PATH`` reads)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "production.yaml").write_text(PRODUCTION, encoding="utf-8")
    script = tmp_path / "deploy.json"
    script.write_text(json.dumps(DEPLOYMENT_SCRIPT), encoding="utf-8")
    model = ScriptedModel.from_file(script)
    result = run(engine(ctx, model, workspace).run(PROMPT))
    assert result.state == "delivered"
    frame = ctx.mind().frame("deployment/target-v2")
    assert frame is not None and "cn-shanghai" in frame.body
    assert ctx.audit().ok


# --- 2. maintenance under pressure ----------------------------------------------------------

HISTORY_SIZE = 300
CODENAME_LINE = 17  # the history line that carries the fact the agent must keep


def history_line(i: int) -> str:
    text = (
        f"log line {i}: worker {i % 7} processed batch {i} of the nightly import; "
        f"queue depth {i * 3 % 101}, latency {i % 37} ms, status ok"
    )
    if i == CODENAME_LINE:
        text += "; note: the release codename is aurora"
    return json.dumps({"kind": "external_event", "text": text})


def import_history(ctx: morphz.Context, size: int = HISTORY_SIZE, session: str = "feed") -> None:
    ctx.import_history(
        io.StringIO("\n".join(history_line(i) for i in range(size))), session=session
    )


# hard 29000, critical from 25000, normal below 14500: the 300 lines and the protocol (about
# 25500 tokens, 26600 with every tool schema) are critical but still fit; more than half must go
PRESSURE_BUDGET = Budget(window=40_000, output_reserve=2_000, configured=29_000, reserve=4_000)


@dataclass
class MaintainingAgent:
    """Summarises and retires the oldest history lines (and the receipts it has read) while
    pressure is not normal, keeps the codename as a protected frame, then lists the workspace
    and replies."""

    batch: int = 60
    requests: list[ModelRequest] = field(default_factory=list)
    summaries: int = 0
    listed: bool = False

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        encoding = request.encoding
        offered = {t.name for t in request.tools}
        if pressure_of(encoding) != "normal" and offered == AGENT_TOOLS:
            history = [s for s in inbox_of(encoding) if s.kind == "external_event"]
            chunk = history[: self.batch]
            assert chunk, "nothing left to retire"
            self.summaries += 1
            # processed: the lines summarised now, and the receipts and results already read
            done = [s for s in inbox_of(encoding) if s.kind in ("tx_receipt", "tool_result")]
            refs = " ".join(s.ref for s in chunk + done)
            ops = [
                f"(derive summary/{self.summaries} (from {chunk[0].ref} {chunk[-1].ref})"
                f' (summary "nightly import lines" (count {len(chunk)}) (status ok)))'
            ]
            aurora = [s for s in chunk if "codename is aurora" in s.line]
            if aurora:
                ops.append(f"(derive facts/codename (from {aurora[0].ref}) (codename aurora))")
                ops.append("(protect facts/codename)")
            ops.append(f"(retire {refs})")
            text = (
                f"(context-tx (base-version {version_of(encoding)}) "
                f'(reason "summarised {len(chunk)} processed log lines") {" ".join(ops)})'
            )
            calls = [tx_call(text)]
            if self.summaries == 1:  # an external tool asked for while it is withdrawn
                calls.append(call("list_files", {}, 1))
            return acts(*calls)
        if not self.listed:
            self.listed = True
            return acts(call("list_files", {}))
        return reply("The history is summarised; the release codename is aurora.")


def test_maintenance_under_pressure(ctx: morphz.Context, workspace: Path) -> None:
    import_history(ctx)
    ctx.set_budget(PRESSURE_BUDGET)
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    agent = MaintainingAgent()
    result = run(
        engine(ctx, FunctionModel(agent), workspace).run(
            "Tidy up the import history, then tell me the release codename.", session="ops"
        )
    )
    assert result.state == "delivered", result.reason
    assert "aurora" in (result.reply or "")

    levels = [pressure_of(r.encoding) for r in agent.requests]
    offered = [{t.name for t in r.tools} for r in agent.requests]
    assert levels[0] == "critical"
    for level, names in zip(levels, offered, strict=True):
        if level == "critical":  # external tools withdrawn while critical
            assert names == AGENT_TOOLS
    # maintenance until pressure is below warning, then the external tools are offered again
    resumed = offered.index(ALL_TOOLS)
    assert all(names == AGENT_TOOLS for names in offered[:resumed])
    assert all(names == ALL_TOOLS for names in offered[resumed:])
    assert levels[resumed] in ("normal", "notice")
    assert all(level in ("warning", "critical") for level in levels[:resumed])
    # the withdrawn call was refused and the agent was told; the later one ran
    recorded = events_of(ctx, result)
    results = [e for e in recorded if e.kind == "tool_result"]
    assert len(results) == 2
    assert results[0].meta is not None and results[0].meta["error"] is True
    assert "withdrawn during maintenance" in (results[0].text or "")
    assert results[1].meta is not None and results[1].meta["error"] is False
    assert "notes.txt" in (results[1].text or "")
    receipts = [receipt(e) for e in recorded if e.kind == "tx_receipt"]
    assert len(receipts) == agent.summaries >= 2  # rounds until below warning
    assert all(r["ok"] for r in receipts)

    # pressure is below warning, and the facts are still in the mind
    assert ctx.encode(session="ops").pressure.level in ("normal", "notice")
    assert agent.listed
    mind = ctx.mind(all_observations=True)
    codename = mind.frame("facts/codename")
    assert codename is not None
    assert codename.protected and codename.lifecycle == "active" and "aurora" in codename.body
    summaries = [f for f in mind.frames if f.id.startswith("summary/")]
    assert len(summaries) == agent.summaries
    assert all(f.lifecycle == "active" for f in summaries)
    retired = [
        o for o in mind.observations if o.kind == "external_event" and o.lifecycle == "retired"
    ]
    assert len(retired) == agent.batch * agent.summaries
    aurora_ref = codename.sources[0]
    assert "codename is aurora" in (ctx.event(aurora_ref).text or "")  # retired, still readable
    assert any(o.ref == aurora_ref for o in retired)
    for commit in (e for e in ctx.events() if e.kind == ev.TX_COMMITTED):
        assert commit.payload is not None and commit.payload["reason"]
    assert ctx.audit().ok


def test_maintenance_encoding_matches_the_request(ctx: morphz.Context, workspace: Path) -> None:
    """The kernel the model reads must describe the request it is in: the mode is maintenance
    exactly when only context_tx and recall are offered, and the pressure figure covers the
    tool schemas actually sent (DESIGN §10: pressure is estimated on the complete request; in
    maintenance it counts the work tool set, the request that resuming work would send)."""
    import_history(ctx)
    ctx.set_budget(PRESSURE_BUDGET)
    agent = MaintainingAgent()
    result = run(engine(ctx, FunctionModel(agent), workspace).run("Tidy up.", session="ops"))
    assert result.state == "delivered", result.reason
    for request in agent.requests:
        names = {t.name for t in request.tools}
        mode = mode_of(request.encoding)
        assert (mode == "maintenance") == (names == AGENT_TOOLS), (mode, sorted(names))
        shown = int(_PRESSURE.findall(request.encoding)[-1][1])
        # the figure shown covers the tool schemas actually sent (rounding: one token a part)
        assert shown + len(request.tools) + 1 >= _request_tokens(request), (shown, sorted(names))


def _request_tokens(request: ModelRequest) -> int:
    """The estimate of the complete request: encoding text plus the tool schemas sent."""
    return estimate_tokens(request.encoding) + sum(
        estimate_tokens(json.dumps(t.to_dict())) for t in request.tools
    )


# hard 13,000: the 300 lines (about 20,000 tokens) cannot be shown whole, while what no agent
# can retire (the protocol, the tool schemas, the system message, the agent's summaries: about
# 6,250 tokens) stays under notice (6,500), so retiring the history brings pressure to normal
BATCH_BUDGET = Budget(window=32_000, output_reserve=2_000, configured=13_000, reserve=2_000)


def test_a_batch_is_served_when_the_request_cannot_fit(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Over the hard limit the model sees the root request and the oldest observations that
    fit; the others keep their state until a later batch."""
    import_history(ctx)
    budget = BATCH_BUDGET
    ctx.set_budget(budget)
    agent = MaintainingAgent()
    result = run(
        engine(ctx, FunctionModel(agent), workspace).run("Tidy up the history.", session="ops")
    )
    assert result.state == "delivered", result.reason
    root = ctx.event(result.events[0])
    first = inbox_of(agent.requests[0].encoding)
    shown = [s.ref for s in first if s.kind == "external_event"]
    assert 0 < len(shown) < HISTORY_SIZE
    assert shown == [f"@e{i}" for i in range(1, len(shown) + 1)]  # the oldest ones
    assert root.ref in {s.ref for s in first}
    assert {t.name for t in agent.requests[0].tools} == AGENT_TOOLS
    for request in agent.requests:
        assert _request_tokens(request) <= budget.hard
    # the lines the batches showed were summarised and retired by the agent's own commits,
    # none behind its back (work resumes below warning: the rest stay active)
    mind = ctx.mind(all_observations=True)
    history = [o for o in mind.observations if o.kind == "external_event"]
    assert len(history) == HISTORY_SIZE
    retired = {o.ref for o in history if o.lifecycle == "retired"}
    assert set(shown) <= retired
    assert all(o.lifecycle in ("retired", "active") for o in history)
    retired_by_tx = set()
    for commit in (e for e in ctx.events() if e.kind == ev.TX_COMMITTED):
        retired_by_tx |= set(re.findall(r"@e\d+", commit.text or ""))
    assert retired <= retired_by_tx
    codename = mind.frame("facts/codename")
    assert codename is not None and codename.protected
    assert ctx.audit().ok


def test_a_batch_shows_the_results_of_the_previous_step(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A batch holds the current request and its causal dependencies: the agent's previous
    tool calls and their results (the receipt of its last context_tx, committed or refused)
    belong to them, or the agent cannot tell whether its last transaction landed."""
    import_history(ctx)
    ctx.set_budget(BATCH_BUDGET)
    agent = MaintainingAgent()
    result = run(engine(ctx, FunctionModel(agent), workspace).run("Tidy up.", session="ops"))
    assert result.state == "delivered", result.reason
    steps: list[list[str]] = []  # the observations each step's tool calls produced
    for event in events_of(ctx, result)[1:]:
        if event.kind == "model_reply":
            steps.append([])
        else:
            steps[-1].append(event.ref)
    for number, request in enumerate(agent.requests[1:], start=1):
        shown = {s.ref for s in inbox_of(request.encoding)}
        missing = sorted(set(steps[number - 1]) - shown)
        assert not missing, f"request {number} does not show {missing}"


def test_a_batch_is_served_whenever_the_minimum_request_fits(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The minimum maintenance request (protocol, kernel, context_tx and recall, the root request)
    is about 2,200 tokens here; with a 4,000-token hard limit a batch must be served, not a
    failure. (The batch selector must not charge the external tool schemas, which a maintenance
    request does not send, nor the rendering overhead of observations left out, to the fixed
    part.)"""
    import_history(ctx)
    budget = Budget(window=32_000, output_reserve=2_000, configured=4_000, reserve=500)
    ctx.set_budget(budget)
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("seen")

    result = run(engine(ctx, FunctionModel(answer), workspace).run("Tidy up.", session="ops"))
    assert result.state == "delivered", result.reason
    assert len(requests) == 1
    assert {t.name for t in requests[0].tools} == AGENT_TOOLS
    assert _request_tokens(requests[0]) <= budget.hard
    assert ctx.event(result.events[0]).ref in {s.ref for s in inbox_of(requests[0].encoding)}


def record_batches(ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tokens of every maintenance batch ``ctx`` compiles from now on, in order."""
    batches: list[int] = []
    compile_encoding = ctx.encode

    def recording(*args: Any, **kwargs: Any) -> Any:
        encoding = compile_encoding(*args, **kwargs)
        if encoding.options.only_observations is not None:
            batches.append(encoding.tokens)
        return encoding

    monkeypatch.setattr(ctx, "encode", recording)
    return batches


def _batch_run(
    path: Path, workspace: Path, hard: int
) -> tuple[list[int], ActivationResult, list[ModelRequest]]:
    """A maintenance run on a fresh store whose hard limit is ``hard``: the tokens of every
    batch compiled (the first is the minimum request), the result, and what the model saw."""
    db = morphz.open(path, now=HistoryClock())
    try:
        ctx = db.context("context-default", create=True)
        import_history(ctx)
        ctx.set_budget(Budget(window=32_000, output_reserve=0, configured=hard, reserve=100))
        batches = record_batches(ctx, pytest.MonkeyPatch())
        seen: list[ModelRequest] = []

        def answer(request: ModelRequest) -> ModelResponse:
            seen.append(request)
            return reply("seen")

        eng = engine(ctx, FunctionModel(answer), workspace)
        eng.clock = lambda: "2026-08-04T10:00:00+00:00"
        return batches, run(eng.run("Tidy up.", session="ops")), seen
    finally:
        db.close()


def test_the_minimum_is_served_when_only_it_fits(tmp_path: Path, workspace: Path) -> None:
    """DESIGN §10: the activation fails only when even the minimum request cannot fit. With
    the hard limit 5 tokens above the minimum, the allowance kept for the session-directory
    refs of optional observations leaves no room for any: the minimum alone is the batch."""
    probe, _, _ = _batch_run(tmp_path / "probe.db", workspace, 3_000)
    minimum = probe[0]
    batches, result, seen = _batch_run(tmp_path / "real.db", workspace, minimum + 5)
    assert batches[0] == minimum
    assert result.state == "delivered", result.reason
    (request,) = seen
    assert _request_tokens(request) <= minimum + 5


def test_a_batch_is_checked_against_the_hard_limit(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-observation estimates only choose a batch: the batch is compiled and, when it is
    over the hard limit, the newest of its optional observations are left out until it fits.
    Here every estimate is half of what showing the observation really costs."""
    import_history(ctx)
    budget = Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=1_000)
    ctx.set_budget(budget)
    real = batches_module.observation_costs

    def halved(encoding: Any, factor: float) -> dict[int, int]:
        return {seq: cost // 2 for seq, cost in real(encoding, factor).items()}

    monkeypatch.setattr(batches_module, "observation_costs", halved)
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("seen")

    result = run(engine(ctx, FunctionModel(answer), workspace).run("Tidy up.", session="ops"))
    assert result.state == "delivered", result.reason
    (request,) = requests
    assert _request_tokens(request) <= budget.hard
    shown = [s.ref for s in inbox_of(request.encoding) if s.kind == "external_event"]
    assert len(shown) > HISTORY_SIZE // 10  # still a useful batch: the oldest that fit
    assert shown == [f"@e{i}" for i in range(1, len(shown) + 1)]


@pytest.mark.parametrize(("hard", "feeds"), [(6_000, 1), (16_000, 1), (16_000, 12)])
def test_a_batch_uses_the_room_it_has(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch, hard: int, feeds: int
) -> None:
    """The accounting is close: the batch fits at its first compile (after the one of the
    minimum request), and leaves unused less than two history lines' worth of the hard limit
    (and the rounding of each observation's estimate). With the history spread over sessions
    that the session directory lists, the refs it lists grow with the batch too."""
    for feed in range(feeds):
        import_history(ctx, HISTORY_SIZE // feeds, session=f"feed-{feed}")
    budget = Budget(window=32_000, output_reserve=2_000, configured=hard, reserve=1_000)
    ctx.set_budget(budget)
    batches = record_batches(ctx, monkeypatch)
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("seen")

    eng = engine(ctx, FunctionModel(answer), workspace)
    eng.clock = lambda: ctx.events()[-1].time  # the feeds are recent: the directory lists them
    result = run(eng.run("Tidy up.", session="ops"))
    assert result.state == "delivered", result.reason
    assert len(batches) == 2  # the minimum, then the batch
    listed = re.findall(r"\(session feed-\d+ \(level full\)", requests[0].encoding)
    assert len(listed) == feeds
    (request,) = requests
    assert _request_tokens(request) <= batches[-1] <= hard
    shown = inbox_of(request.encoding)
    line = max(estimate_tokens(s.line) for s in shown)
    assert hard - batches[-1] < 2 * line + len(shown)  # estimates round up by under a token


def test_failure_when_even_the_minimum_request_cannot_fit(
    ctx: morphz.Context, workspace: Path
) -> None:
    import_history(ctx)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=1_500, reserve=100))
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return reply("unreachable")

    result = run(engine(ctx, FunctionModel(answer), workspace).run("Tidy up.", session="ops"))
    assert result.state == "failed"
    assert result.reason is not None and "minimum maintenance request" in result.reason
    assert requests == []  # the model was never sent a request that cannot fit
    payload = finished_event(ctx, result.activation).payload
    assert payload == {"activation": result.activation, "state": "failed", "reason": result.reason}
    assert activation_row(ctx, result.activation).state == "failed"
    assert ctx.event(result.events[0]).text == "Tidy up."  # the request stays recorded
    assert ctx.audit().ok


# --- 3. two sessions committing concurrently ------------------------------------------------


@dataclass
class Reviser:
    """Revises ``frame`` (keeping its body, adding ``note``) on the version it reads; both
    agents read before either commits (``barrier``). When its receipt is a conflict it re-reads
    the frame and the version and merges: its note on top of the body it now sees."""

    session: str
    frame: str
    note: str
    barrier: asyncio.Barrier
    requests: list[ModelRequest] = field(default_factory=list)
    conflicts: int = 0

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        encoding = request.encoding
        if len(self.requests) == 1:
            await self.barrier.wait()  # the other agent has read the same version by now
            return acts(self.revise(encoding))
        mine = [s for s in inbox_of(encoding) if s.session == self.session]
        last = [s for s in mine if s.kind == "tx_receipt"][-1]
        if "conflict" in last.line:
            self.conflicts += 1
            return acts(self.revise(encoding, len(self.requests)))
        return reply(f"{self.frame} now notes {self.note}")

    def revise(self, encoding: str, number: int = 0) -> ToolCall:
        body = frame_body(encoding, self.frame)
        assert body is not None
        text = (
            f"(context-tx (base-version {version_of(encoding)}) (reason {json.dumps(self.note)}) "
            f"(revise {self.frame} {body} (note {self.note})))"
        )
        return tx_call(text, number)


def _base_mind(ctx: morphz.Context) -> None:
    ctx.commit(
        "(context-tx (base-version 0) (create shared/plan (plan (step build)))"
        " (create team/a (owner alice)) (create team/b (owner bob)))"
    )


async def _pair(ctx: morphz.Context, workspace: Path, frames: tuple[str, str]) -> list[Any]:
    barrier = asyncio.Barrier(2)
    agents = [
        Reviser("sa", frames[0], "from-a", barrier),
        Reviser("sb", frames[1], "from-b", barrier),
    ]
    results = await asyncio.gather(
        *(
            engine(ctx, FunctionModel(agent), workspace).run(
                f"add {agent.note} to {agent.frame}", session=agent.session
            )
            for agent in agents
        )
    )
    return [*agents, *results]


def _receipts(ctx: morphz.Context, session: str) -> list[tuple[ev.Event, dict[str, Any]]]:
    return [
        (e, receipt(e)) for e in ctx.events() if e.kind == "tx_receipt" and e.session_id == session
    ]


def test_two_sessions_commit_to_different_frames(ctx: morphz.Context, workspace: Path) -> None:
    _base_mind(ctx)
    a, b, ra, rb = run(_pair(ctx, workspace, ("team/a", "team/b")))
    assert (ra.state, rb.state) == ("delivered", "delivered")
    assert a.conflicts == b.conflicts == 0
    seen = [version_of(agent.requests[0].encoding) for agent in (a, b)]
    assert seen == [1, 1]  # both wrote on the same base
    receipts = [_receipts(ctx, s) for s in ("sa", "sb")]
    assert [len(r) for r in receipts] == [1, 1]
    both = [data for ((_, data),) in receipts]
    assert all(data["ok"] and data["base_version"] == 1 for data in both)
    assert sorted(data["rebased"] for data in both) == [False, True]
    assert sorted(data["after_version"] for data in both) == [2, 3]
    mind = ctx.mind()
    frame_a, frame_b = mind.frame("team/a"), mind.frame("team/b")
    assert frame_a is not None and frame_b is not None
    assert frame_a.body == "(owner alice) (note from-a)"
    assert frame_b.body == "(owner bob) (note from-b)"
    assert len(ctx.activations()) == 2
    assert ctx.audit().ok


def test_two_sessions_revise_the_same_frame_one_merges(
    ctx: morphz.Context, workspace: Path
) -> None:
    _base_mind(ctx)
    a, b, ra, rb = run(_pair(ctx, workspace, ("shared/plan", "shared/plan")))
    assert (ra.state, rb.state) == ("delivered", "delivered"), (ra.reason, rb.reason)
    assert sorted([a.conflicts, b.conflicts]) == [0, 1]
    loser, winner = (a, b) if a.conflicts else (b, a)
    refused, merged = _receipts(ctx, loser.session)
    assert [data["ok"] for _, data in _receipts(ctx, winner.session)] == [True]
    # the refusal arrived as a tx_receipt observation with an error
    event, data = refused
    assert event.meta == {"tool": "context_tx", "call": "call_context_tx_0", "error": True}
    assert data["ok"] is False and data["error"]["code"] == "conflict"
    assert "content:shared/plan" in data["error"]["details"]["changed_boundaries"]
    assert data["error"]["details"]["current_version"] == 2
    # the agent saw it in its next encoding, re-read, and merged on the new version
    second = loser.requests[1].encoding
    assert event.ref in {s.ref for s in inbox_of(second) if s.kind == "tx_receipt"}
    assert version_of(second) == 2
    assert f"(note {winner.note})" in (frame_body(second, "shared/plan") or "")
    assert merged[1]["ok"] and merged[1]["base_version"] == 2 and not merged[1]["rebased"]
    frame = ctx.mind().frame("shared/plan")
    assert frame is not None
    assert frame.body == f"(plan (step build)) (note {winner.note}) (note {loser.note})"
    assert frame.revision == 3
    commits = [e for e in ctx.events() if e.kind == ev.TX_COMMITTED]
    assert len(commits) == 3  # the base, the winner, the merge: the refusal changed nothing
    assert ctx.audit().ok


# --- 4. a tool timing out -------------------------------------------------------------------


def test_a_tool_timing_out(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            return acts(call("exec", {"command": "sleep 5", "timeout_s": 0.2}))
        told = [s for s in inbox_of(request.encoding) if s.kind == "tool_result"]
        assert told and "timed out" in told[-1].line
        return reply("the command timed out; I stopped it")

    registry = tools(exec="allow")
    result = run(engine(ctx, FunctionModel(agent), workspace, registry).run("run the job"))
    assert result.state == "delivered", result.reason
    assert result.reply == "the command timed out; I stopped it"
    recorded = events_of(ctx, result)
    assert kinds(recorded) == [
        "user_message",
        "model_reply",
        "tool_result",
        "model_reply",
        "agent_reply",
    ]
    timed_out = recorded[2]
    assert timed_out.meta == {"tool": "exec", "call": "call_exec_0", "error": True}
    assert (timed_out.text or "").startswith("$ sleep 5\n[timed out after 0.2 s and was killed")
    assert timed_out.clock == recorded[0].clock + 1  # a real tool result ticks the clock
    assert activation_row(ctx, result.activation).state == "delivered"
    assert ctx.audit().ok


# --- 5. malformed tool arguments ------------------------------------------------------------


def test_malformed_tool_arguments(ctx: morphz.Context, workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n", encoding="utf-8")
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        encoding = request.encoding
        if len(requests) == 1:
            return acts(
                call("context_tx", "{not json", 0),
                call("context_tx", "[1, 2]", 1),
                call("deploy", {"where": "prod"}, 2),
                call("list_files", {}, 3),
            )
        if len(requests) == 2:
            root = inbox_of(encoding)[0].ref
            text = (
                f"(context-tx (base-version {version_of(encoding)}) "
                f"(derive task/files (from {root}) (files a.txt)))"
            )
            return acts(tx_call(text))
        return reply("listed: a.txt")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("what is in the folder?"))
    assert result.state == "delivered", result.reason

    recorded = events_of(ctx, result)
    assert kinds(recorded) == [
        "user_message",
        "model_reply",
        "tx_receipt",
        "tx_receipt",
        "tool_result",
        "tool_result",
        "model_reply",
        "tx_receipt",
        "model_reply",
        "agent_reply",
    ]
    asked = recorded[1].payload
    assert asked is not None
    assert [c["arguments"] for c in asked["tool_calls"]][:2] == ["{not json", "[1, 2]"]  # verbatim
    not_json, not_object, unknown, listed = recorded[2:6]
    for event in (not_json, not_object, unknown):
        assert event.meta is not None and event.meta["error"] is True
    assert "not valid JSON" in (not_json.text or "")
    assert "must be a JSON object" in (not_object.text or "")
    assert "no tool named 'deploy'" in (unknown.text or "")
    assert listed.meta is not None and listed.meta["error"] is False  # the valid call still ran
    assert "a.txt" in (listed.text or "")
    # the agent saw every error in its next encoding
    shown = {s.ref: s.line for s in inbox_of(requests[1].encoding)}
    for event in (not_json, not_object, unknown, listed):
        assert event.ref in shown
    assert "not valid JSON" in shown[not_json.ref]
    # nothing lost: the corrected transaction committed, the history holds every step
    assert receipt(recorded[7])["ok"]
    frame = ctx.mind().frame("task/files")
    assert frame is not None and frame.body == "(files a.txt)"
    assert ctx.audit().ok


# --- 6. a provider error ----------------------------------------------------------------------


def test_a_provider_error_fails_the_activation(ctx: morphz.Context, workspace: Path) -> None:
    calls = 0

    def agent(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            root = inbox_of(request.encoding)[0].ref
            text = (
                f"(context-tx (base-version {version_of(request.encoding)}) "
                f"(derive task/goal (from {root}) (goal deploy)))"
            )
            return acts(tx_call(text))
        raise AuthError("the API key was rejected (401)")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("deploy it", session="s1"))
    assert result.state == "failed"
    assert result.reply is None
    assert result.reason == "model provider error (provider-auth): the API key was rejected (401)"
    finished = finished_event(ctx, result.activation)
    assert finished.payload is not None
    unanswered = finished.payload.pop("unanswered")  # the request the error left without a reply
    assert set(unanswered) == {"failed_sent"} and set(unanswered["failed_sent"]) == {
        "bytes",
        "prefix",
    }
    assert finished.payload == {
        "activation": result.activation,
        "state": "failed",
        "reason": result.reason,
    }
    assert finished.session_id == "s1"
    row = activation_row(ctx, result.activation)
    assert row.state == "failed" and row.finished_seq == finished.seq
    # the root request and everything before the failure stay recorded
    recorded = events_of(ctx, result)
    assert kinds(recorded) == ["user_message", "model_reply", "tx_receipt"]
    assert recorded[0].text == "deploy it"
    assert receipt(recorded[2])["ok"]
    assert ctx.mind().frame("task/goal") is not None
    assert [e.kind for e in ctx.events()][-1] == ev.ACTIVATION_FINISHED
    assert ctx.audit().ok


def test_a_script_running_out_is_a_bad_response(ctx: morphz.Context, workspace: Path) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "recall", "arguments": {"op": "search"}}]}])
    result = run(engine(ctx, model, workspace).run("hello"))
    assert result.state == "failed"
    assert result.reason is not None and "provider-bad-response" in result.reason
    assert ctx.audit().ok


# --- 7. an approval denied --------------------------------------------------------------------


def _writer(requests: list[ModelRequest]) -> Callable[[ModelRequest], ModelResponse]:
    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            return acts(call("write_file", {"path": "out.txt", "content": "data\n"}))
        return reply("done")

    return agent


def _check_denied(
    ctx: morphz.Context, workspace: Path, result: ActivationResult, requests: list[ModelRequest]
) -> None:
    assert result.state == "delivered", result.reason
    assert not (workspace / "out.txt").exists()  # the tool did not run
    recorded = events_of(ctx, result)
    assert kinds(recorded) == [
        "user_message",
        "model_reply",
        "approval_request",
        "approval_result",
        "tool_result",
        "model_reply",
        "agent_reply",
    ]
    asked, answer, outcome = recorded[2:5]
    assert asked.payload == {
        "tool": "write_file",
        "arguments": {"path": "out.txt", "content": "data\n"},
        "call": "call_write_file_0",
        "activation": result.activation,  # recovery: a request of this activation's call
    }
    assert answer.text == "write_file: denied"
    assert answer.meta == {"request": asked.ref, "approved": False, "tool": "write_file"}
    assert outcome.meta == {"tool": "write_file", "call": "call_write_file_0", "error": True}
    assert outcome.text == "write_file was not approved"
    # the agent is told: the decision and the refusal are in its next encoding
    shown = {s.ref: s.line for s in inbox_of(requests[1].encoding)}
    assert "denied" in shown[answer.ref]
    assert "not approved" in shown[outcome.ref]
    assert ctx.audit().ok


def test_an_approval_denied_by_the_approver(ctx: morphz.Context, workspace: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def approver(tool: Tool, args: dict[str, Any]) -> bool:
        asked.append((tool.name, args))
        return False

    requests: list[ModelRequest] = []
    registry = tools(write_file="ask")
    eng = engine(ctx, FunctionModel(_writer(requests)), workspace, registry, approver=approver)
    result = run(eng.run("write the output"))
    assert asked == [("write_file", {"path": "out.txt", "content": "data\n"})]
    _check_denied(ctx, workspace, result, requests)


def test_an_approval_denied_by_default(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []
    registry = tools(write_file="ask")
    eng = engine(ctx, FunctionModel(_writer(requests)), workspace, registry, ask_default=False)
    _check_denied(ctx, workspace, run(eng.run("write the output")), requests)


def test_an_approval_granted_runs_the_tool(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []
    registry = tools(write_file="ask")
    eng = engine(ctx, FunctionModel(_writer(requests)), workspace, registry, ask_default=True)
    result = run(eng.run("write the output"))
    assert result.state == "delivered"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "data\n"
    answer = [e for e in events_of(ctx, result) if e.kind == "approval_result"]
    assert [e.text for e in answer] == ["write_file: approved"]


def test_a_denied_tool_is_not_offered_and_not_run(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []
    registry = tools(write_file="deny")
    result = run(engine(ctx, FunctionModel(_writer(requests)), workspace, registry).run("write"))
    assert result.state == "delivered"
    assert "write_file" not in {t.name for t in requests[0].tools}
    assert not (workspace / "out.txt").exists()
    recorded = events_of(ctx, result)
    assert "approval_request" not in kinds(recorded)
    outcome = [e for e in recorded if e.kind == "tool_result"]
    assert [e.text for e in outcome] == ["write_file was not approved"]


# --- 8. context too long from the provider ----------------------------------------------------


def test_context_too_long_enters_maintenance(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            raise ContextTooLongError("this model's maximum context length is 8192 tokens")
        return reply("ok")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("hello"))
    assert result.state == "delivered", result.reason
    assert {t.name for t in requests[0].tools} == ALL_TOOLS
    # the next request offers only context_tx and recall, and says so
    assert {t.name for t in requests[1].tools} == AGENT_TOOLS
    assert mode_of(requests[1].encoding) == "maintenance"
    # the refusal left no event of its own: the reply that followed records it
    (answered,) = [e for e in events_of(ctx, result) if e.kind == "model_reply"]
    sent = (answered.payload or {})["request"]
    assert sent["refused"] == 1 and sent["said"].startswith("this model's maximum")
    assert isinstance(sent["ceiling"], int) and sent["ceiling"] > 0


def test_context_too_long_again_in_maintenance_fails(ctx: morphz.Context, workspace: Path) -> None:
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        raise ContextTooLongError("too long")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("hello"))
    assert result.state == "failed"
    # each refusal lowers the ceiling by a quarter (the message states no numbers) until even
    # the minimum maintenance request is above it: then nothing more is sent
    assert result.reason is not None and "even the minimum maintenance request" in result.reason
    assert result.reason.endswith("(the provider refused larger: too long)")
    assert len(requests) == 2
    payload = finished_event(ctx, result.activation).payload or {}
    # the two refused requests no reply followed are recorded with the end (review 16c)
    unanswered = payload.pop("unanswered")
    assert (unanswered["refused"], unanswered["said"]) == (2, "too long")
    assert payload == {"activation": result.activation, "state": "failed", "reason": result.reason}


# --- 9. the step limit ------------------------------------------------------------------------


def test_the_root_request_is_protected_until_delivered(
    ctx: morphz.Context, workspace: Path
) -> None:
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        root = inbox_of(request.encoding)[0].ref
        if len(requests) == 1:
            text = (
                f"(context-tx (base-version {version_of(request.encoding)}) "
                f'(reason "done with it") (retire {root}))'
            )
            return acts(tx_call(text))
        return reply("ok")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("keep me", session="s1"))
    assert result.state == "delivered"
    first = requests[0].encoding
    assert f"(activation {result.activation})" in first
    assert '(objectives "keep me")' in first
    root = result.events[0]
    assert f"(running-activations ({result.activation} (session s1) (root {root})" in first
    refused = receipt(events_of(ctx, result)[2])
    assert refused["ok"] is False and refused["error"]["code"] == "protected"
    state = ctx.mind().observation(root)
    assert state is not None and state.lifecycle == "active"
    # delivered: the root is no longer held
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "answered") (retire {root}))')
    assert ctx.audit().ok


def test_provider_usage_calibrates_the_pressure_figure(
    ctx: morphz.Context, workspace: Path
) -> None:
    requests: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            search = call("recall", {"op": "search", "query": "x"})
            return ModelResponse(None, (search,), Usage(input_tokens=5_000, output_tokens=20))
        return reply("ok")

    result = run(engine(ctx, FunctionModel(agent), workspace).run("hello"))
    assert result.state == "delivered"
    assert "(figure estimated)" in requests[0].encoding
    assert "(figure calibrated)" in requests[1].encoding
    first = events_of(ctx, result)[1]
    assert first.payload is not None
    assert first.payload["usage"] == {"input": 5_000, "output": 20, "cached": 0}


def test_a_new_engine_starts_with_what_the_context_learned(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Calibration is kept with the context per model: the first request of a new engine (a
    restart, the next `morphz exec`) is already calibrated; another model's is not."""

    def measured(request: ModelRequest) -> ModelResponse:
        return ModelResponse("ok", (), Usage(input_tokens=9_000, output_tokens=5))

    result = run(engine(ctx, FunctionModel(measured, "openai:m"), workspace).run("hello"))
    assert result.state == "delivered"
    seen: list[ModelRequest] = []

    def again(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    run(engine(ctx, FunctionModel(again, "openai:m"), workspace).run("again"))
    assert "(figure calibrated)" in seen[0].encoding
    assert ctx.calibration("openai:m").samples == 1
    run(engine(ctx, FunctionModel(again, "openai:other"), workspace).run("other"))
    assert "(figure estimated)" in seen[1].encoding


def test_the_activation_records_its_objective(ctx: morphz.Context, workspace: Path) -> None:
    seen: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return reply("ok")

    eng = engine(ctx, FunctionModel(agent), workspace)
    result = run(eng.run("please check the build", session="s1", objective="green build"))
    assert f'({result.activation} (session s1) (root @e1) (objective "green build"))' in (
        seen[0].encoding
    )
    started = next(e for e in ctx.events() if e.kind == "activation_started")
    assert started.payload is not None and started.payload["objective"] == "green build"
    run(eng.run("   ", session="s2"))  # a blank prompt: no objective, not an error
    assert "(objective" not in seen[1].encoding.split("(running-activations")[1].split("\n")[0]


def test_the_step_limit(ctx: morphz.Context, workspace: Path) -> None:
    def agent(request: ModelRequest) -> ModelResponse:
        return acts(call("recall", {"op": "search", "query": "deploy"}))

    result = run(engine(ctx, FunctionModel(agent), workspace, step_limit=3).run("loop forever"))
    assert result.state == "failed"
    assert result.reason == "the step limit (3) was reached"
    assert result.steps == 3
    recorded = events_of(ctx, result)
    assert kinds(recorded) == ["user_message"] + ["model_reply", "recall_result"] * 3
    assert finished_event(ctx, result.activation).payload == {
        "activation": result.activation,
        "state": "failed",
        "reason": "the step limit (3) was reached",
    }
    assert ctx.audit().ok


# --- 10. restart --------------------------------------------------------------------------------


def test_an_activation_left_running_shows_as_interrupted(
    open_db: Callable[[], morphz.Database],
) -> None:
    db = open_db()
    ctx = db.context("context-default", create=True)
    root = ctx.observe("user_message", "prepare the deployment", session="s1")
    left = ctx.start_activation("s1", root.ref)
    done = ctx.start_activation("s1")
    ctx.finish_activation(done, "delivered")
    db.close()  # the process dies with the activation running

    ctx = open_db().context("context-default")
    before = ctx.events()
    assert [(a.activation_id, a.state) for a in ctx.activations(running_only=True)] == [
        (left, "running")
    ]
    assert ctx.interrupt_running() == [left]
    rows = {a.activation_id: a.state for a in ctx.activations()}
    assert rows == {left: "interrupted", done: "delivered"}
    assert ctx.activations(running_only=True) == []
    finished = ctx.events()[-1]
    assert finished.kind == ev.ACTIVATION_FINISHED
    assert finished.payload is not None
    assert (finished.payload["activation"], finished.payload["state"]) == (left, "interrupted")
    assert ctx.events()[: len(before)] == before  # every recorded fact is still there
    assert ctx.interrupt_running() == []  # nothing left to interrupt
    # the root request is no longer held by running work
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "handled") (retire {root.ref}))')
    assert ctx.audit().ok


_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    import morphz
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import Settings
    from morphz.runtime.engine import Engine, RuntimeConfig
    from morphz.runtime.models.base import ModelResponse, ToolCall
    from morphz.runtime.models.scripted import FunctionModel

    db_path, workspace = sys.argv[1], Path(sys.argv[2])
    calls = 0

    async def agent(request):
        global calls
        calls += 1
        if calls == 1:
            version = request.encoding.split("(mind-version ")[1].split(")")[0]
            tx = f"(context-tx (base-version {version}) (create task/started (step one)))"
            return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))
        print("waiting", flush=True)
        while True:  # the model never answers: the parent kills this process here
            await asyncio.sleep(60)

    db = morphz.open(db_path)
    ctx = db.context("context-default", create=True)
    engine = Engine(ctx, FunctionModel(agent), build_tools(Settings()),
                    RuntimeConfig(workspace=workspace))
    asyncio.run(engine.run("prepare the deployment", session="s1"))
    """
)


@pytest.mark.slow
def test_a_killed_process_leaves_an_interrupted_activation(tmp_path: Path) -> None:
    path = tmp_path / "morphz.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = proc.stdout.readline()
        assert line == "waiting\n", proc.stderr.read()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        assert [e.kind for e in ctx.events()] == [
            "user_message",
            ev.ACTIVATION_STARTED,
            "model_reply",
            ev.TX_COMMITTED,
            "tx_receipt",
        ]
        (running,) = ctx.activations(running_only=True)
        assert ctx.interrupt_running() == [running.activation_id]
        (row,) = ctx.activations()
        assert row.state == "interrupted"
        assert ctx.mind().frame("task/started") is not None
        assert ctx.audit().ok


def test_a_cancelled_activation_is_recorded_as_interrupted(
    ctx: morphz.Context, workspace: Path
) -> None:
    waiting = asyncio.Event()

    async def agent(request: ModelRequest) -> ModelResponse:
        waiting.set()
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")

    async def scenario() -> None:
        task = asyncio.create_task(engine(ctx, FunctionModel(agent), workspace).run("hello"))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    (row,) = ctx.activations()
    assert row.state == "interrupted"
    finished = ctx.events()[-1]
    assert finished.payload is not None and finished.payload["state"] == "interrupted"
    assert finished.payload["reason"] == "the process stopped mid-activation"
    assert ctx.audit().ok


# --- 11. a hundred sessions on one context ---------------------------------------------------

SESSIONS = 100
WAVE = 20
ROSTER = "shared/roster"


@dataclass
class Member:
    """Derives its own frame and adds itself to the shared roster on the version it read; on a
    conflict it re-reads the roster and merges. Each roster transaction also retires the
    receipts this agent has already read, so the context stays small."""

    session: str
    requests: int = 0
    conflicts: int = 0
    levels: set[str] = field(default_factory=set)

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        encoding = request.encoding
        self.levels.add(pressure_of(encoding))
        mine = [s for s in inbox_of(encoding) if s.session == self.session]
        receipts = [s for s in mine if s.kind == "tx_receipt"]
        if self.requests == 1:
            root = next(s.ref for s in mine if s.kind == "user_message")
            version = version_of(encoding)
            own = (
                f"(context-tx (base-version {version}) "
                f"(derive agent/{self.session} (from {root}) (member {self.session})))"
            )
            return acts(tx_call(own, 0), self.join(encoding, [], 1))
        if "conflict" in receipts[-1].line:
            self.conflicts += 1
            return acts(self.join(encoding, [s.ref for s in receipts], self.requests))
        return reply(f"{self.session} joined")

    def join(self, encoding: str, processed: list[str], number: int) -> ToolCall:
        body = frame_body(encoding, ROSTER)
        assert body is not None
        names = sorted({*re.findall(r"s\d{3}", body), self.session})
        tidy = f' (reason "read") (retire {" ".join(processed)})' if processed else ""
        text = (
            f"(context-tx (base-version {version_of(encoding)}){tidy} "
            f"(revise {ROSTER} (roster {' '.join(names)})))"
        )
        return tx_call(text, number)


async def _many(ctx: morphz.Context, workspace: Path, members: list[Member]) -> list[Any]:
    results: list[ActivationResult] = []
    for start in range(0, len(members), WAVE):
        wave = members[start : start + WAVE]
        results += await asyncio.gather(
            *(
                engine(ctx, FunctionModel(m), workspace, step_limit=WAVE + 2).run(
                    f"please join the roster as {m.session}", session=m.session
                )
                for m in wave
            )
        )
    return results


@pytest.mark.slow
def test_a_hundred_sessions_every_commit_accounted_for(
    ctx: morphz.Context, workspace: Path
) -> None:
    # the hundred requests and replies stay in view: about 60,000 tokens at the end, the default
    # budget's notice level; this test is about accounting, so pressure must stay normal
    ctx.set_budget(Budget(window=256_000))
    ctx.commit(f"(context-tx (base-version 0) (create {ROSTER} (roster)))", session="setup")
    members = [Member(f"s{i:03d}") for i in range(SESSIONS)]
    results = run(_many(ctx, workspace, members))
    assert [r.state for r in results] == ["delivered"] * SESSIONS, [r.reason for r in results]

    history = ctx.events()
    commits = {e.ref: e for e in history if e.kind == ev.TX_COMMITTED}
    receipts = [(e, receipt(e)) for e in history if e.kind == "tx_receipt"]
    committed = {data["event"]: e for e, data in receipts if data["ok"]}
    refused = [data for _, data in receipts if not data["ok"]]
    # every commit is accounted for: one ok receipt per commit, in the committing session
    agent_commits = {ref: e for ref, e in commits.items() if e.session_id != "setup"}
    assert len(agent_commits) == len(committed) == len(commits) - 1
    assert set(committed) == set(agent_commits)
    for ref, event in committed.items():
        assert commits[ref].session_id == event.session_id
    # every refusal was a conflict on the roster, and every conflict was merged
    assert all(data["error"]["code"] == "conflict" for data in refused)
    assert len(refused) == sum(m.conflicts for m in members)
    # a roster commit can only be refused because another member of its wave committed first
    assert max(m.conflicts for m in members) < WAVE
    assert set().union(*(m.levels for m in members)) == {"normal"}
    assert len(committed) == 2 * SESSIONS
    mind = ctx.mind()
    roster = mind.frame(ROSTER)
    assert roster is not None
    assert roster.body == "(roster " + " ".join(m.session for m in members) + ")"
    assert roster.revision == SESSIONS + 1
    assert all(mind.frame(f"agent/{m.session}") is not None for m in members)
    assert Counter(a.state for a in ctx.activations()) == {"delivered": SESSIONS}
    assert ctx.audit().ok
