"""Morphz Context Encoding benchmarks: compile time against active size and history length, and
against the number of sessions, each beside the raw-SQLite time of the same queries, and prefix
reuse over a synthetic 300-step tool loop with and without ContextDelta.

    .venv/bin/python benchmarks/encoding_bench.py [--quick] [--out FILE] [--example FILE]
        [--prefix-only [--no-revisions] | --sessions-only]

Prints one JSON document to stdout (progress goes to stderr). See docs/benchmarks.md.
``--example FILE`` only writes the demo context's encoding (docs/example-encoding.txt) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import math
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import morphz
from _bench_common import finish, machine, pct
from morphz import demo, token_estimate
from morphz.capacity import Budget
from morphz.encoding import DeltaEncoder, EncodeOptions, Encoding, PrefixMeter, render
from morphz.encoding.blocks import CacheLayout, PlainLayouts
from morphz.encoding.prefix import BlockCacheMeter, tools_text
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.requests import FRAMING, MESSAGE_TOKENS
from morphz.runtime.tools.base import ToolRegistry

FULL = {"histories": [1_000, 1_000_000], "active": [50, 500, 5_000], "samples": 200, "warmup": 10}
FULL |= {"sessions": [10, 10_000]}
QUICK = {**FULL, "histories": [1_000, 100_000], "samples": 40, "warmup": 5, "sessions": [10, 2_000]}
RECENT_SESSIONS = 10  # of the sessions cell's others, the ones inside the 24-hour window
RETIRE_BATCH = 5_000  # observations per history chunk, all retired by one transaction
FRAMES_PER_TX = 50  # superseded frames per history chunk (one relation each)
STEPS = 300
ROUNDS = 10  # alternating blocks per measurement, as in core_bench.py
BLOCK_SECONDS = 2.0  # a slow cell takes fewer samples per block (at least one)
CONTEXT, SESSION = "bench", "main"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
OPTIONS = EncodeOptions(session=SESSION, model="bench-model", local_time=T0.isoformat())
VOCABULARY = (
    "request handler timeout retry upstream pool connection cache checkout payment order region "
    "replica config deploy build worker queue latency error warning status ok gateway session "
    "token header response body metric trace span release version rollback"
)
WORDS = VOCABULARY.split()


def log(message: str) -> None:
    print(f"[encoding-bench] {message}", file=sys.stderr, flush=True)


def entry(metric: str, value: float, unit: str, baseline: float, **more: Any) -> dict[str, Any]:
    """One measurement beside its same-run baseline; ``ratio`` is value / baseline. ``more``
    holds ``target`` and ``met`` first, then any other fields."""
    ratio = round(value / baseline, 3) if baseline else None
    head = {"metric": metric, "value": round(value, 4), "unit": unit}
    return head | {"baseline": round(baseline, 4), "ratio": ratio} | more


def tool_text(rng: random.Random, chars: int) -> str:
    """A tool result of about ``chars`` characters: a command line, then log or code lines."""
    tool = rng.choice(("read_file", "grep", "run_tests", "http_get", "shell"))
    lines = [f"$ {tool} {rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randrange(100)}.py"]
    size = len(lines[0])
    while size < chars:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 14)))
        lines.append(f"{rng.randrange(1, 900):>4}: {words}")
        size += len(lines[-1]) + 1
    return "\n".join(lines)[:chars]


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(low, high))).capitalize() + "."


class Clock:
    """A store clock the script moves (recorded times, and so the encodings, are reproducible)."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def commit(ctx: morphz.Context, ops: list[str], reason: str | None = None, **kw: Any) -> None:
    why = f" (reason {json.dumps(reason)})" if reason else ""
    ctx.commit(f"(context-tx (base-version {ctx.version}){why} {' '.join(ops)})", **kw)


# ------------------------------------------------------------ (a) compile time


def history_chunk(ctx: morphz.Context, index: int, observations: int, head: int) -> int:
    """One part of a long history: ``observations`` tool results imported (JSON Lines) into a
    session of their own, then one transaction that retires them all, with a reason, and moves a
    chain of FRAMES_PER_TX frames on: each derives from the one before, supersedes it and
    retires it. Returns the chain's new head (that frame stays active)."""
    session, lines = f"history-{index:04d}", []
    for i in range(observations):
        moment = (T0 - timedelta(days=90, seconds=-5 * i)).isoformat()
        text = f"worker-{i % 7} processed batch {index}.{i}: {i % 97} rows, status ok"
        lines.append(json.dumps({"kind": "tool_result", "text": text, "time": moment}))
    report = ctx.import_history(io.StringIO("\n".join(lines) + "\n"), session=session)
    first, last = (int(str(ref)[2:]) for ref in (report.first_ref, report.last_ref))
    ops = [f"(retire {' '.join(f'@e{seq}' for seq in range(first, last + 1))})"]
    note = '(note "what the earlier work established")'
    if head < 0:
        ops.append(f"(create history/0 {note})")
    for n in range(max(head, 0) + 1, max(head, 0) + FRAMES_PER_TX + 1):
        ops += [f"(derive history/{n} (from history/{n - 1}) {note})"]
        ops += [f"(relate history/{n} supersedes history/{n - 1})", f"(retire history/{n - 1})"]
    commit(ctx, ops, "processed: what matters is in history/", session=session)
    return max(head, 0) + FRAMES_PER_TX


def build_history(path: Path, events: int) -> dict[str, Any]:
    """A context whose history holds ``events`` events, in chunks of up to RETIRE_BATCH
    observations and one retiring transaction each: nothing of it stays in view but the head
    of the frame chain."""
    chunks, head, start = math.ceil(events / (RETIRE_BATCH + 1)), -1, time.perf_counter()
    with morphz.open(path, now=lambda: T0 - timedelta(days=2)) as db:
        ctx = db.context(CONTEXT, create=True)
        for index in range(chunks):
            size = min(RETIRE_BATCH, events - index * (RETIRE_BATCH + 1) - 1)
            head = history_chunk(ctx, index, size, head)
            if index % 20 == 19:
                log(f"    {min(events, (index + 1) * (RETIRE_BATCH + 1)):,} events")
        status = ctx.status()
    assert status.last_seq == events and status.observations.get("active", 0) == 0, status
    return {
        "events": status.last_seq, "sessions": chunks, "relations": chunks * FRAMES_PER_TX,
        "retired": [status.observations["retired"], status.frames["retired"]],
        "build_s": round(time.perf_counter() - start, 2),
        "db_mb": round(path.stat().st_size / 2**20, 1),
    }  # fmt: skip


def add_active(ctx: morphz.Context, items: int) -> None:
    """Half active observations (tool results of varying size), half frames derived from them
    (a frame already active, such as the history's head frame, counts as one), every second
    frame related to the one before it. Same seed, same mind, whatever the history."""
    rng, refs = random.Random(items), []
    present = ctx.status().frames["active"]
    # 5,000 items are more than the default budget lets frames fill (the budget refusal): the
    # compile is timed here, not what a model could be shown, so the budget never refuses
    ctx.set_budget(Budget(window=1_000_000_000, output_reserve=0))
    for first in range(0, items // 2, 25):
        size = min(items // 2, first + 25) - first
        texts = [tool_text(rng, int(rng.lognormvariate(6, 0.8))) for _ in range(size)]
        batch = [morphz.Observation("tool_result", text) for text in texts]
        refs += [e.ref for e in ctx.observe_batch(batch, session=SESSION)]
    frames = items - items // 2 - present
    for first in range(0, frames, 50):
        ops = []
        for i in range(first, min(frames, first + 50)):
            cites = " ".join(sorted({rng.choice(refs), rng.choice(refs)}))
            ops.append(f'(derive work/f{i} (from {cites}) (fact "{sentence(rng, 8, 30)}"))')
            ops += [f"(relate work/f{i} supports work/f{i - 1})"] if i % 2 else []
        commit(ctx, ops, session=SESSION)


def traced_sql(db: morphz.Database, ctx: morphz.Context) -> list[str]:
    """The SQL one ``ctx.encode`` runs, parameters inlined, traced on the store's reader."""
    conn = db.store._reader()  # type: ignore[attr-defined]
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        ctx.encode(OPTIONS)
    finally:
        conn.set_trace_callback(None)
    return statements


def ns(call: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    call()
    return time.perf_counter_ns() - start


def interleave(runs: dict[str, Callable[[], object]], cfg: dict[str, Any]) -> dict[str, list[int]]:
    """Warm up, then time every run in ROUNDS alternating blocks; a block holds samples/ROUNDS
    calls, fewer when they would take over BLOCK_SECONDS (at least one)."""
    per_block, budget = {}, BLOCK_SECONDS * 1e9
    for name, run in runs.items():
        warm = [ns(run)]
        while len(warm) < cfg["warmup"] and sum(warm) < budget:
            warm.append(ns(run))
        per_block[name] = max(1, min(cfg["samples"] // ROUNDS, int(budget / min(warm))))
    timed: dict[str, list[int]] = {name: [] for name in runs}
    for round_ in range(ROUNDS):
        log(f"    round {round_ + 1}/{ROUNDS}")
        for name, run in runs.items():
            timed[name] += [ns(run) for _ in range(per_block[name])]
    return timed


def bench_compile(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    runs: dict[str, Callable[[], object]] = {}
    closers: list[Callable[[], None]] = []
    details: dict[str, Any] = {}
    for events in cfg["histories"]:
        log(f"(a) building a history of {events:,} events")
        base = tmp / f"history-{events}.db"
        details[f"history_{events}"] = build_history(base, events)
        for items in cfg["active"]:
            cell, path = f"{items}@{events}", tmp / f"mind-{items}-{events}.db"
            start = time.perf_counter()
            shutil.copyfile(base, path)
            with morphz.open(path, now=lambda: T0 - timedelta(minutes=5)) as db:
                add_active(db.context(CONTEXT), items)
            built = time.perf_counter() - start  # closing the store checkpointed the WAL
            db = morphz.open(path, now=lambda: T0 - timedelta(minutes=5))
            ctx = db.context(CONTEXT)
            statements = traced_sql(db, ctx)
            raw = sqlite3.connect(path, isolation_level=None)
            # a process's first compile: no line's token estimate remembered
            cold = lambda c=ctx: (token_estimate.forget(), c.encode(OPTIONS))  # noqa: E731
            first = [ns(cold) for _ in range(5)]
            encoding = ctx.encode(OPTIONS)
            runs[f"compile {cell}"] = lambda c=ctx: c.encode(OPTIONS)
            runs[f"raw {cell}"] = lambda r=raw, s=statements: [r.execute(x).fetchall() for x in s]
            closers += [db.close, raw.close]
            status = ctx.status()
            active = status.observations["active"] + status.frames["active"]
            details[f"mind_{cell}"] = {"copy_and_active_build_s": round(built, 2)} | {
                "events": status.last_seq, "active": active, "sql_statements": len(statements),
                "encoding": [len(encoding.text.encode()), encoding.tokens, encoding.pressure.level],
                "first_compile_ms_p50": round(sorted(first)[2] / 1e6, 3),
            }  # fmt: skip
        base.unlink()
    log(f"(a) timing up to {cfg['samples']} compiles per cell, interleaved with the raw SQL")
    timed = interleave(runs, cfg)
    for close in closers:
        close()
    small, large = cfg["histories"]
    results = []
    for items in cfg["active"]:
        cells = [(k, n) for k in ("compile", "raw") for n in (small, large)]
        p50 = {(k, n): pct(timed[f"{k} {items}@{n}"], 0.5) for k, n in cells}
        for events in cfg["histories"]:
            cell, value = f"{items}@{events}", p50["compile", events]
            target, met = ("<= 15 ms", value <= 15) if items == 500 else ("-", True)
            metric = f"compile_p50_{items}_active_{events}_events"
            results.append(
                entry(metric, value, "ms", p50["raw", events], target=target, met=met)
                | {"p95": pct(timed[f"compile {cell}"], 0.95), "n": len(timed[f"compile {cell}"])}
                | {"baseline_p95": pct(timed[f"raw {cell}"], 0.95)}
            )
        grow = p50["compile", large] / p50["compile", small]
        raw_grow = p50["raw", large] / p50["raw", small]
        metric = f"compile_p50_growth_{items}_active_{large}_vs_{small}_events"
        results.append(entry(metric, grow, "x", raw_grow, target="<= 1.2", met=grow <= 1.2))
    return results, details


def add_sessions(ctx: morphz.Context, clock: Clock, others: int) -> None:
    """``others`` sessions besides the mind's: one observation each, all retired at once;
    RECENT_SESSIONS of them last active inside the directory's 24-hour window, the rest days
    before it (the sessions a long-lived context accumulates)."""
    refs = []
    for index in range(others):
        recent = index >= others - RECENT_SESSIONS
        clock.now = T0 - (timedelta(hours=index % 20) if recent else timedelta(days=3 + index))
        refs.append(ctx.observe("user_message", f"hello {index}", session=f"s{index:05d}").ref)
    clock.now = T0 - timedelta(minutes=5)
    for first in range(0, len(refs), RETIRE_BATCH):
        commit(ctx, [f"(retire {' '.join(refs[first : first + RETIRE_BATCH])})"], "read")


def bench_sessions(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Compile time for the 50-item mind of (a) in a context with few and with many sessions:
    the session directory shows a working set, so the sessions outside it must not matter."""
    runs: dict[str, Callable[[], object]] = {}
    closers: list[Callable[[], None]] = []
    details: dict[str, Any] = {}
    for count in cfg["sessions"]:
        log(f"(c) a 50-item mind among {count:,} other sessions")
        path, clock = tmp / f"sessions-{count}.db", Clock(T0)
        start = time.perf_counter()
        with morphz.open(path, now=clock) as db:
            ctx = db.context(CONTEXT, create=True)
            add_sessions(ctx, clock, count)
            add_active(ctx, 50)
        db = morphz.open(path, now=clock)
        ctx = db.context(CONTEXT)
        statements = traced_sql(db, ctx)
        raw = sqlite3.connect(path, isolation_level=None)
        runs[f"compile {count}"] = lambda c=ctx: c.encode(OPTIONS)
        runs[f"raw {count}"] = lambda r=raw, s=statements: [r.execute(x).fetchall() for x in s]
        closers += [db.close, raw.close]
        plan = ctx.encode(OPTIONS).sessions.to_dict()
        details[f"sessions_{count}"] = {
            "build_s": round(time.perf_counter() - start, 2), "events": ctx.status().last_seq,
            "shown": len(plan["shown"]), "excluded": plan["excluded"],
        }  # fmt: skip
    log(f"(c) timing up to {cfg['samples']} compiles per cell, interleaved with the raw SQL")
    timed = interleave(runs, cfg)
    for close in closers:
        close()
    few, many = cfg["sessions"]
    p50 = {k: pct(timed[k], 0.5) for k in timed}
    results = [
        entry(f"compile_p50_50_active_{n}_sessions", p50[f"compile {n}"], "ms", p50[f"raw {n}"])
        | {"p95": pct(timed[f"compile {n}"], 0.95), "n": len(timed[f"compile {n}"])}
        for n in (few, many)
    ]
    grow = p50[f"compile {many}"] / p50[f"compile {few}"]
    raw_grow = p50[f"raw {many}"] / p50[f"raw {few}"]
    metric = f"compile_p50_growth_50_active_{many}_vs_{few}_sessions"
    results.append(entry(metric, grow, "x", raw_grow, target="<= 1.2", met=grow <= 1.2))
    return results, details


# ------------------------------------------------------------ (b) prefix reuse


def setup_trajectory(ctx: morphz.Context, clock: Clock) -> tuple[str, str]:
    """Earlier work (an ops session, two standing frames), then the user's request that roots the
    activation, and the agent's first plan. Returns (root ref, activation id)."""
    clock.now = T0 - timedelta(hours=3)
    event = ctx.observe("external_event", "nightly build 4711 of checkout passed", session="ops")
    commit(ctx, [f"(derive ops/release (from {event.ref}) (build 4711))"], session="ops")
    clock.now = T0 - timedelta(hours=1)
    prefs = '(create user/preferences (language en) (style "short answers; ask before deploying"))'
    project = '(create project/checkout (fact "Python service behind the gateway; pytest"))'
    commit(ctx, [prefs, project], session=SESSION)
    clock.now = T0
    ask = "Since this morning's release checkout returns intermittent 502s. Find the cause and "
    root = ctx.observe("user_message", ask + "prepare a fix; ask first.", session=SESSION)
    plan = '(steps "reproduce" "find the cause" "fix") (progress "starting")'
    commit(ctx, [f"(derive task/plan (from {root.ref}) {plan})"], session=SESSION)
    return root.ref, ctx.start_activation(SESSION, root=root.ref)


@dataclass(frozen=True)
class Shape:
    """The trajectory's parameters. The defaults are the benchmark's trajectory, fixed since the
    first runs; benchmarks/prefix_variants.py measures others beside it (never against the
    issue's targets)."""

    revisions: bool = True  # the agent revises task/plan every 20-30 steps
    result_chars: int = 1_200  # median characters of a tool result (lognormal, sigma 1)
    keep: int = 4  # a retirement batch retires what arrived at least this many steps before
    meta: bool = False  # tool results carry the meta the runtime records (tool, call id, error)


BENCHMARK = Shape()


def agent_turn(ctx: morphz.Context, rng: random.Random, step: int, s: dict[str, Any]) -> str:
    """The maintenance the agent commits at ``step`` (if any); returns what kind it was."""
    ops, reason, kind, arrived, findings = [], None, "append", s["arrived"], s["findings"]
    if step == s["derive_at"]:
        recent = [ref for ref, at in arrived.items() if at >= step - 4]
        cites = " ".join(rng.sample(recent, min(len(recent), rng.randint(1, 3))))
        ops.append(f'(derive finding/{step} (from {cites}) (fact "{sentence(rng, 10, 40)}"))')
        if findings and rng.random() < 0.5:
            relation = rng.choice(("supports", "refines", "depends-on"))
            ops.append(f"(relate finding/{step} {relation} {rng.choice(findings)})")
        findings.append(f"finding/{step}")
        s["derive_at"], kind = step + rng.randint(3, 5), "derive"
    if step == s["plan_at"]:
        progress = json.dumps(f"step {step}: {sentence(rng, 6, 16)}")
        steps = '(steps "reproduce" "find the cause" "fix")'
        ops.append(f"(revise task/plan (from {s['root']}) {steps} (progress {progress}))")
        s["plan_at"], kind = step + rng.randint(20, 30), "revise"
    if s["maintain"](step, s):
        done = [ref for ref, at in arrived.items() if at <= step - s["shape"].keep]
        ops += [f"(retire {' '.join(done)})"] if done else []
        reason = "processed: what matters is in the findings"
        for ref in done:
            del arrived[ref]
        if len(findings) >= 4 and rng.random() < 0.5:  # consolidate the two oldest findings
            new, old = f"summary/{step}", findings[:2]
            del findings[:2]
            ops.append(f'(derive {new} (from {" ".join(old)}) (fact "{sentence(rng, 20, 50)}"))')
            ops += [f"(relate {new} supersedes {o})" for o in old] + [f"(retire {' '.join(old)})"]
            findings.append(new)
        s["retire_at"], kind = step + rng.randint(18, 22), "retire"  # the eager policy's next
    if ops:
        commit(ctx, ops, reason, session=SESSION)
    return kind


def arrivals(rng: random.Random, median: int = BENCHMARK.result_chars) -> list[morphz.Observation]:
    """What the agent's tool calls of one step return: 1-3 results, sometimes a user message."""
    batch = []
    for i in range(rng.choices((1, 2, 3), (50, 35, 15))[0]):
        if i == 0 and rng.random() < 0.04:
            batch.append(morphz.Observation("user_message", sentence(rng, 8, 40)))
        else:
            chars = min(60_000, max(80, int(rng.lognormvariate(math.log(median), 1.0))))
            batch.append(morphz.Observation("tool_result", tool_text(rng, chars)))
    return batch


def with_meta(batch: list[morphz.Observation], step: int) -> list[morphz.Observation]:
    """``batch`` with the meta the runtime keeps with each tool result (outcomes.py): the tool
    (a workspace tool, in turn), a provider's call id (24 characters after ``call_``, drawn
    from the step, not from the trajectory's random generator) and the error flag."""
    tools = ("read_file", "exec", "search_files")

    def kept(i: int, o: morphz.Observation) -> morphz.Observation:
        if o.kind != "tool_result":
            return o
        call = "call_" + hashlib.sha256(f"{step}/{i}".encode()).hexdigest()[:24]
        return replace(o, meta={"call": call, "error": False, "tool": tools[(step + i) % 3]})

    return [kept(i, o) for i, o in enumerate(batch)]


# When the agent retires the observations it has processed (in batches, with a consolidation of
# its oldest findings): "pressure" follows the protocol's capacity advice and maintains once the
# kernel shows notice pressure or more; "eager" maintains every 18-22 steps whatever the pressure.
POLICIES: dict[str, Callable[[int, dict[str, Any]], bool]] = {
    "pressure": lambda step, s: s["level"] != "normal",
    "eager": lambda step, s: step == s["retire_at"],
}
# Policies only benchmarks/prefix_variants.py measures: maintaining from warning pressure on, and
# never retiring an observation (the mind still grows).
VARIANT_POLICIES: dict[str, Callable[[int, dict[str, Any]], bool]] = {
    "warning": lambda step, s: s["level"] in ("warning", "critical"),
    "never": lambda step, s: False,
}


def exec_tools() -> ToolRegistry:
    """The tools ``morphz exec`` offers with its default configuration."""
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import Settings

    return build_tools(Settings())


def tool_schemas() -> str:
    """The tool schemas ``morphz exec`` sends ahead of the encoding, in the order it sends them
    (they are part of every request a provider caches: tools, then the system text)."""
    return tools_text([t.schema.text for t in exec_tools().offered(maintenance=False)])


# What the runtime binds as the workspace (fixed here, so no figure depends on where the
# benchmark runs)
WORKSPACE = "/home/user/checkout"


class CacheMeters:
    """Simulated provider caches over the trajectory's requests (the tool schemas, then the
    text): one that stores prefixes only at marked blocks (Anthropic's rules), given the
    runtime's cache layouts and, as the baseline, the whole request as one block marked at its
    end; and one that reuses only whole earlier messages (tools and system, then each message
    the OpenAI-compatible adapter sends)."""

    def __init__(self, head: int) -> None:
        self.head = head  # the tool schemas and the newline before the text
        self.meters = {f"{mode}{kind}": BlockCacheMeter() for mode in ("plain", "delta")
                       for kind in ("", "-1", "-msg")}  # fmt: skip
        self.meters["plain-msg"].lookback = self.meters["delta-msg"].lookback = STEPS + 1

    def add(self, mode: str, request: str, layout: CacheLayout) -> None:
        head, size, turns = self.head, len(request), layout.shifted(self.head).turns
        self.meters[mode].add(request, layout.shifted(head))
        self.meters[f"{mode}-1"].add(request, CacheLayout(size, (), (size,)))
        self.meters[f"{mode}-msg"].add(
            request, CacheLayout(size, (head, *turns), (head, *turns, size))
        )

    def results(self, suffix: str, plain: PrefixMeter, delta: PrefixMeter) -> list[dict[str, Any]]:
        m = self.meters
        out = [
            entry(f"block_cache_reuse_{mode}_delta{suffix}", m[key].rate, "share",
                  m[f"{key}-1"].rate, meter=meter.rate, input_cost=round(m[key].cost, 4),
                  baseline_input_cost=round(m[f"{key}-1"].cost, 4))
            for mode, key, meter in (("without", "plain", plain), ("with", "delta", delta))
        ]  # fmt: skip
        rate, baseline = m["delta-msg"].rate, m["plain-msg"].rate
        return [*out, entry(f"message_cache_reuse_with_delta{suffix}", rate, "share", baseline)]


def bench_prefix(
    tmp: Path,
    policy: str,
    shape: Shape = BENCHMARK,
    on_request: Callable[[Encoding, str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The prefix trajectory under ``policy``; another ``shape`` than the benchmark's (say, the
    agent never revises ``task/plan``) is a variant for comparison, not the benchmark's
    trajectory. ``on_request`` sees each step's encoding and ContextDelta request
    (benchmarks/counting_bench.py)."""
    log(f"(b) prefix reuse over a {STEPS}-step trajectory, {policy} maintenance")
    rng, clock = random.Random(STEPS), Clock(T0)
    db = morphz.open(tmp / f"trajectory-{policy}.db", now=clock)
    ctx = db.context(CONTEXT, create=True)
    root, activation = setup_trajectory(ctx, clock)
    state = {"root": root, "arrived": {}, "findings": [], "derive_at": rng.randint(3, 5)}
    state |= {"plan_at": rng.randint(20, 30), "retire_at": rng.randint(18, 22)}
    state |= {"maintain": (POLICIES | VARIANT_POLICIES)[policy], "level": "normal", "shape": shape}
    if not shape.revisions:
        state["plan_at"] = -1  # never: the random draws of the other turns stay as they were
    # the options the runtime's engine compiles with (Engine.options): its tools' authority and
    # schemas (one part each, after the adapters' system preamble), the framing of the system
    # message and the encoding's, the workspace binding, the mode; and its ContextDelta framing
    tools = exec_tools()
    authority = tools.authority()
    parts = (PREAMBLE, *(t.schema.text for t in tools.offered(False)))
    schemas = tool_schemas()
    plain, with_delta = PrefixMeter(keep_shares=True), PrefixMeter(keep_shares=True)
    delta = DeltaEncoder(MESSAGE_TOKENS)
    caches, layouts = CacheMeters(len(schemas) + 1), PlainLayouts()
    compile_ns, delta_ns, static, fresh, seen, kind = [], [], 0, 0, set(), "first"
    lost: Counter[str] = Counter()  # bytes not reused, by where and after which agent turn
    seeds: Counter[str] = Counter()  # ContextDelta seeds, by DeltaEncoder.last
    peak, peak_sent, retirements, mind_bytes = 0, 0, 0, 0
    for step in range(STEPS):
        options = EncodeOptions(
            session=SESSION, activation=activation, model="bench-model",
            objectives=("find the cause of the 502s and prepare a fix",), authority=authority,
            local_time=clock.now.isoformat(), scheduling={"mode": "work"},
            bindings={"workspace": WORKSPACE}, extra_parts=parts, framing=FRAMING,
        )  # fmt: skip
        start = time.perf_counter_ns()
        encoding = ctx.encode(options)
        compile_ns.append(time.perf_counter_ns() - start)
        state["level"], peak = encoding.pressure.level, max(peak, encoding.tokens)
        before, delta_before = plain.reused, with_delta.reused
        plain_request = f"{schemas}\n{encoding.text}"
        plain.add(plain_request)
        start = time.perf_counter_ns()
        text = delta.next(encoding)
        delta_ns.append(time.perf_counter_ns() - start)
        assert delta.pressure is not None
        peak_sent = max(peak_sent, delta.pressure.tokens)
        request = f"{schemas}\n{text}"
        if on_request is not None:
            on_request(encoding, text)
        with_delta.add(request)
        caches.add("plain", plain_request, layouts.next(encoding))
        caches.add("delta", request, delta.layout)
        if step:
            new = [o for o in encoding.state.observations if o.seq not in seen]
            fresh += sum(len(render.observation(o).encode()) + 2 for o in new)  # never reusable
            ends = {r.name: r.end + len(schemas) + 1 for r in encoding.regions}
            static += ends["evaluation-profile"]
            size = len(schemas) + 1 + len(encoding.text.encode())
            after = size - ends["inbox"]  # observation-state .. evaluate: re-sent every time
            lost["after-inbox"] += after
            mind_bytes += next(r.end - r.start for r in encoding.regions if r.name == "mind")
            lost[f"inbox, after {kind}"] += size - (plain.reused - before) - after
            key = "delta increment" if delta.last == "increment" else f"delta rebuild: {delta.last}"
            lost[key] += len(request.encode()) - (with_delta.reused - delta_before)
        if delta.last != "increment":
            seeds[str(delta.last)] += 1
        seen, kind = {o.seq for o in encoding.state.observations}, agent_turn(ctx, rng, step, state)
        retirements += kind == "retire"
        clock.now += timedelta(seconds=rng.randint(5, 60))
        batch = arrivals(rng, shape.result_chars)
        events = ctx.observe_batch(with_meta(batch, step) if shape.meta else batch, session=SESSION)
        state["arrived"].update((e.ref, step) for e in events)
    db.close()
    plain_lost = {k: round(v / plain.total, 4) for k, v in lost.items() if "delta" not in k}
    delta_lost = {k: round(v / with_delta.total, 4) for k, v in lost.items() if "delta" in k}
    suffix = "" if policy == "pressure" else f"_{policy}_maintenance"
    suffix += "" if shape.revisions else "_no_revisions"
    results = [
        entry(f"prefix_reuse_without_delta{suffix}", plain.rate, "share", static / plain.total,
              target=">= 0.90", met=plain.rate >= 0.90, requests=plain.requests),
        entry(f"prefix_reuse_with_delta{suffix}", with_delta.rate, "share", plain.rate,
              target=">= 0.97", met=with_delta.rate >= 0.97, requests=with_delta.requests,
              rebuilds=delta.rebuilds, increments=delta.increments),
    ]  # fmt: skip
    results += caches.results(suffix, plain, with_delta)
    details = {
        "policy": policy,
        "baselines": "without delta: tool schemas + protocol + evaluation-profile bytes only; "
        "with: without delta",
        "lost_share_without_delta": plain_lost,
        "lost_share_with_delta": delta_lost,
        "new_content_share": [round(fresh / m.total, 4) for m in (plain, with_delta)],
        "mind_share_without_delta": round(mind_bytes / plain.total, 4),  # part of after-inbox
        "min_share_without_delta": round(min(plain.shares), 4),
        "mean_request_bytes": [round(m.total / (m.requests - 1)) for m in (plain, with_delta)],
        "last_request_bytes": [len(text.encode()) for text in (encoding.text, delta.text or "")],
        "tool_schema_bytes": len(schemas.encode()),
        "compile_ms_p50_p95": [pct(compile_ns, 0.5), pct(compile_ns, 0.95)],
        "delta_request_ms_p50_p95": [pct(delta_ns, 0.5), pct(delta_ns, 0.95)],
        "retirement_batches": retirements,
        "delta_seeds_by_reason": dict(sorted((k, n) for k, n in seeds.items() if n)),
        "peak_tokens": peak,
        "peak_tokens_with_delta": peak_sent,  # below critical: DeltaEncoder re-seeds before it
        "last_tokens_and_pressure": [encoding.tokens, encoding.pressure.level],
        "active_at_end": {"frames": len(encoding.state.frames)}
        | {"observations": len(encoding.state.observations)},
    }
    return results, details


# ------------------------------------------------------------ the example encoding


def write_example(target: Path) -> None:
    """The demo's story (src/morphz/demo.py: a scripted agent run) on a store whose clock is
    fixed, then the encoding ``morphz context encoding`` prints for it, at a fixed local time.
    Its random identifiers (the activation's, which the reply's meta names) are drawn from a
    seeded generator, so the example is the same at every run."""
    clock = Clock(datetime(2026, 8, 4, 1, 0, tzinfo=UTC))
    draws = random.Random("example")
    seeded = mock.patch("uuid.uuid4", lambda: uuid.UUID(int=draws.getrandbits(128), version=4))
    with tempfile.TemporaryDirectory(prefix="morphz-example-") as folder:
        workspace, store = Path(folder) / "workspace", Path(folder) / "store" / "demo.db"
        workspace.mkdir()
        (workspace / "production.yaml").write_text(demo.CONFIG_FILE, encoding="utf-8")
        with seeded, morphz.open(store, now=clock) as db:
            ctx = db.context(create=True)
            assert asyncio.run(demo._story(ctx, workspace, lambda line: None))
            local = datetime(2026, 8, 4, 9, 5, tzinfo=timezone(timedelta(hours=8))).isoformat()
            text = ctx.encode(local_time=local).text
    target.write_text(text, encoding="utf-8")
    log(f"wrote {target} ({len(text.encode())} bytes)")


# ------------------------------------------------------------ driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events, fewer samples")
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    only = parser.add_mutually_exclusive_group()  # one part alone, or everything
    only.add_argument("--example", type=Path, help="only write the demo encoding to this file")
    only.add_argument("--prefix-only", action="store_true", help="only the prefix trajectories")
    only.add_argument("--sessions-only", action="store_true", help="only the sessions cell")
    parser.add_argument(
        "--no-revisions",
        action="store_true",
        help="a variant: the agent never revises task/plan (not the benchmark's trajectory)",
    )
    args = parser.parse_args(argv)
    if args.example:
        write_example(args.example)
        return 0
    cfg = QUICK if args.quick else FULL
    started = time.perf_counter()
    mode = "quick" if args.quick else "full"
    doc: dict[str, Any] = {"benchmark": "morphz-encoding", "mode": mode}
    doc |= {"machine": machine(), "config": cfg | {"retire_batch": RETIRE_BATCH, "steps": STEPS}}
    with tempfile.TemporaryDirectory(prefix="morphz-encoding-bench-") as folder:
        only = args.prefix_only or args.sessions_only
        compiled, compile_details = ([], {}) if only else bench_compile(Path(folder), cfg)
        if not args.prefix_only:
            results, compile_details["sessions"] = bench_sessions(Path(folder), cfg)
            compiled += results
        prefix, prefix_details = [], {}
        for policy in [] if args.sessions_only else POLICIES:
            results, prefix_details[policy] = bench_prefix(
                Path(folder), policy, Shape(revisions=not args.no_revisions)
            )
            prefix += results
    if args.no_revisions:  # a variant measures, it does not meet or miss the targets
        variant = "the agent never revises task/plan: not the benchmark's trajectory"
        prefix = [r | {"target": "-", "met": None, "variant": variant} for r in prefix]
    doc |= {"results": compiled + prefix, "details": {"compile": compile_details}}
    doc["details"]["prefix"] = prefix_details
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
