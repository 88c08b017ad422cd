"""Shared code of the real-model evaluations (``pressure_eval.py``, ``long_run_eval.py``).

The pieces, in the order a run uses them:

- :func:`resolve_model`: ``builtin`` (the :class:`BuiltinAgent`), or any SPEC the
  ``morphz`` command accepts (``openai:NAME``, ``anthropic:NAME``, ``scripted:PATH``), resolved
  by the runtime's own resolver with the same configuration files and environment variables;
- :class:`Recorder`: wraps the model and records every request actually sent (its estimated
  tokens, the pressure the kernel showed, whether it was a maintenance request, prefix reuse
  over the request texts) and every usage the provider reported;
- :class:`Harness`: one store, one context, one engine; injects observation batches, runs
  activations, and computes the figures both reports share.

The builtin agent and its policy are in ``_eval_agent.py``; the world in ``_eval_world.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import morphz
from _eval_agent import AGENT_TOOLS, BuiltinAgent
from morphz import events as ev
from morphz.capacity import Budget
from morphz.encoding import PrefixMeter, estimate_tokens
from morphz.encoding.prefix import BlockCacheMeter
from morphz.encoding.prefix import request_text as prefix_request_text
from morphz.interfaces.cli_agent import build_tools
from morphz.observe import Observation
from morphz.runtime.config import Settings, load, make_model
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import Model, ModelRequest, ModelResponse, ProviderError
from morphz.runtime.models.scripted import FunctionModel

T = TypeVar("T")

MAX_OUTPUT_TOKENS = 4096
START = datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)

# --------------------------------------------------------------------------- models


def resolve_model(spec: str) -> Model:
    """``builtin``, or a SPEC resolved exactly as ``morphz exec --model SPEC`` resolves it
    (configuration files, then ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` / ``ANTHROPIC_API_KEY``
    from the environment; the key is handed to the adapter and written nowhere)."""
    if spec == "builtin":
        return FunctionModel(BuiltinAgent(), name="builtin")
    settings: Settings = load(Path.home(), Path.cwd(), os.environ)
    return make_model(spec, settings, os.environ)


@dataclass(slots=True)
class Sample:
    """One request as sent, and what came back."""

    tokens: int  # estimate of the complete request: encoding + tool schemas sent
    kernel_tokens: int  # the pressure figure the kernel showed the model
    level: str
    maintenance: bool  # only context_tx and recall were offered
    increments: int = 0  # ContextDelta increments the request carried
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    error: str | None = None


_PRESSURE = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")


def request_tokens(request: ModelRequest) -> int:
    return estimate_tokens(request.encoding) + sum(
        estimate_tokens(json.dumps(t.to_dict())) for t in request.tools
    )


def request_text(request: ModelRequest) -> str:
    """The request as a provider's prompt cache sees it: the tool schemas, then the encoding."""
    return prefix_request_text(request.encoding, [t.text for t in request.tools])


class Recorder:
    """A :class:`Model` that forwards to ``inner`` and records every request and response."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.samples: list[Sample] = []
        self.meter = PrefixMeter()
        self.blocks = BlockCacheMeter()  # Anthropic's rules, the request's own cache layout

    @property
    def name(self) -> str:
        return self.inner.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        found = _PRESSURE.findall(request.encoding)
        level, shown = found[-1] if found else ("unknown", "0")
        names = {t.name for t in request.tools}
        sample = Sample(request_tokens(request), int(shown), level, names == AGENT_TOOLS)
        sample.increments = request.encoding.count("\n(context-delta\n")
        self.samples.append(sample)
        text = request_text(request)
        self.meter.add(text)
        if request.layout is not None:
            self.blocks.add(text, request.layout.shifted(len(text) - len(request.encoding)))
        try:
            response = await self.inner.request(request)
        except ProviderError as exc:
            sample.error = exc.code
            raise
        if response.usage is not None:
            sample.input_tokens = response.usage.input_tokens
            sample.output_tokens = response.usage.output_tokens
            sample.cached_tokens = response.usage.cached_input_tokens
        return response

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()

    def figures(self, hard: int) -> dict[str, Any]:
        s = self.samples
        reported = [x for x in s if x.input_tokens is not None]
        after_first = reported[1:]
        cached_total = sum(x.input_tokens or 0 for x in after_first)
        return {
            "model_calls": len(s),
            "maintenance_requests": sum(1 for x in s if x.maintenance),
            "requests_by_level": dict(Counter(x.level for x in s)),
            "provider_errors": dict(Counter(x.error for x in s if x.error)),
            "peak_tokens": {
                "request_estimate": max((x.tokens for x in s), default=0),
                "kernel_figure": max((x.kernel_tokens for x in s), default=0),
                "provider_input": max((x.input_tokens or 0 for x in reported), default=None),
                "hard_limit": hard,
                "under_hard_limit": all(x.tokens <= hard for x in s),
            },
            "provider_usage": {
                "requests_with_usage": len(reported),
                "input_tokens": sum(x.input_tokens or 0 for x in reported) if reported else None,
                "output_tokens": sum(x.output_tokens or 0 for x in reported) if reported else None,
                "cached_input_tokens": (
                    sum(x.cached_tokens or 0 for x in reported) if reported else None
                ),
                "cached_share_after_first": (
                    round(sum(x.cached_tokens or 0 for x in after_first) / cached_total, 4)
                    if cached_total
                    else None
                ),
            },
            "prefix_reuse": {
                "rate": round(self.meter.rate, 4),
                "requests": self.meter.requests,
                "measured_on": "tool schemas + encoding of each request, first one excluded",
                "mark_only_cache": round(self.blocks.rate, 4),  # BlockCacheMeter, same requests
                "requests_with_increments": sum(1 for x in s if x.increments),
            },
        }


# --------------------------------------------------------------------------- the harness


class SimClock:
    """Simulated wall time for the store and the kernel: one second per call, from START."""

    def __init__(self) -> None:
        self.current = START

    def __call__(self) -> datetime:
        self.current += timedelta(seconds=1)
        return self.current

    def iso(self) -> str:
        return self.current.isoformat(timespec="seconds")


def eval_budget(hard: int) -> Budget:
    """A budget whose hard limit is ``hard`` tokens (the window leaves room for the reply);
    critical from hard - hard/5, so maintenance has a fifth of the budget to work in."""
    return Budget(
        window=hard + MAX_OUTPUT_TOKENS,
        output_reserve=MAX_OUTPUT_TOKENS,
        configured=hard,
        reserve=max(200, hard // 5),
    )


@contextmanager
def store_folder(keep: Path | None, prefix: str) -> Iterator[Path]:
    """A folder for the store and the (empty) workspace: ``keep`` when given (kept, must not
    exist yet), else a temporary one deleted afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=False)
        yield keep
        return
    folder = _fresh_folder(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _fresh_folder(prefix: str) -> Path:
    """A new private folder in the temporary directory, named ``prefix`` and twelve random
    lower-case letters: the workspace's path is in every request's encoding, and the estimate
    counts its pre-tokenizer chunks, which tempfile's names of letters, digits and "_" vary
    from run to run (the same seed then gave another report)."""
    draw = random.SystemRandom()
    while True:
        name = prefix + "".join(draw.choice(string.ascii_lowercase) for _ in range(12))
        folder = Path(tempfile.gettempdir()) / name
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return folder


def eval_config(
    args: argparse.Namespace, full: dict[str, Any], quick: dict[str, Any], names: Sequence[str]
) -> dict[str, Any]:
    """The run's settings: the full or quick ones, with the command-line values of ``names``."""
    cfg = dict(quick if args.quick else full)
    cfg.update((n, getattr(args, n)) for n in names if getattr(args, n) is not None)
    return cfg


def run_harness(
    args: argparse.Namespace,
    model: Recorder,
    budget: Budget,
    name: str,
    evaluate: Callable[[Harness], Awaitable[T]],
) -> tuple[T, dict[str, Any], list[dict[str, Any]]]:
    """``evaluate`` on a harness over context ``eval-NAME`` in a store folder (``--db`` or a
    temporary one); what it returned, the recorder's figures and the trajectory."""
    with store_folder(args.db, f"morphz-{name}-eval-") as folder:
        harness = Harness(model, folder, SimClock(), args.step_limit, f"eval-{name}", budget)
        harness.delta = args.delta

        async def go() -> tuple[T, dict[str, Any]]:
            harness.open()
            try:
                return await evaluate(harness), harness.figures()
            finally:
                harness.close()
                await model.aclose()

        outcome, figures = asyncio.run(go())
    return outcome, figures, [t.to_dict() for t in harness.turns]


def report(
    kind: str, args: argparse.Namespace, cfg: dict[str, Any], started: float, **parts: Any
) -> dict[str, Any]:
    """The run's JSON document: what ran, then ``parts`` in order, then the time it took."""
    head = {"eval": kind, "model": args.model, "mode": "quick" if args.quick else "full"}
    head |= {
        "seed": args.seed,
        "config": cfg | {"step_limit": args.step_limit, "delta": args.delta},
    }
    return head | parts | {"seconds": round(time.perf_counter() - started, 2)}


@dataclass(slots=True)
class Turn:
    """One activation of the run and what its requests looked like."""

    label: str
    session: str
    result: ActivationResult
    requests: list[Sample]

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "label": self.label,
            "session": self.session,
            "state": r.state,
            "steps": r.steps,
            "requests": len(self.requests),
            "maintenance_requests": sum(1 for s in self.requests if s.maintenance),
            "first_level": self.requests[0].level if self.requests else None,
            "tokens_first": self.requests[0].tokens if self.requests else None,
            "tokens_peak": max((s.tokens for s in self.requests), default=None),
            "reason": r.reason,
        }


@dataclass
class Harness:
    """Runs activations of one context with the recorded model (one engine per store handle)."""

    recorder: Recorder
    folder: Path
    clock: SimClock
    step_limit: int
    context_id: str
    budget: Budget
    delta: bool = False  # ContextDelta requests
    turns: list[Turn] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)  # refs of the injected observations
    restarts: int = 0
    _db: morphz.Database | None = None
    _engine: Engine | None = None

    @property
    def ctx(self) -> morphz.Context:
        if self._engine is None:
            raise RuntimeError("the harness is not open")
        return self._engine.ctx

    def open(self) -> None:
        """Open the store (again, after :meth:`close`: a restart of the process)."""
        self._db = morphz.open(self.folder / "eval.db", now=self.clock)
        ctx = self._db.context(self.context_id, create=True)
        if ctx.budget() != self.budget:
            ctx.set_budget(self.budget)
        workspace = self.folder / "workspace"
        workspace.mkdir(exist_ok=True)
        config = RuntimeConfig(
            workspace=workspace,
            step_limit=self.step_limit,
            protected_paths=(self.folder / "eval.db",),
            max_output_tokens=MAX_OUTPUT_TOKENS,
            delta=self.delta,
        )
        self._engine = Engine(ctx, self.recorder, build_tools(Settings()), config)
        self._engine.clock = self.clock.iso

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = self._engine = None

    def restart(self) -> None:
        self.close()
        self.open()
        self.restarts += 1

    def inject(self, batch: list[Observation], session: str) -> list[str]:
        refs = [e.ref for e in self.ctx.observe_batch(batch, session=session)]
        self.injected.extend(refs)
        return refs

    async def activate(self, label: str, prompt: str, session: str) -> ActivationResult:
        if self._engine is None:
            raise RuntimeError("the harness is not open")
        first = len(self.recorder.samples)
        result = await self._engine.run(prompt, session=session)
        self.turns.append(Turn(label, session, result, self.recorder.samples[first:]))
        return result

    def figures(self) -> dict[str, Any]:
        """What both reports share: requests, tokens, transactions, observations, frames,
        activations and failures, audit."""
        ctx = self.ctx
        history = ctx.events()
        receipts = [e for e in history if e.kind == "tx_receipt"]
        outcomes = [json.loads(e.text or "{}") for e in receipts]
        refused = [o for o in outcomes if not o.get("ok")]
        mind = ctx.mind(all_observations=True)
        lifecycle = {o.ref: o.lifecycle for o in mind.observations}
        injected = set(self.injected)
        states = Counter(t.result.state for t in self.turns)
        failures: dict[str, list[str]] = {}  # reasons grouped with their numbers masked
        for t in self.turns:
            if t.result.state != "delivered":
                reason = f"{t.result.state}: {t.result.reason}"
                failures.setdefault(re.sub(r"\d+", "N", reason), []).append(reason)
        return self.recorder.figures(self.budget.hard) | {
            "budget": {
                "hard": self.budget.hard,
                "critical": self.budget.critical,
                "warning": self.budget.warning,
                "notice": self.budget.notice,
            },
            "transactions": {
                "committed": len(outcomes) - len(refused),
                "refused": len(refused),
                "refusal_codes": dict(Counter(_refusal_code(o) for o in refused)),
                "runtime_commits": sum(1 for e in history if e.kind == ev.RETIREMENTS_FINALIZED),
            },
            "observations": {
                "injected": len(injected),
                "injected_retired": sum(1 for r in injected if lifecycle.get(r) == "retired"),
                "retired": sum(1 for life in lifecycle.values() if life == "retired"),
                "active_at_end": sum(1 for life in lifecycle.values() if life == "active"),
                "total": len(lifecycle),
            },
            "frames_at_end": dict(Counter(f.lifecycle for f in mind.frames)),
            "relations_at_end": len(mind.relations),
            "activations": {"run": len(self.turns), **dict(states)},
            "failures": [
                {"reason": reason, "count": len(seen), "example": seen[0]}
                for reason, seen in sorted(failures.items())
            ],
            "restarts": self.restarts,
            "events": len(history),
            "audit_ok": ctx.audit().ok,
        }


def _refusal_code(outcome: dict[str, Any]) -> str:
    error = outcome.get("error")
    return str(error.get("code")) if isinstance(error, dict) else "unknown"


def active_frames_with(mind: morphz.Mind, value: str) -> list[str]:
    """Ids of the active frames whose body holds ``value``."""
    needle = value.lower()
    return [f.id for f in mind.frames if f.lifecycle == "active" and needle in f.body.lower()]


# --------------------------------------------------------------------------- command line


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--model",
        required=True,
        metavar="SPEC",
        help="builtin (offline, deterministic), openai:NAME, anthropic:NAME or scripted:PATH",
    )
    p.add_argument("--seed", type=int, default=7, help="seed of the synthetic history")
    p.add_argument("--out", type=Path, help="also write the JSON document to this file")
    p.add_argument("--quick", action="store_true", help="a small run (seconds with builtin)")
    p.add_argument("--step-limit", type=int, default=24, help="model steps per activation")
    p.add_argument(
        "--delta",
        action="store_true",
        help="ContextDelta: each request of an activation extends the previous one",
    )
    p.add_argument(
        "--db",
        type=Path,
        metavar="DIR",
        help="keep the store in DIR (must not exist) to inspect it with morphz context ...",
    )
    return p


def check_args(
    p: argparse.ArgumentParser, args: argparse.Namespace, positive: Sequence[str]
) -> None:
    """Refuse (exit 2) non-positive numbers among ``positive`` and a --db folder that exists."""
    for name in positive:
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.db is not None and args.db.exists():
        p.error(f"--db {args.db} exists: give a folder that does not exist yet")


def emit(doc: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(doc, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")


def log(tag: str, message: str) -> None:
    print(f"[{tag}] {message}", file=sys.stderr, flush=True)
