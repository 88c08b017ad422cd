"""Tools: a schema for the model, an authority policy, and a function that runs a call.

A tool receives its parsed arguments and a :class:`ToolContext` (the context, the session and
activation, the workspace) and returns a :class:`ToolOutcome`: text for the agent and whether it
is an error. Every outcome becomes a ``tool_result`` observation; an exception that is a
:class:`~morphz.errors.MorphzError` becomes an error outcome the agent can read and act on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import math
import re
import threading
from asyncio import Future
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from morphz.checks import MAX_JSON_DEPTH, too_deep
from morphz.errors import InputError, MorphzError
from morphz.runtime.models.base import ToolSchema
from morphz.txlang.sexpr import unicode_problem

if TYPE_CHECKING:
    from morphz.capacity import Budget
    from morphz.contextdb import Context
    from morphz.encoding.tokens import Calibration

Policy = Literal["allow", "ask", "deny"]
POLICIES: tuple[Policy, ...] = ("allow", "ask", "deny")
_P = ParamSpec("_P")
_T = TypeVar("_T")


class ToolError(InputError):
    """A tool call the agent must fix (bad arguments, a stale content hash, a timeout)."""

    code = "tool"


class ApprovalEnded(Exception):
    """The person's input ended at an approval prompt (end of input): the activation stops,
    recorded as interrupted by them, not as an error of the model or of Morphz. Not a
    MorphzError: it is no refusal to report, and it must pass the guards that turn a tool
    call's MorphzErrors into its result."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ArgumentError(ToolError):
    """A call whose arguments break the tool's schema: refused before the tool ran."""


def thread_job(fn: Callable[_P, _T], /, *args: _P.args, **kw: _P.kwargs) -> Future[_T]:
    """``fn`` started in the loop's default executor, with the caller's context variables (as
    asyncio.to_thread does), as the executor's future: done only when the thread has ended. A
    task wrapping it would not do: the event loop's shutdown (asyncio.run closing) cancels every
    task left while its thread still writes."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kw)
    return asyncio.get_running_loop().run_in_executor(None, call)


@dataclass(frozen=True, slots=True)
class ToolContext:
    ctx: Context
    session: str
    activation: str
    workspace: Path
    protected_paths: tuple[Path, ...] = ()
    # the budget the runtime measures requests with (None: the stored one) and the keys set
    # over it: what context_tx's `budget` refusal measures against too
    budget: Budget | None = None
    budget_keys: Mapping[str, int] = field(default_factory=dict)
    calibration: Calibration | None = None  # ... and how it counts them
    # the tokens of the smallest maintenance request (runtime/floor.py), which the refusal counts
    # beside the frames, or what reads them at each commit (the engine's, whose calibration
    # changes with every reply); None: committing's allowance
    request_floor: int | Callable[[], int] | None = None
    # ... and the bound profile's share of it (None: none), or what reads it at each commit,
    # under the same calibration as the floor
    profile_tokens: int | Callable[[], int | None] | None = None
    call: str | None = None  # the id of the tool call being run (context_tx's commit keeps it)
    # the activation's work still running in threads (see in_thread)
    pending: set[asyncio.Future[Any]] = field(default_factory=set)
    # set when a caller of in_thread is cancelled: work that can stop early (a child process
    # of a regex search) stops at once instead of running to its own end
    cancelled: threading.Event = field(default_factory=threading.Event)

    def floor(self) -> int | None:
        """The tokens of the smallest maintenance request now (:attr:`request_floor`)."""
        return self.request_floor() if callable(self.request_floor) else self.request_floor

    def profile(self) -> int | None:
        """The bound profile's share of :meth:`floor` now (:attr:`profile_tokens`)."""
        return self.profile_tokens() if callable(self.profile_tokens) else self.profile_tokens

    async def in_thread(self, fn: Callable[_P, _T], /, *args: _P.args, **kw: _P.kwargs) -> _T:
        """``fn`` in a worker thread, tracked until it ends: a thread goes on when its caller is
        cancelled, so an interrupted activation waits for it (:meth:`settle`) before recording
        its end, and no commit or result lands after that end. The job is the executor's
        future, done only when the thread has ended: not a task, which the event loop's
        shutdown (asyncio.run closing) would cancel while its thread still writes."""
        try:
            return await asyncio.shield(self.start_thread(fn, *args, **kw))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def start_thread(self, fn: Callable[_P, _T], /, *args: _P.args, **kw: _P.kwargs) -> Future[_T]:
        """Start ``fn`` in a worker thread, tracked as :meth:`in_thread` tracks it, and return
        its job (for a caller that must know, after :meth:`settle`, how it ended)."""
        job = thread_job(fn, *args, **kw)
        self.pending.add(job)
        job.add_done_callback(self.pending.discard)
        return job

    async def settle(self, cancelled: Callable[[], object] | None = None) -> None:
        """Wait until the work :meth:`in_thread` started has ended, however often the caller
        is cancelled meanwhile (each time calling ``cancelled``; its results and errors went,
        or go, to their own callers)."""
        while self.pending:
            try:
                await asyncio.shield(asyncio.gather(*self.pending, return_exceptions=True))
            except asyncio.CancelledError:
                if cancelled is not None:
                    cancelled()


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    error: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    delivered: str | None = None  # the ref of an observation the tool already appended
    ran: bool = True  # False: refused before the tool ran (its result does not tick the clock)


def result_json(value: object, *, compact: bool = False) -> str:
    """``value`` as the JSON text of a tool result: characters as written (a frame id, a file
    name in Chinese or Russian is shown as the agent must write it again, recall indexes its
    words, and it counts what it costs), not escaped to ``\\uXXXX``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: what the file system gave undecodable (a file name in
    Latin-1, kept by Python as surrogate escapes) is shown as ``\\xNN``, any other lone
    surrogate as U+FFFD. A tool's output becomes an observation, which must be valid text."""
    if unicode_problem(text) is None:
        return text
    return _SURROGATE.sub(_escaped, text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_arguments(name: str, arguments: str | None) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict, or a ToolError the agent reads: text that is not
    JSON (or nests deeper than the decoder goes, or holds an integer too long to convert), not
    an object, or a value JSON does not allow (NaN, Infinity) or that is not valid Unicode,
    named by its place in the arguments."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"the arguments of {name} are not valid JSON ({exc.msg} at character "
            f"{exc.pos}): send a JSON object matching the tool's schema"
        ) from exc
    except (RecursionError, ValueError) as exc:  # too deep, or an integer too long
        reason = "nest too deep" if isinstance(exc, RecursionError) else str(exc)
        raise ToolError(
            f"the arguments of {name} are not valid JSON for a tool ({reason}): send a JSON "
            "object matching the tool's schema"
        ) from None
    if not isinstance(args, dict):
        raise ToolError(f"the arguments of {name} must be a JSON object")
    if too_deep(args):
        raise ToolError(
            f"the arguments of {name} are not valid JSON for a tool (they nest more than "
            f"{MAX_JSON_DEPTH} lists and objects deep): send a JSON object matching the tool's "
            "schema"
        )
    _check_values(name, args)
    return args


def _check_values(name: str, args: dict[str, Any]) -> None:
    stack: list[tuple[str, Any]] = list(args.items())
    while stack:
        place, value = stack.pop()
        if isinstance(place, str) and unicode_problem(place) is not None:
            raise ToolError(f"{name}: an argument name is not valid Unicode: send valid text")
        if isinstance(value, float) and not math.isfinite(value):
            raise ToolError(
                f"{name}: argument {place!r} must be a finite number, not {value}: JSON has no "
                "NaN or Infinity"
            )
        if isinstance(value, str) and unicode_problem(value) is not None:
            raise ToolError(f"{name}: argument {place!r} is not valid Unicode: send valid text")
        if isinstance(value, dict):
            stack.extend((f"{place}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{place}[{i}]", v) for i, v in enumerate(value))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutcome]]
ArgsCheck = Callable[[dict[str, Any]], object]


@dataclass(frozen=True, slots=True)
class Tool:
    schema: ToolSchema
    run: ToolFn
    policy: Policy = "allow"
    external: bool = True  # withdrawn during maintenance (context_tx and recall are not)
    # raises ArgumentError for arguments the tool can never run with (its schema's check); the
    # engine calls it before asking for approval, so nobody is asked about such a call
    check: ArgsCheck | None = None

    @property
    def name(self) -> str:
        return self.schema.name

    def check_arguments(self, args: dict[str, Any]) -> None:
        """Refuse (ArgumentError) arguments this tool can never run with; a tool without a
        ``check`` refuses them only when it runs. A check that fails otherwise than by a
        MorphzError is a fault of the tool: its call's error (ToolError), as a run's would be."""
        if self.check is None:
            return
        try:
            self.check(args)
        except MorphzError:
            raise
        except Exception as exc:
            said = f"{self.name}'s argument check failed: {type(exc).__name__}: {exc}"
            raise ToolError(f"{said[:4000]} (a fault of the tool)") from exc


class ToolRegistry:
    """The tools of a runtime, by name. Tools can be added from Python with :meth:`add`."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> None:
        if tool.policy not in POLICIES:
            raise InputError(f"tool policy must be one of {POLICIES}, not {tool.policy!r}")
        self._tools[tool.name] = tool

    def set_policy(self, name: str, policy: Policy) -> None:
        tool = self.get(name)
        if policy not in POLICIES:
            raise InputError(f"tool policy must be one of {POLICIES}, not {policy!r}")
        self._tools[name] = replace(tool, policy=policy)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools))
            raise ToolError(f"no tool named {name!r}; the tools are: {known}") from None

    def offered(self, maintenance: bool) -> list[Tool]:
        """The tools on offer (denied ones are never offered; external ones are withdrawn in
        maintenance), in name order."""
        return [
            t
            for t in sorted(self._tools.values(), key=lambda t: t.name)
            if t.policy != "deny" and not (maintenance and t.external)
        ]

    def authority(self, maintenance: bool = False) -> dict[str, str]:
        """Each tool's policy, as the kernel states it; in ``maintenance`` the external tools,
        withdrawn, are not listed."""
        return {
            name: tool.policy
            for name, tool in sorted(self._tools.items())
            if not (maintenance and tool.external)
        }


async def run_guarded(tool: Tool, args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    """``tool`` run; an exception that is no MorphzError is a fault of the tool, its call's
    error result (the other calls of the reply keep theirs). Only the tool's own run is
    guarded: what an approver raises (input ended at the prompt) ends the turn."""
    try:
        return await tool.run(args, tc)
    except MorphzError:
        raise
    except Exception as exc:
        said = f"{tool.name} failed: {type(exc).__name__}: {exc} (a fault of the tool)"
        return ToolOutcome(said[:4000], error=True)


def result_kind(tool: Tool | None) -> str:
    """The observation a call's result is: a context_tx receipt, a recall's result (a failed
    one too; neither ticks the clock), or any other tool's result."""
    if tool is None or tool.external:
        return "tool_result"
    return {"context_tx": "tx_receipt", "recall": "recall_result"}.get(tool.name, "tool_result")
