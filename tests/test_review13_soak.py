"""Review 13, long-running agents: a deterministic agent (a FunctionModel that reads each
request's encoding, ContextDelta increments included) works across sessions and many
activations: it derives frames from tool results, retires what it processed, revises, relates,
protects and places frames, checkpoints and rolls back, restores and recalls retired content,
retires sessions. Invariants are checked on every request (within the hard limit, the kernel's
figure against the request's size, what the encoding shows against the live mind) and at the end
(audit, recall finds every retired observation, ContextDelta on and off lead to the same mind).

Failing tests here are defects found on the way: maintenance that can never end when the fixed
part of a work request is above the notice level, a maintenance request whose kernel states a
level below critical (so not the pressure resuming work would meet), and the engine's prefix
meter keeping a number per request for the engine's whole life."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import morphz
from morphz.capacity import Budget
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall, ToolSchema
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import Tool, ToolContext, ToolOutcome, ToolRegistry
from morphz.txlang.sexpr import Atom, SExpr, SList, Str, quote, read, to_text

ANIMALS = ("aardvark", "bison", "caracal", "dingo", "egret", "ferret")
ANIMALS += ("gibbon", "heron", "ibex", "jackal", "kiwi", "lemur")
PRESSURE = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")


def word_of(k: int) -> str:
    """The distinctive word of probe ``k``'s reading (occurs in no other event)."""
    return f"{ANIMALS[k % len(ANIMALS)]}{k}x"


PROBE = ToolSchema(
    "probe",
    "Measure something; returns a reading.",
    {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]},
)


async def _probe(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    k = int(args["k"])
    count = int(args.get("size", 3000 if k % 10 == 0 else 40 + (k * 7) % 60))
    filler = " ".join(f"f{k}-{i}" for i in range(count))
    return ToolOutcome(f"probe-{k} reading: the word is {word_of(k)}. {filler}")


def registry() -> ToolRegistry:
    tools = build_tools(Settings())
    tools.add(Tool(PROBE, _probe, "allow", external=True))
    return tools


def _atom(node: SExpr) -> str:
    return node.text if isinstance(node, Atom) else to_text(node)


def _child(node: SExpr, name: str) -> SList | None:
    if not isinstance(node, SList):
        return None
    for item in node.items[1:]:
        if isinstance(item, SList) and item.head == name:
            return item
    return None


def _second(node: SList | None) -> SExpr:
    assert node is not None and len(node.items) > 1
    return node.items[1]


@dataclass
class View:
    """A request as the agent reads it: the encoding with every increment applied."""

    session: str = ""
    activation: str = ""
    version: int = 0
    level: str = "normal"
    tokens: int = 0
    mode: str = "work"
    batch: bool = False
    inbox: dict[str, tuple[str, str]] = field(default_factory=dict)  # ref -> (kind, text)
    frames: dict[str, SList] = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)
    increments: int = 0

    def life(self, fid: str) -> str:
        found = _child(self.frames[fid], "lifecycle")
        return "active" if found is None else _atom(_second(found))

    def protected(self, fid: str) -> bool:
        return _child(self.frames[fid], "protected") is not None

    def shown(self, fid: str) -> tuple[int, str, str]:
        node = self.frames[fid]
        body = _child(node, "body")
        text = " ".join(to_text(x) for x in body.items[1:]) if body else ""
        return int(_atom(_second(_child(node, "revision")))), self.life(fid), text


def _observation(node: SExpr) -> tuple[str, tuple[str, str]]:
    assert isinstance(node, SList)
    text_node = _child(node, "text")
    if text_node is not None:
        value = _second(text_node)
        text = value.value if isinstance(value, Str) else to_text(value)
    else:  # a preview: its head and tail
        preview = _child(node, "preview")
        parts = [_child(preview, "head"), _child(preview, "tail")]
        text = " ".join(to_text(_second(p)) for p in parts if p is not None)
    return _atom(node.items[1]), (_atom(_second(_child(node, "kind"))), text)


def parse(encoding: str) -> View:
    forms = read(encoding)
    root = forms[0]
    assert isinstance(root, SList) and root.head == "context-encoding"
    view = View()
    kernel: dict[str, SList] = {}
    for region in root.items[1:]:
        if not isinstance(region, SList):
            continue
        entries = [x for x in region.items[1:] if isinstance(x, SList)]
        if region.head == "inbox":
            view.inbox.update(_observation(o) for o in entries)
        elif region.head == "mind":
            for item in entries:
                if item.head == "frame":
                    view.frames[_atom(item.items[1])] = item
                elif item.head == "checkpoints":
                    view.checkpoints = [_atom(x) for x in item.items[1:]]
        elif region.head == "kernel":
            kernel.update((e.head or "", e) for e in entries)
    for form in forms[1:]:
        if not isinstance(form, SList) or form.head != "context-delta":
            continue
        view.increments += 1
        for item in (x for x in form.items[1:] if isinstance(x, SList)):
            if item.head == "arrived":
                ref, seen = _observation(item.items[1])
                view.inbox[ref] = seen
            elif item.head in ("derived", "updated"):
                frame = item.items[1]
                assert isinstance(frame, SList)
                view.frames[_atom(frame.items[1])] = frame
            elif item.head == "retired":
                for x in item.items[1:]:
                    view.inbox.pop(_atom(x), None)
                    view.frames.pop(_atom(x), None)
            elif item.head == "checkpointed":
                view.checkpoints += [_atom(x) for x in item.items[1:]]
            elif item.head == "dropped-checkpoints":
                gone = {_atom(x) for x in item.items[1:]}
                view.checkpoints = [c for c in view.checkpoints if c not in gone]
            elif item.head == "kernel-update":
                kernel.update((e.head or "", e) for e in item.items[1:] if isinstance(e, SList))
    view.session = _atom(_second(kernel["session"]))
    view.activation = _atom(_second(kernel["activation"]))
    view.version = int(_atom(_second(kernel["mind-version"])))
    view.level = _atom(_second(_child(kernel["pressure"], "level")))
    view.tokens = int(_atom(_second(_child(kernel["pressure"], "tokens"))))
    mode = _second(_child(kernel["scheduling"], "mode"))
    view.mode = mode.value if isinstance(mode, Str) else to_text(mode)
    view.batch = _child(kernel["scheduling"], "batch") is not None
    return view


def _tx(number: int, version: int, ops: list[str], reason: bool) -> ModelResponse:
    text = f"(context-tx (base-version {version})"
    text += ' (reason "processed")' if reason else ""
    text += " " + " ".join(ops) + ")"
    return ModelResponse(None, (ToolCall(f"c{number}", "context_tx", json.dumps({"tx": text})),))


@dataclass
class Agent:
    """A deterministic agent that follows the protocol (see the module docstring)."""

    engine: Engine | None = None
    problems: list[str] = field(default_factory=list)
    n: int = 0
    k: int = 0
    steps: dict[str, int] = field(default_factory=dict)
    retired_words: dict[str, str] = field(default_factory=dict)  # word -> the ref retired
    derived: set[str] = field(default_factory=set)
    pending_recall: str | None = None
    recalls: int = 0
    retired_frames: list[str] = field(default_factory=list)
    session_op: str | None = None
    increments: int = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.n += 1
        view = parse(request.encoding)
        self.increments += bool(view.increments)
        offered = {t.name for t in request.tools}
        self._check(view, request)
        step = self.steps.get(view.activation, 0)
        self.steps[view.activation] = step + 1
        act = len(self.steps)
        ops: list[str] = []
        reason = False
        if self.pending_recall is not None:
            results = [text for kind, text in view.inbox.values() if kind == "recall_result"]
            if results:
                if not any(self.pending_recall in text for text in results):
                    self.problems.append(f"recall did not find {self.pending_recall}")
                self.recalls += 1
                self.pending_recall = None
        for ref, (kind, text) in sorted(view.inbox.items(), key=lambda x: int(x[0][2:])):
            if kind == "tool_result" and text.startswith("probe-"):
                k = int(text.split()[0].split("-")[1])
                fid = f"probe/{k}"
                if fid not in view.frames and fid not in self.derived:
                    self.derived.add(fid)
                    ops.append(f"(derive {fid} (from {ref}) (reading (word {quote(word_of(k))})))")
                    before = f"probe/{k - 1}"
                    if k % 3 == 0 and before in view.frames and view.life(before) == "active":
                        ops.append(f"(relate {fid} follows {before})")
                ops.append(f"(retire {ref})")
                reason = True
                self.retired_words[word_of(k)] = ref
            elif kind in ("approval_result", "recall_result"):
                ops.append(f"(retire {ref})")
                reason = True
        probes = [f for f in view.frames if f.startswith("probe/")]
        if step == 0 and not ops:
            if act % 9 == 0 and probes:
                ops.append(f"(protect {probes[-1]})")
            elif act % 6 == 0 and len(probes) > 1:
                ops.append(f"(place {probes[-1]} first)")
            elif act % 10 == 0 and self.retired_frames:
                ops.append(f"(restore {self.retired_frames.pop(0)})")
            elif act % 12 == 0 and self.retired_words:
                refs = sorted(self.retired_words.values(), key=lambda r: int(r[2:]))
                ops.append(f"(restore {refs[len(refs) // 2]})")
            elif act % 13 == 0 and f"s{(act + 1) % 3}" != view.session:
                self.session_op = f"s{(act + 1) % 3}"
        if step == 1 and act % 8 == 0 and len(probes) > 1 and not ops:
            old = probes[-1]
            if view.life(old) == "active" and not view.protected(old):
                new = f"{old}/v{self.n}"
                ops.append(f"(derive {new} (from {old}) (reading (superseded {quote(old)})))")
                ops += [f"(relate {new} supersedes {old})", f"(retire {old})"]
                reason = True
        if self.n % 5 == 0:
            active = [f for f in probes if view.life(f) == "active"]
            if active and not any(active[-1] in op for op in ops):
                ops.append(f"(revise {active[-1]} (reading (checked {self.n})))")
        if view.level in ("warning", "critical") or view.mode == "maintenance":
            active = [f for f in view.frames if view.life(f) == "active"]
            for fid in [f for f in active[:4] if not any(f in op for op in ops)]:
                if view.protected(fid):
                    ops.append(f"(unprotect {fid})")
                ops.append(f"(retire {fid})")
                self.retired_frames.append(fid)
                reason = True
            for ref, (kind, _text) in sorted(view.inbox.items(), key=lambda x: int(x[0][2:])):
                if kind == "agent_reply":
                    ops.append(f"(retire {ref})")
                    reason = True
        receipts = [ref for ref, (kind, _t) in view.inbox.items() if kind == "tx_receipt"]
        if ops or len(receipts) >= 4:
            ops += [f"(retire {ref})" for ref in receipts]
            reason = reason or bool(receipts)
        if step == 0 and act % 7 == 0:
            if view.checkpoints:
                ops.append(f"(drop-checkpoint {' '.join(view.checkpoints)})")
                reason = True
            ops.append(f"(checkpoint cp-{act})")
        if ops:
            return _tx(self.n, view.version, ops, reason)
        if self.session_op is not None:
            ops, self.session_op = [f"(retire-session {self.session_op})"], None
            return _tx(self.n, view.version, ops, True)
        if step <= 1 and act % 11 == 0 and view.checkpoints and "probe" in offered:
            return _tx(self.n, view.version, [f"(rollback {view.checkpoints[-1]})"], True)
        if act % 4 == 0 and self.pending_recall is None and self.retired_words and step < 6:
            words = sorted(self.retired_words)
            self.pending_recall = words[(act * 7) % len(words)]
            args = {"op": "search", "query": self.pending_recall, "limit": 3}
            return ModelResponse(None, (ToolCall(f"c{self.n}", "recall", json.dumps(args)),))
        if step < 5 and "probe" in offered:
            self.k += 1
            return ModelResponse(
                None, (ToolCall(f"c{self.n}", "probe", json.dumps({"k": self.k})),)
            )
        return ModelResponse(f"done {act}")

    def _check(self, view: View, request: ModelRequest) -> None:
        """The request within the hard limit, the kernel's figure agreeing with its size (never
        below what is sent; in work mode above it only by the figures' own slack), and what it
        shows of the mind and inbox equal to the live state."""
        engine = self.engine
        assert engine is not None
        sent = engine.sent_tokens(request.encoding, [t.text for t in request.tools])
        budget = engine.config.budget or engine.ctx.budget()
        if sent > budget.hard:
            self.problems.append(f"request {self.n}: {sent} tokens above the hard {budget.hard}")
        if view.tokens < sent or (view.mode == "work" and view.tokens - sent > 60):
            self.problems.append(f"request {self.n}: kernel says {view.tokens}, sent {sent}")
        mind = engine.ctx.mind()
        live = {
            f.id: (f.revision, f.lifecycle, f.body)
            for f in mind.frames
            if f.lifecycle in ("active", "retiring")
        }
        shown = {fid: view.shown(fid) for fid in view.frames}
        if live != shown:
            self.problems.append(f"request {self.n}: frames shown {shown} but live {live}")
        active = {o.ref for o in mind.observations if o.lifecycle == "active"}
        if not set(view.inbox) <= active or (not view.batch and set(view.inbox) != active):
            self.problems.append(f"request {self.n}: inbox {sorted(view.inbox)} live {active}")


def soak(
    folder: Path, activations: int, *, delta: bool, budget: Budget, sessions: int = 3
) -> tuple[morphz.Context, Agent, list[ActivationResult]]:
    ctx = morphz.open(folder / "soak.db").context("context-default", create=True)
    agent = Agent()
    config = RuntimeConfig(workspace=folder, delta=delta, budget=budget, step_limit=40)
    agent.engine = Engine(ctx, FunctionModel(agent, name="soak"), registry(), config)
    results = [
        asyncio.run(agent.engine.run(f"task {i} please", session=f"s{i % sessions}"))
        for i in range(activations)
    ]
    return ctx, agent, results


def mind_of(ctx: morphz.Context) -> Any:
    mind = ctx.mind()
    return (
        [(f.id, f.body, f.revision, f.lifecycle, f.sources, f.protected) for f in mind.frames],
        sorted(mind.relations),
        [name for name, _version in mind.checkpoints],
        mind.version,
        mind.clock,
        [(o.ref, o.kind, o.lifecycle, o.protected) for o in mind.observations],
        mind.sessions,
    )


# --------------------------------------------------------------------------- the soak (a pin)


def test_a_long_run_keeps_every_invariant_and_delta_on_and_off_reach_the_same_mind(
    tmp_path: Path,
) -> None:
    """A pin, not a defect: 200 activations in 4 sessions (about 900 model requests each way)
    under a budget tight enough for maintenance and batches. ContextDelta has many rules for
    when a seed must be rebuilt (rollback, restore, place, protection, retired sessions); the
    same deterministic agent must reach the same mind with and without it, every request must
    show the live state, and nothing the agent retired may be lost."""
    budget = Budget(window=32_000, output_reserve=2_000, configured=20_000, reserve=400)
    runs = {}
    for delta in (False, True):
        folder = tmp_path / f"delta-{delta}"
        folder.mkdir()
        ctx, agent, results = soak(folder, 200, delta=delta, budget=budget, sessions=4)
        assert agent.problems == []
        assert [r.state for r in results] == ["delivered"] * len(results)
        assert agent.recalls > 10
        report = ctx.audit()
        assert report.ok, report.differences
        lost = [w for w in agent.retired_words if not ctx.recall.search(w, limit=3).hits]
        assert lost == [] and len(agent.retired_words) > 60, len(agent.retired_words)
        runs[delta] = (mind_of(ctx), agent)
    assert runs[True][1].increments > 20  # ContextDelta was really used
    assert runs[True][1].n == runs[False][1].n
    assert runs[True][0] == runs[False][0]


# --------------------------------------------------------------------------- the defects


def _first_request(
    folder: Path, budget: Budget, model: Any = None
) -> tuple[tuple[str, int, list[str]], list[tuple[str, int, list[str]]]]:
    """One activation in a new store with ``budget``; what each request stated (level, figure,
    the tools offered). ``model``: the agent (default: reply at once)."""
    folder.mkdir()
    ctx = morphz.open(folder / "s.db").context("c", create=True)
    ctx.set_budget(budget)
    seen: list[tuple[str, int, list[str]]] = []

    def agent(request: ModelRequest) -> ModelResponse:
        level, tokens = PRESSURE.findall(request.encoding)[-1]
        seen.append((level, int(tokens), sorted(t.name for t in request.tools)))
        return ModelResponse("ok") if model is None else model(request, len(seen))

    engine = Engine(ctx, FunctionModel(agent), registry(), RuntimeConfig(workspace=folder))
    asyncio.run(engine.run("hello there", session="s"))
    return seen[0], seen


def test_a_request_put_in_maintenance_states_critical_pressure(tmp_path: Path) -> None:
    """The engine enters maintenance because the work request's figure reached critical, then
    compiles the maintenance encoding, whose kernel lists fewer tools in its authority: its
    figure comes out a few tokens lower, so the first maintenance request tells the agent
    "warning" while its external tools are withdrawn. The engine's docstring says the figure in
    maintenance is "the pressure that resuming work would meet", and the protocol says "at
    critical pressure you are in maintenance": resuming work would meet critical here. Cause:
    engine.py _decide (line 368-371) switches on the work encoding's level and then returns
    `_encode(True)` as is; _encode (line 381) counts the work tool schemas but the
    maintenance kernel. The figure should be at least the one that decided the switch (or the
    maintenance kernel measured with the work authority)."""
    (level, figure, _tools), _ = _first_request(
        tmp_path / "wide", Budget(window=64_000, output_reserve=2_000, configured=30_000)
    )
    assert level == "normal"
    # critical exactly at the work request's figure: that request is critical
    tight = Budget(window=64_000, output_reserve=2_000, configured=figure + 400, reserve=400)
    (level, shown, tools), _ = _first_request(tmp_path / "tight", tight)
    assert tools == ["context_tx", "recall"]  # maintenance
    assert level == "critical", f"maintenance stated at {level} ({shown}; work measured {figure})"
    assert shown >= figure


def test_maintenance_ends_once_the_agent_has_retired_what_it_can(tmp_path: Path) -> None:
    """Maintenance ends only at normal pressure (under notice, half the hard limit by default).
    When the fixed part of a work request (protocol, kernel, the tool schemas: about 4,100
    tokens with the default tools) is above notice, normal is unreachable: once a large tool
    result makes a request critical, the agent retires it as told, the request falls back to
    the notice level far below warning, and still every later request of the activation offers
    only context_tx and recall. An agent that needs a tool to finish can only reply or hit the
    step limit (the soak shows most requests in maintenance under such budgets, an 8,000-token
    budget being the evaluations' own). Cause: engine.py _decide (lines 373 and 376) resumes work
    only when `level == "normal"`. Suggested fix: resume when the work request is below warning
    (keeping hysteresis between warning and critical), or when nothing the agent can retire is
    left and the work request is below critical; or refuse a budget whose notice level is below
    the fixed part of a request."""
    (_level, floor, _tools), _ = _first_request(
        tmp_path / "wide", Budget(window=64_000, output_reserve=2_000, configured=30_000)
    )
    hard = 2 * (floor - 100)  # notice = floor - 100: the bare work request is at notice
    budget = Budget(
        window=64_000, output_reserve=2_000, configured=hard, reserve=hard - floor - 1500
    )
    assert budget.notice < floor < budget.warning

    def agent(request: ModelRequest, number: int) -> ModelResponse:
        if number == 1:  # a result of about 2,500 tokens: critical, yet within the hard limit
            args = json.dumps({"k": 1, "size": 1100})
            return ModelResponse(None, (ToolCall("c1", "probe", args),))
        view = parse(request.encoding)
        if number == 2:  # maintenance: retire the result once read
            refs = [r for r, (kind, _t) in view.inbox.items() if kind == "tool_result"]
            return _tx(number, view.version, [f"(retire {' '.join(refs)})"], True)
        return ModelResponse("stopping here")

    _first, seen = _first_request(tmp_path / "tight", budget, agent)
    assert seen[0][0] != "critical" and seen[1][0] == "critical"
    assert "probe" not in seen[1][2]
    level, tokens, tools = seen[2]
    assert tokens < budget.warning, seen  # the result is retired: back near the bare request
    assert "probe" in tools, f"still in maintenance at {level} ({tokens} of {budget.warning})"


def test_the_engine_keeps_no_number_per_request_for_its_whole_life(tmp_path: Path) -> None:
    """An engine lives as long as a `morphz chat` (or a host process): its PrefixMeter appends
    each request's reused share to `shares` (encoding/prefix.py:74), a list nothing in the
    runtime reads (the engine uses `reused` and `previous`), so the process grows by a float
    and a list slot per model request for ever. Suggested fix: keep only the sums in the
    engine's meter (a flag, or a meter without per-request shares; the evaluations that want
    the shares keep their own)."""
    ctx = morphz.open(tmp_path / "s.db").context("c", create=True)

    def agent(request: ModelRequest) -> ModelResponse:
        view = parse(request.encoding)
        if sum(kind == "tx_receipt" for kind, _t in view.inbox.values()) >= 3:
            return ModelResponse("done")
        return _tx(0, view.version, [f"(create n/{view.version} (x 1))"], False)

    engine = Engine(ctx, FunctionModel(agent), registry(), RuntimeConfig(workspace=tmp_path))
    for i in range(30):
        asyncio.run(engine.run(f"task {i}", session="s"))
    assert engine.meter.requests > 30
    assert len(engine.meter.shares) <= 8, "one entry per request, kept for the engine's life"
