"""Compile the Context Encoding: the bounded text one model request evaluates (DESIGN §9).

Regions, in physical order (stable content first, for prefix caches): protocol,
evaluation-profile, inbox, observation-state, mind, session-directory, kernel,
[cognitive-capabilities], evaluation-environment, evaluate. The same state and options give the
same bytes; appending an observation leaves every byte up to the end of the previous inbox as it
was. Everything read is bounded by what is in view, never by the length of the history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from morphz.capacity import Budget, Pressure, budget_over, pressure
from morphz.checks import not_unicode
from morphz.encoding import render
from morphz.encoding.options import EncodeOptions, checked
from morphz.encoding.protocol import PROTOCOL
from morphz.encoding.sessions import SessionPlan, horizon, plan_sessions
from morphz.encoding.tokens import figure, part_tokens
from morphz.encoding.view import View, stored_view
from morphz.errors import InputError, ParseError
from morphz.ids import make_ref
from morphz.mind.state import Edge, Frame
from morphz.store.active_base import ActiveObservation, value_text
from morphz.store.base import ActivationRow, ReadTxn
from morphz.txlang.sexpr import MAX_DEPTH, nesting, quote, read, to_text

REGION_ORDER = (
    "protocol",
    "evaluation-profile",
    "inbox",
    "observation-state",
    "mind",
    "session-directory",
    "kernel",
    "cognitive-capabilities",
    "evaluation-environment",
    "evaluate",
)
_T = TypeVar("_T")
PRESSURE_SLACK = 48  # tokens for the pressure figures themselves, added before they are known


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    start: int  # byte offsets in the UTF-8 text
    end: int
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "end": self.end, "tokens": self.tokens}


@dataclass(frozen=True, slots=True)
class ActiveState:
    """What the encoding was compiled from (ContextDelta compares these between requests)."""

    version: int
    clock: int
    observations: tuple[ActiveObservation, ...]
    frames: tuple[Frame, ...]
    relations: tuple[Edge, ...]
    checkpoints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Encoding:
    text: str
    regions: tuple[Region, ...]
    pressure: Pressure
    state: ActiveState
    sessions: SessionPlan
    options: EncodeOptions
    inbox_items: tuple[int, ...] = ()  # the length in characters of each inbox item, in order
    # the rendered items (one per line) of observation-state, session-directory, kernel and
    # evaluation-environment, and each frame as the mind shows it (in state.frames' order):
    # what ContextDelta compares between requests, without reading the text again
    items: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    frame_lines: tuple[str, ...] = ()
    view: View = field(default_factory=View)  # the stored view with the options' overrides

    @property
    def tokens(self) -> int:
        return self.pressure.tokens

    def region(self, name: str) -> str:
        data = self.text.encode()
        for r in self.regions:
            if r.name == name:
                return data[r.start : r.end].decode()
        names = ", ".join(r.name for r in self.regions)
        raise InputError(f"this encoding has no region {name!r}: its regions are {names}")

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bytes": len(self.text.encode()),
            "tokens": self.tokens,
            "pressure": self.pressure.to_dict(),
            "regions": [r.to_dict() for r in self.regions],
            "sessions": self.sessions.to_dict(),
            "view": self.view.to_dict(),
        }
        if include_text:
            out["text"] = self.text
        return out


def read_state(r: ReadTxn) -> ActiveState:
    return ActiveState(
        r.row.version,
        r.row.clock,
        tuple(r.active.observations()),
        tuple(r.active.frames()),
        tuple(r.active.relations()),
        tuple(r.active.checkpoint_names()),
    )


def stored_budget(r: ReadTxn) -> Budget:
    return Budget.stored(r.active.settings().get("budget"), r.row.context_id)


def _kernel(
    r: ReadTxn,
    opts: EncodeOptions,
    running: list[ActivationRow],
    figures: str,
    scheduling: Mapping[str, Any],
) -> tuple[str, ...]:
    row = r.row
    return (
        f"(context {row.context_id})",
        f"(session {opts.session})",
        f"(activation {opts.activation or 'none'})",
        f"(mind-version {row.version})",
        f"(clock {row.clock})",
        f"(organizing-window {row.window})",
        "(objectives" + "".join(f" {quote(o)}" for o in opts.objectives) + ")",
        "(running-activations" + "".join(f" {_running(a)}" for a in running) + ")",
        "(scheduling"
        + "".join(f" ({k} {quote(value_text(v))})" for k, v in sorted(scheduling.items()))
        + ")",
        "(authority" + "".join(f" ({k} {v})" for k, v in sorted(opts.authority.items())) + ")",
        f"(pressure {figures})",
    )


def _running(a: ActivationRow) -> str:
    """A running activation: its session, its root request and its objective when known."""
    root = f" (root {make_ref(a.root_seq)})" if a.root_seq is not None else ""
    goal = f" (objective {quote(a.objective)})" if a.objective is not None else ""
    return f"({a.activation_id} (session {a.session_id}){root}{goal})"


def sent_pressure(encoding: Encoding, text: str, framing: int = 0) -> Pressure:
    """The pressure of sending ``text`` (a ContextDelta request built on ``encoding``) with the
    parts ``encoding`` was measured with, counted the way the compile counts, plus ``framing``
    tokens (what a provider adds around the messages the increments travel in) beside the
    options' own."""
    opts = encoding.options
    parts = sum(part_tokens(p, opts.counter) for p in (text, *opts.extra_parts))
    measured = figure(parts + PRESSURE_SLACK, opts.calibration, opts.counter)
    framed = measured.tokens + opts.framing + framing
    return pressure(framed, measured.kind, encoding.pressure.budget)


def pressure_figures(p: Pressure) -> str:
    b = p.budget
    return (
        f"(level {p.level}) (tokens {p.tokens}) (figure {p.kind}) (notice {b.notice}) "
        f"(warning {b.warning}) (critical {b.critical}) (hard {b.hard})"
    )


def _environment(opts: EncodeOptions) -> tuple[str, ...]:
    bindings = "".join(f" ({k} {quote(value_text(v))})" for k, v in sorted(opts.bindings.items()))
    return (
        f"(model {quote(opts.model)})",
        f"(local-time {quote(opts.local_time)})",
        f"(bindings{bindings})",
    )


def compile_encoding(r: ReadTxn, opts: EncodeOptions | None = None) -> Encoding:
    """Compile the encoding of the context open in ``r``."""
    opts = checked(opts or EncodeOptions())
    state, scheduling = _shown(read_state(r), opts)
    settings = r.active.settings()  # one read: the budget and the view
    budget = budget_over(
        opts.budget or Budget.stored(settings.get("budget"), r.row.context_id), opts.budget_keys
    )
    view = opts.view_over(stored_view(settings, r.row.context_id))
    cited = r.active.cited_by([f"@e{o.seq}" for o in state.observations])
    running = r.activations(running_only=True)
    window = r.active.session_window(
        opts.session,
        horizon(view, opts.now or opts.local_time, r.active.last_active),
        view.session_count,
    )
    sessions = plan_sessions(window, state.observations, running, opts.session, view)
    inbox = [render.observation(o, view.preview_threshold) for o in state.observations]
    frames = tuple(render.frame(f, state.clock) for f in state.frames)
    items = {
        "observation-state": tuple(
            line
            for o in state.observations
            if (line := render.observation_state(o, cited.get(f"@e{o.seq}", 0)))
        ),
        "session-directory": sessions.lines(),
        "evaluation-environment": _environment(opts),
    }
    mind = [
        *frames,
        render.relations(state.relations),
        render.names("checkpoints", state.checkpoints),
    ]
    parts: list[tuple[str, str]] = [
        ("protocol", PROTOCOL),
        (
            "evaluation-profile",
            f"(evaluation-profile {quote(opts.profile)})"
            if opts.profile
            else "(evaluation-profile none)",
        ),
        ("inbox", render.region("inbox", inbox)),
        ("observation-state", render.region("observation-state", items["observation-state"])),
        ("mind", render.region("mind", mind)),
        ("session-directory", render.region("session-directory", items["session-directory"])),
    ]
    tail: list[tuple[str, str]] = []
    if opts.capabilities:
        tail.append(("cognitive-capabilities", _capabilities(opts.capabilities)))
    environment = render.region("evaluation-environment", items["evaluation-environment"])
    tail.extend([("evaluation-environment", environment), ("evaluate", "(evaluate)")])
    # every region is counted once: the kernel twice, before and after its pressure figures
    sizes = {name: part_tokens(text, opts.counter) for name, text in (*parts, *tail)}
    draft = _kernel(r, opts, running, "", scheduling)
    draft_tokens = part_tokens(render.region("kernel", draft), opts.counter)
    extra = sum(part_tokens(p, opts.counter) for p in opts.extra_parts)
    # the figures' own text is counted (and calibrated) like the rest, as the slack for it
    raw = sum(sizes.values()) + draft_tokens + extra + PRESSURE_SLACK
    measured = figure(raw, opts.calibration, opts.counter)
    level = pressure(measured.tokens + opts.framing, measured.kind, budget)
    items["kernel"] = _kernel(r, opts, running, pressure_figures(level), scheduling)
    parts.append(("kernel", render.region("kernel", items["kernel"])))
    sizes["kernel"] = part_tokens(parts[-1][1], opts.counter)
    parts.extend(tail)
    text, regions = _assemble(parts, sizes, opts)
    lengths = tuple(len(item) for item in inbox)
    return Encoding(text, regions, level, state, sessions, opts, lengths, items, frames, view)


def _shown(state: ActiveState, opts: EncodeOptions) -> tuple[ActiveState, Mapping[str, Any]]:
    """The state the encoding shows and the kernel's scheduling facts. A maintenance batch
    (``only_observations``) shows only those of its observations still active in this
    snapshot, and its scheduling states how many it shows of the active ones it read (the
    ``batch`` fact, the protocol's capacity entry): counted here, from the snapshot the request
    shows, since another process may retire or add observations between the runtime's
    compiles."""
    keep = opts.only_observations
    if keep is None:
        return state, opts.scheduling
    shown = tuple(o for o in state.observations if o.seq in keep)
    total, count = len(state.observations), len(shown)
    batch = f"{count} of {total} shown, {total - count} left out"
    state = ActiveState(
        state.version, state.clock, shown, state.frames, state.relations, state.checkpoints
    )
    return state, {**opts.scheduling, "batch": batch}


def _capabilities(text: str) -> str:
    """The cognitive-capabilities region: ``text``'s S-expressions, printed canonically."""
    try:
        forms = read(text)
    except ParseError as exc:
        raise InputError(f"capabilities must be S-expressions: {exc.message}") from exc
    if any(nesting(f) > MAX_DEPTH - 2 for f in forms):  # shown 2 lists deep in the encoding
        raise InputError(f"capabilities must not nest lists deeper than {MAX_DEPTH - 2} levels")
    return "(cognitive-capabilities" + "".join(f" {to_text(f)}" for f in forms) + ")"


def _utf8(text: str, region: str) -> bytes:
    """``text`` as UTF-8; text that is not valid Unicode can only come from the options (the
    store refuses it), so the error names them."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise not_unicode(exc, f"the encoding options (in the {region} region)") from exc


def _assemble(
    parts: list[tuple[str, str]], sizes: Mapping[str, int], opts: EncodeOptions
) -> tuple[str, tuple[Region, ...]]:
    """The encoding's text (the regions in the order given) and where each region lies, with
    its tokens (``sizes``: :func:`part_tokens` of each) as the whole request's figure is
    (exact, calibrated or estimated)."""
    pieces: list[str] = ["(context-encoding\n"]
    regions: list[Region] = []
    offset = len(pieces[0])
    for index, (name, text) in enumerate(parts):
        size = len(_utf8(text, name))
        tokens = figure(sizes[name], opts.calibration, opts.counter).tokens
        regions.append(Region(name, offset, offset + size, tokens))
        separator = "\n" if index < len(parts) - 1 else ")\n"
        pieces.extend((text, separator))
        offset += size + len(separator)
    return "".join(pieces), tuple(regions)
