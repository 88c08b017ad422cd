"""Shared code of the real-model evaluations (``pressure_eval.py``, ``long_run_eval.py``).

The pieces, in the order a run uses them:

- the synthetic world: planted facts (``remember: the KEY is VALUE``) and filler (logs, tool
  output, chat), generated deterministically from a seed;
- :func:`resolve_model`: ``builtin`` (the :class:`BuiltinAgent` below), or any SPEC the
  ``morphz`` command accepts (``openai:NAME``, ``anthropic:NAME``, ``scripted:PATH``), resolved
  by the runtime's own resolver with the same configuration files and environment variables;
- :class:`Recorder`: wraps the model and records every request actually sent (its estimated
  tokens, the pressure the kernel showed, whether it was a maintenance request, prefix reuse
  over the request texts) and every usage the provider reported;
- :class:`Harness`: one store, one context, one engine; injects observation batches, runs
  activations, and computes the figures both reports share.

:class:`BuiltinAgent` is a deterministic function model with a simple but real maintenance
policy, so that both evaluations run offline and are tested. It reads only the encoding it is
sent (it keeps no state of its own between requests):

1. every planted fact in view that its mind does not yet hold becomes a frame
   ``fact/<key>/<n>`` derived from the observation that carries it; a newer value of a known key
   becomes ``fact/<key>/<n+1>``, derived from the observation and the old frame, related to it by
   ``supersedes`` (the old frame retires at once), its body keeping the earlier values;
2. while the runtime holds it in maintenance (critical pressure, or only ``context_tx`` and
   ``recall`` offered), it retires every observation in view except its root request, with a
   reason, in the same transaction (everything in view has been read at that point);
3. otherwise it replies: to a question, from its mind; to anything else, with a short note.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import morphz
from morphz import events as ev
from morphz.capacity import Budget
from morphz.encoding import PrefixMeter, estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.observe import Observation
from morphz.runtime.config import Settings, load, make_model
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import Model, ModelRequest, ModelResponse, ProviderError, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang.sexpr import Atom, SExpr, SList, Str, quote, read_one, to_text

AGENT_TOOLS = frozenset({"context_tx", "recall"})
MAX_OUTPUT_TOKENS = 4096
START = datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)

# --------------------------------------------------------------------------- the world


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ADJECTIVES = words(
    "amber azure brisk cobalt crimson dusky ember frosty gilded hollow indigo jade keen lunar "
    "mossy nimble ochre pale quiet russet silver tawny umber velvet woven young zesty bold "
    "copper misty"
)
NOUNS = words(
    "falcon heron otter lynx badger raven marten ibis walrus bison gecko orca puffin viper "
    "yak zebra condor dingo ferret jackal koala lemur newt osprey quokka stoat tapir wombat "
    "egret mole"
)
KEYS = (
    "release codename",
    "staging database host",
    "on-call pager alias",
    "payments API key label",
    "checkout feature flag",
    "backup bucket",
    "incident ticket",
    "deploy freeze tag",
    "primary region alias",
    "cache cluster name",
    "VPN profile",
    "audit log channel",
    "load test scenario",
    "canary cohort",
    "migration batch id",
    "support rotation name",
    "search index alias",
    "billing sandbox account",
    "metrics namespace",
    "hotfix branch",
)
SERVICES = words("checkout payments search gateway billing inventory auth notifier")
PEOPLE = words("Ana Bo Chen Dara Eli Femi Gus Hana Ivo Jun")
VALUE_SHAPE = r"[a-z]+-[a-z]+-\d{3}"
FACT = re.compile(
    rf"\b(?:remember|note|update): the (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?) is "
    rf"(?:now )?(?P<value>{VALUE_SHAPE})\b"
)
CURRENT_Q = re.compile(r"what is the current (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?)\?")
HISTORY_Q = re.compile(r"which values has the (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?) had")


def slug(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")


class Values:
    """Distinct values of the shape ``adjective-noun-NNN``, none of them repeated."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def new(self) -> str:
        while True:
            value = (
                f"{self.rng.choice(ADJECTIVES)}-{self.rng.choice(NOUNS)}-"
                f"{self.rng.randint(100, 999)}"
            )
            if value not in self.used:
                self.used.add(value)
                return value


def fact_observation(rng: random.Random, key: str, value: str) -> Observation:
    """A planted fact as a user's request to remember it, or inside a tool's output."""
    service = rng.choice(SERVICES)
    if rng.random() < 0.5:
        person = rng.choice(PEOPLE)
        text = (
            f"{person}: before I forget, remember: the {key} is {value}. "
            f"We will need it when we touch {service} again."
        )
        return Observation("user_message", text)
    lines = [
        f"$ morphz-ops describe {service}",
        f"service: {service}",
        f"replicas: {rng.randint(2, 9)}",
        f"image: registry.local/{service}:{rng.randint(100, 999)}",
        f"note: the {key} is {value}",
        f"last deploy: {rng.randint(1, 28)} days ago by {rng.choice(PEOPLE)}",
    ]
    return Observation("tool_result", "\n".join(lines))


def update_observation(rng: random.Random, key: str, value: str) -> Observation:
    person = rng.choice(PEOPLE)
    text = f"change notice from {person}: update: the {key} is now {value} (effective at once)."
    return Observation("external_event", text)


def filler_observation(rng: random.Random) -> Observation:
    """Routine material with nothing to keep: a log burst, a tool listing or chat."""
    service = rng.choice(SERVICES)
    roll = rng.random()
    if roll < 0.45:
        lines = [
            f"[{service}] worker {rng.randint(1, 16)} handled batch {rng.randint(1000, 9999)} "
            f"in {rng.randint(3, 900)} ms, queue depth {rng.randint(0, 300)}, status ok"
            for _ in range(rng.randint(2, 4))
        ]
        return Observation("external_event", "\n".join(lines))
    if roll < 0.8:
        rows = [
            f"{service}-{rng.randint(1000, 9999)}  Running  restarts={rng.randint(0, 3)}  "
            f"cpu={rng.randint(5, 95)}%  mem={rng.randint(100, 900)}Mi"
            for _ in range(rng.randint(3, 6))
        ]
        return Observation("tool_result", f"$ morphz-ops pods {service}\n" + "\n".join(rows))
    person = rng.choice(PEOPLE)
    text = (
        f"{person}: the {service} dashboard looked slow this morning, around "
        f"{rng.randint(7, 11)}:{rng.randint(10, 59)}; probably the usual cache warm-up, "
        "nothing to do unless it happens again."
    )
    return Observation("user_message", text)


def batch_question(number: int, total: int) -> str:
    return (
        f"Batch {number} of {total} of the project history has arrived in your inbox. Keep "
        "working: keep in your mind, as frames, every fact you may be asked about later (what "
        "people asked you to remember, values from notes and change notices, with their latest "
        "value), and keep your context within its budget by retiring what you have processed. "
        "Reply briefly when you are done."
    )


def current_question(key: str) -> str:
    return (
        f"Question: what is the current {key}? Answer with the value, from your mind "
        "(use recall if it is no longer in view)."
    )


def history_question(key: str) -> str:
    return (
        f"Question: which values has the {key} had, oldest first? List every value it has had "
        "in order, from your mind (use recall if needed)."
    )


def answered(reply: str | None, value: str) -> bool:
    return reply is not None and value.lower() in reply.lower()


def history_answered(reply: str | None, values: Sequence[str]) -> bool:
    """Every value appears in the reply, in chronological order."""
    if reply is None:
        return False
    text = reply.lower()
    positions = [text.find(v.lower()) for v in values]
    return all(p >= 0 for p in positions) and positions == sorted(positions)


# --------------------------------------------------------------------------- reading encodings


@dataclass(frozen=True, slots=True)
class Seen:
    """An inbox entry: its ref and seq, kind, session, and text (head + tail of a preview)."""

    ref: str
    seq: int
    kind: str
    session: str
    text: str
    protected: bool = False


@dataclass(frozen=True, slots=True)
class FrameSeen:
    id: str
    revision: int
    lifecycle: str
    sources: tuple[str, ...]
    body: tuple[SExpr, ...]


@dataclass(frozen=True, slots=True)
class View:
    """An encoding as the builtin agent reads it (the whole encoding is one S-expression)."""

    session: str
    version: int
    level: str
    tokens: int
    mode: str
    inbox: tuple[Seen, ...]
    frames: tuple[FrameSeen, ...]

    @classmethod
    def parse(cls, encoding: str) -> View:
        root = read_one(encoding)
        if not isinstance(root, SList) or root.head != "context-encoding":
            raise ValueError("not a context encoding")
        regions = {item.head: item for item in root.items if isinstance(item, SList)}
        kernel = regions["kernel"]
        pressure = _child(kernel, "pressure")
        scheduling = _child(kernel, "scheduling")
        mode = _child(scheduling, "mode") if scheduling is not None else None
        protected = {
            _atom(item.items[0])
            for item in regions["observation-state"].items[1:]
            if isinstance(item, SList) and _child(item, "protected") is not None
        }
        inbox = tuple(
            _seen(item, protected)
            for item in regions["inbox"].items[1:]
            if isinstance(item, SList) and item.head == "observation"
        )
        frames = tuple(
            _frame(item)
            for item in regions["mind"].items[1:]
            if isinstance(item, SList) and item.head == "frame"
        )
        return cls(
            session=_atom(_value(kernel, "session")),
            version=int(_atom(_value(kernel, "mind-version"))),
            level=_atom(_value(pressure, "level")) if pressure else "normal",
            tokens=int(_atom(_value(pressure, "tokens"))) if pressure else 0,
            mode=_text(mode.items[1]) if mode is not None and len(mode.items) > 1 else "work",
            inbox=inbox,
            frames=frames,
        )

    def root(self) -> Seen | None:
        """The current request: the newest user message of this session."""
        mine = [s for s in self.inbox if s.kind == "user_message" and s.session == self.session]
        return mine[-1] if mine else None


def _child(lst: SList | None, name: str) -> SList | None:
    if lst is None:
        return None
    for item in lst.items[1:]:
        if isinstance(item, SList) and item.head == name:
            return item
    return None


def _value(lst: SList | None, name: str) -> SExpr:
    child = _child(lst, name)
    if child is None or len(child.items) < 2:
        raise ValueError(f"the encoding has no ({name} ...)")
    return child.items[1]


def _atom(node: SExpr) -> str:
    if isinstance(node, Atom):
        return node.text
    raise ValueError(f"expected an atom, got {to_text(node)[:80]}")


def _text(node: SExpr) -> str:
    return node.value if isinstance(node, Str) else to_text(node)


def _seen(item: SList, protected: set[str]) -> Seen:
    ref = _atom(item.items[1])
    text_node = _child(item, "text")
    if text_node is not None:
        text = _text(text_node.items[1])
    else:  # a preview: the head and the tail are what the agent can read without recall
        preview = _child(item, "preview")
        parts = [_child(preview, "head"), _child(preview, "tail")]
        text = "\n".join(_text(p.items[1]) for p in parts if p is not None)
    return Seen(
        ref,
        int(ref.removeprefix("@e")),
        _atom(_value(item, "kind")),
        _atom(_value(item, "session")),
        text,
        ref in protected,
    )


def _frame(item: SList) -> FrameSeen:
    sources = _child(item, "sources")
    body = _child(item, "body")
    lifecycle = _child(item, "lifecycle")  # stated only when not active
    return FrameSeen(
        _atom(item.items[1]),
        int(_atom(_value(item, "revision"))),
        _atom(lifecycle.items[1]) if lifecycle is not None else "active",
        tuple(_atom(s) for s in sources.items[1:]) if sources else (),
        body.items[1:] if body else (),
    )


# --------------------------------------------------------------------------- the builtin agent


@dataclass(frozen=True, slots=True)
class Known:
    """A fact the builtin agent holds in a ``fact/<key>/<n>`` frame."""

    frame: str
    number: int
    key: str
    value: str
    previous: tuple[str, ...]
    newest_source: int  # the highest @e seq among the frame's sources

    def body(self) -> str:
        previous = " ".join(quote(v) for v in self.previous)
        return f"(fact (key {quote(self.key)}) (value {quote(self.value)}) (previous {previous}))"


def known_facts(frames: Sequence[FrameSeen]) -> dict[str, Known]:
    out: dict[str, Known] = {}
    for f in frames:
        parts = f.id.split("/")
        if len(parts) != 3 or parts[0] != "fact" or not parts[2].isdigit():
            continue
        if f.lifecycle != "active" or not f.body or not isinstance(f.body[0], SList):
            continue
        fields = {
            c.head: c.items[1:] for c in f.body[0].items[1:] if isinstance(c, SList) and c.head
        }
        if not fields.get("key") or not fields.get("value"):
            continue
        key = _text(fields["key"][0])
        seqs = [int(s[2:]) for s in f.sources if s.startswith("@e")]
        candidate = Known(
            f.id,
            int(parts[2]),
            key,
            _text(fields["value"][0]),
            tuple(_text(v) for v in fields.get("previous", ())),
            max(seqs, default=0),
        )
        if key not in out or candidate.number > out[key].number:
            out[key] = candidate
    return out


class BuiltinAgent:
    """The deterministic agent of the evaluations (policy in the module docstring)."""

    name = "builtin"

    def __call__(self, request: ModelRequest) -> ModelResponse:
        view = View.parse(request.encoding)
        offered = {t.name for t in request.tools}
        maintaining = view.mode == "maintenance" or view.level == "critical"
        maintaining = maintaining or offered == AGENT_TOOLS
        root = view.root()
        ops = self.fact_ops(view)
        done = [s for s in view.inbox if s is not root and not s.protected]
        # its own receipts alone are not worth a transaction (each commit makes a new one)
        if maintaining and any(s.kind != "tx_receipt" for s in done):
            ops.append(f"(retire {' '.join(s.ref for s in done)})")
        if ops:
            reason = "keep the planted facts as frames; retire what has been read"
            tx = (
                f"(context-tx (base-version {view.version}) (reason {quote(reason)})\n  "
                + "\n  ".join(ops)
                + ")"
            )
            call = ToolCall(f"builtin-{view.version}", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (call,))
        return ModelResponse(self.answer(view, root))

    @staticmethod
    def fact_ops(view: View) -> list[str]:
        known = known_facts(view.frames)
        ops: list[str] = []
        for seen in sorted(view.inbox, key=lambda s: s.seq):
            for match in FACT.finditer(seen.text):
                key, value = match.group("key"), match.group("value")
                old = known.get(key)
                if old is not None and (old.value == value or seen.seq < old.newest_source):
                    continue  # already held, or older than what is held
                if old is None:
                    new = Known(f"fact/{slug(key)}/1", 1, key, value, (), seen.seq)
                    ops.append(f"(derive {new.frame} (from {seen.ref}) {new.body()})")
                else:
                    number = old.number + 1
                    new = Known(
                        f"fact/{slug(key)}/{number}",
                        number,
                        key,
                        value,
                        (*old.previous, old.value),
                        seen.seq,
                    )
                    ops.append(f"(derive {new.frame} (from {seen.ref} {old.frame}) {new.body()})")
                    ops.append(f"(relate {new.frame} supersedes {old.frame})")
                    ops.append(f"(retire {old.frame})")
                known[key] = new
        return ops

    @staticmethod
    def answer(view: View, root: Seen | None) -> str:
        text = root.text if root is not None else ""
        known = known_facts(view.frames)
        current, history = CURRENT_Q.search(text), HISTORY_Q.search(text)
        if current is None and history is None:
            return f"Noted; {len(known)} facts are in my mind."
        match = current if current is not None else history
        key = match.group("key") if match is not None else ""
        fact = known.get(key)
        if fact is None:
            return f"I do not know the {key}: it is not in my mind."
        if current is not None:
            return f"The {key} is {fact.value}."
        values = ", then ".join([*fact.previous, fact.value])
        return f"The {key} has been {values} (current)."


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
    tools = json.dumps([t.to_dict() for t in request.tools], sort_keys=True)
    return f"{tools}\n{request.encoding}"


class Recorder:
    """A :class:`Model` that forwards to ``inner`` and records every request and response."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.samples: list[Sample] = []
        self.meter = PrefixMeter()

    @property
    def name(self) -> str:
        return self.inner.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        found = _PRESSURE.findall(request.encoding)
        level, shown = found[-1] if found else ("unknown", "0")
        names = {t.name for t in request.tools}
        sample = Sample(request_tokens(request), int(shown), level, names == AGENT_TOOLS)
        self.samples.append(sample)
        self.meter.add(request_text(request))
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
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


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
