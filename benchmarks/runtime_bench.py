"""Morphz runtime benchmarks: the engine's overhead per step, excluding model time, at 500 active
items (250 observations + 250 frames), beside the time of compiling the encoding alone at that
state in the same run; and 100 sessions with one activation each on one context (wall time,
commits, every commit accounted for, audit).

    .venv/bin/python benchmarks/runtime_bench.py [--quick] [--out FILE]

Prints one JSON document to stdout (progress goes to stderr). See docs/benchmarks.md.

A step's overhead is its wall time minus the model's time: from the moment the model's answer
leaves the (instant) function model to the moment the next request reaches it, the engine records
the reply, runs the tool (a recall search or a one-frame context_tx), records its result and
compiles the next encoding. The baseline is ``ctx.encode`` alone, with the options the engine
uses, at the same state, timed between the activations of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import morphz
from _bench_common import finish, machine, pct, result
from morphz.encoding import EncodeOptions
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

FULL = {"observations": 250, "frames": 250, "steps": 60, "rounds": 10, "sessions": 100}
QUICK = {**FULL, "steps": 30, "rounds": 4}
WAVE = 20  # activations started together in the many-sessions run
TARGET_STEP_P50_MS = 20.0
CONTEXT, SESSION = "bench", "main"
WORDS = (
    "request handler timeout retry upstream pool connection cache checkout payment order region "
    "replica config deploy build worker queue latency error warning status ok gateway session "
    "token header response body metric trace span release version rollback"
)
VOCABULARY = WORDS.split()
_VERSION = re.compile(r"\(mind-version (\d+)\)")
_LEVEL = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")
_OBS = re.compile(r"^ \(observation (@e(\d+)) \(kind (\w+)\) \(session ([^)\s]+)\)", re.M)


def log(message: str) -> None:
    print(f"[runtime-bench] {message}", file=sys.stderr, flush=True)


def version_of(encoding: str) -> int:
    return int(_VERSION.findall(encoding)[-1])


# ------------------------------------------------------------ step overhead


def build_state(ctx: morphz.Context, observations: int, frames: int) -> None:
    """``observations`` history lines (user messages, tool results, external events of about 200
    characters) and ``frames`` frames citing them, all active."""
    kinds = ("user_message", "tool_result", "external_event")
    lines = []
    for i in range(observations):
        words = " ".join(VOCABULARY[(i * 7 + k) % len(VOCABULARY)] for k in range(24))
        text = f"entry {i}: {words}; value {i * 37 % 1000}"
        lines.append(json.dumps({"kind": kinds[i % 3], "text": text}))
    ctx.import_history(io.StringIO("\n".join(lines)), session="history")
    for start in range(0, frames, 50):
        ops = " ".join(
            f"(derive m/{i} (from @e{i % observations + 1}) (note {i} "
            f'"{" ".join(VOCABULARY[(i + k) % len(VOCABULARY)] for k in range(8))}"))'
            for i in range(start, min(frames, start + 50))
        )
        ctx.commit(f"(context-tx (base-version {ctx.version}) {ops})", session="history")


class InstantAgent:
    """Answers at once. Odd steps: a recall search; even steps: a tiny context_tx that revises
    one frame and retires what the previous steps added (its receipts, recall results, earlier
    roots), so the active state stays at the same size; the last step replies. It stamps the
    moment each request arrives and each answer leaves."""

    def __init__(self, steps: int, first_new_seq: int) -> None:
        self.steps = steps
        self.first_new_seq = first_new_seq  # observations from here on are the agent's own
        self.arrived: list[int] = []
        self.left: list[int] = []
        self.kinds: list[str] = []
        self.levels: set[str] = set()
        self.active: list[int] = []  # inbox size per request

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.arrived.append(time.perf_counter_ns())
        response = self.answer(request)
        self.left.append(time.perf_counter_ns())
        return response

    def answer(self, request: ModelRequest) -> ModelResponse:
        encoding = request.encoding
        step = len(self.arrived)
        self.levels.add(_LEVEL.findall(encoding)[-1][0])
        inbox = _OBS.findall(encoding)
        self.active.append(len(inbox))
        if step >= self.steps:
            self.kinds.append("reply")
            return ModelResponse("done")
        if step % 2:
            self.kinds.append("recall")
            query = VOCABULARY[step % len(VOCABULARY)]
            args = {"op": "search", "query": query, "limit": 5}
            return ModelResponse(None, (ToolCall(f"c{step}", "recall", json.dumps(args)),))
        self.kinds.append("context_tx")
        root = max(int(seq) for _, seq, kind, session in inbox if kind == "user_message")
        done = [
            ref for ref, seq, _, _ in inbox if int(seq) >= self.first_new_seq and int(seq) != root
        ]
        retire = f' (reason "processed") (retire {" ".join(done)})' if done else ""
        tx = (
            f"(context-tx (base-version {version_of(encoding)}){retire} "
            f"(revise m/0 (note 0 (step {step}))))"
        )
        return ModelResponse(None, (ToolCall(f"c{step}", "context_tx", json.dumps({"tx": tx})),))


def options_like_engine(engine: Engine, activation: str) -> EncodeOptions:
    """The options the engine compiles a work-mode request with: its own (Engine.options, as
    engine._encode calls it), so the baseline compiles exactly the engine's encoding."""
    return engine.options(
        SESSION, activation=activation, objectives=("bench",), scheduling={"mode": "work"}
    )


def bench_steps(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    log(f"step overhead: {cfg['observations']} observations + {cfg['frames']} frames")
    workspace = tmp / "workspace"
    workspace.mkdir()
    overhead: dict[str, list[int]] = {"recall": [], "context_tx": []}
    encode_ns: list[int] = []
    model_ns: list[int] = []
    levels: set[str] = set()
    active: list[int] = []
    with morphz.open(tmp / "steps.db") as db:
        ctx = db.context(CONTEXT, create=True)
        build_state(ctx, cfg["observations"], cfg["frames"])
        first_new = ctx.status().last_seq + 1
        mind = ctx.mind()
        state = {"frames": len(mind.frames), "observations": len(mind.observations)}
        registry = build_tools(Settings())
        for round_ in range(cfg["rounds"]):
            agent = InstantAgent(cfg["steps"], first_new)
            engine = Engine(
                ctx,
                FunctionModel(agent),
                registry,
                RuntimeConfig(workspace=workspace, step_limit=cfg["steps"] + 1),
            )
            outcome: ActivationResult = asyncio.run(engine.run("bench", session=SESSION))
            if outcome.state != "delivered":
                raise RuntimeError(f"the bench activation {outcome.state}: {outcome.reason}")
            # step k runs from the moment answer k left the model to the moment request k+1
            # arrives: recording the reply, running the tool, recording its result, compiling
            # the next encoding; the model's own time is outside it
            for k in range(len(agent.left) - 1):
                overhead[agent.kinds[k]].append(agent.arrived[k + 1] - agent.left[k])
            model_ns.extend(b - a for a, b in zip(agent.arrived, agent.left, strict=True))
            levels |= agent.levels
            active.extend(agent.active)
            # the baseline at the same state: the encoding compiled alone, no engine around it
            options = options_like_engine(engine, outcome.activation)
            for _ in range(cfg["steps"]):
                started = time.perf_counter_ns()
                ctx.encode(options)
                encode_ns.append(time.perf_counter_ns() - started)
            log(f"  round {round_ + 1}/{cfg['rounds']}: p50 so far {pct(all_of(overhead), 0.5)} ms")
        mind = ctx.mind()
        audit = ctx.audit()
        encoding = ctx.encode(options)
    steps = all_of(overhead)
    p50, base = pct(steps, 0.5), pct(encode_ns, 0.5)
    measured = result(
        "runtime_step_overhead_p50",
        p50,
        "ms",
        base,
        target=f"p50 <= {TARGET_STEP_P50_MS} ms at 500 active items (model time excluded)",
        met=p50 <= TARGET_STEP_P50_MS,
    )
    measured |= {"p95": pct(steps, 0.95), "baseline_p95": pct(encode_ns, 0.95), "n": len(steps)}
    details = {
        "state_at_start": state,
        "active_frames_at_end": sum(1 for f in mind.frames if f.lifecycle == "active"),
        "active_observations_at_end": sum(1 for o in mind.observations if o.lifecycle == "active"),
        "inbox_size_seen_min_max": [min(active), max(active)],
        "encoding_tokens": encoding.tokens,
        "pressure_levels_seen": sorted(levels),
        "baseline": "ctx.encode with the engine's work-mode options, alone, at the same state",
        "encode_p50_ms": base,
        "encode_p95_ms": pct(encode_ns, 0.95),
        "overhead_minus_encode_p50_ms": round(p50 - base, 4),
        "by_step": {
            kind: {"n": len(v), "p50_ms": pct(v, 0.5), "p95_ms": pct(v, 0.95)}
            for kind, v in overhead.items()
        },
        "model_time_p50_ms": pct(model_ns, 0.5),
        "audit_ok": audit.ok,
    }
    return [measured], details


def all_of(groups: dict[str, list[int]]) -> list[int]:
    return [sample for group in groups.values() for sample in group] or [0]


# ------------------------------------------------------------ many sessions


class Member:
    """Derives its own frame and adds itself to a shared roster on the version it read; on a
    conflict re-reads and merges (as tests/test_runtime_scenarios.py does)."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.requests = 0
        self.conflicts = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        encoding = request.encoding
        mine = [
            (ref, kind) for ref, _, kind, sess in _OBS.findall(encoding) if sess == self.session
        ]
        receipts = [ref for ref, kind in mine if kind == "tx_receipt"]
        if self.requests == 1:
            root = next(ref for ref, kind in mine if kind == "user_message")
            own = (
                f"(context-tx (base-version {version_of(encoding)}) "
                f"(derive agent/{self.session} (from {root}) (member {self.session})))"
            )
            return ModelResponse(None, (call(own, 0), self.join(encoding, [], 1)))
        last = encoding[encoding.index(f"(observation {receipts[-1]} ") :].split("\n", 1)[0]
        if "conflict" in last:
            self.conflicts += 1
            return ModelResponse(None, (self.join(encoding, receipts, self.requests),))
        return ModelResponse(f"{self.session} joined")

    def join(self, encoding: str, processed: list[str], number: int) -> ToolCall:
        line = next(x for x in encoding.splitlines() if x.startswith(" (frame shared/roster "))
        names = sorted({*re.findall(r"s\d{3}", line.split("(body ", 1)[1]), self.session})
        tidy = f' (reason "read") (retire {" ".join(processed)})' if processed else ""
        tx = (
            f"(context-tx (base-version {version_of(encoding)}){tidy} "
            f"(revise shared/roster (roster {' '.join(names)})))"
        )
        return call(tx, number)


def call(tx: str, number: int) -> ToolCall:
    return ToolCall(f"c{number}", "context_tx", json.dumps({"tx": tx}))


async def _waves(
    ctx: morphz.Context, workspace: Path, members: list[Member]
) -> list[ActivationResult]:
    registry = build_tools(Settings())
    out: list[ActivationResult] = []
    for start in range(0, len(members), WAVE):
        out += await asyncio.gather(
            *(
                Engine(
                    ctx,
                    FunctionModel(m),
                    registry,
                    RuntimeConfig(workspace=workspace, step_limit=WAVE + 2),
                ).run(f"join as {m.session}", session=m.session)
                for m in members[start : start + WAVE]
            )
        )
    return out


def bench_sessions(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sessions = cfg["sessions"]
    log(f"{sessions} sessions, one activation each, in waves of {WAVE}")
    workspace = tmp / "workspace-sessions"
    workspace.mkdir()
    with morphz.open(tmp / "sessions.db") as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.commit("(context-tx (base-version 0) (create shared/roster (roster)))", session="setup")
        members = [Member(f"s{i:03d}") for i in range(sessions)]
        started = time.perf_counter()
        results = asyncio.run(_waves(ctx, workspace, members))
        wall = time.perf_counter() - started
        history = ctx.events()
        audit_started = time.perf_counter()
        audit = ctx.audit()
        audit_s = time.perf_counter() - audit_started
        roster = ctx.mind().frame("shared/roster")
    commits = {
        e.ref for e in history if e.kind == "context_tx_committed" and e.session_id != "setup"
    }
    receipts = [json.loads(e.text or "{}") for e in history if e.kind == "tx_receipt"]
    committed = {r["event"] for r in receipts if r.get("ok")}
    refused = [r for r in receipts if not r.get("ok")]
    states = Counter(r.state for r in results)
    accounted = commits == committed
    complete = roster is not None and all(m.session in roster.body for m in members)
    ok = states == {"delivered": sessions} and accounted and audit.ok and complete
    measured = result(
        "sessions_100_all_commits_accounted",
        wall,
        "s",
        None,
        target=f"{sessions} sessions complete, every commit accounted for, audit clean",
        met=ok,
    )
    details = {
        "sessions": sessions,
        "wave": WAVE,
        "wall_s": round(wall, 3),
        "activations": dict(states),
        "commits": len(commits),
        "ok_receipts": len(committed),
        "refused_receipts": len(refused),
        "refusal_codes": dict(Counter(r["error"]["code"] for r in refused)),
        "conflicts_max_per_agent": max(m.conflicts for m in members),
        "model_requests": sum(m.requests for m in members),
        "steps_per_activation_mean": round(statistics.mean(r.steps for r in results), 2),
        "events": len(history),
        "every_commit_accounted_for": accounted,
        "roster_complete": complete,
        "audit_ok": audit.ok,
        "audit_s": round(audit_s, 3),
    }
    return [measured], details


# ------------------------------------------------------------ driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    started = time.perf_counter()
    mode = "quick" if args.quick else "full"
    doc: dict[str, Any] = {"benchmark": "morphz-runtime", "mode": mode}
    doc |= {"machine": machine(), "config": cfg | {"wave": WAVE}, "results": [], "details": {}}
    with tempfile.TemporaryDirectory(prefix="morphz-runtime-bench-") as folder:
        for name, bench in {"steps": bench_steps, "sessions": bench_sessions}.items():
            results, details = bench(Path(folder), cfg)
            doc["results"].extend(results)
            doc["details"][name] = details
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
