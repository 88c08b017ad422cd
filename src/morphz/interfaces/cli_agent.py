"""The agent commands of the ``morphz`` command line: ``exec`` (one activation) and ``chat``
(interactive). Configuration: ``~/.morphz/morphz.toml`` and ``./morphz.toml``; secrets only from
the environment (see :mod:`morphz.runtime.config`). Reference: docs/cli.md.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import os
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

import morphz
from morphz import DEFAULT_CONTEXT
from morphz.capacity import CONFIG_NAMES, Budget, budget_over
from morphz.checks import check_id, check_new_context_id, check_stored_id, check_text
from morphz.database import store_path
from morphz.ids import ref_seq
from morphz.interfaces import advice, chat_commands, render, stopping, tables
from morphz.interfaces.approval_text import denied_note, shown_call
from morphz.interfaces.cli import (
    db_option,
    format_option,
    main,
    open_store,
    report_error,
)
from morphz.interfaces.output import emit, out
from morphz.owners import current_owner
from morphz.runtime.agent_tools import agent_tools
from morphz.runtime.config import Settings, config_paths, load, make_model, read_profile
from morphz.runtime.engine import ActivationResult, Engine, RuntimeConfig
from morphz.runtime.models.base import Model
from morphz.runtime.secrets_env import withhold
from morphz.runtime.tools.base import ApprovalEnded, Tool, ToolRegistry
from morphz.runtime.tools.shell import shell_tools
from morphz.runtime.tools.workspace import workspace_tools
from morphz.txlang.sexpr import unicode_problem

FOLLOW_INTERVAL = 0.1  # seconds between looks at the events a running chat turn recorded
T = TypeVar("T")


def build_tools(settings: Settings) -> ToolRegistry:
    """context_tx and recall, the workspace tools and exec, with the configured policies."""
    registry = ToolRegistry()
    for tool in [*agent_tools(), *workspace_tools(), *shell_tools(end_all=settings.exec_ends_all)]:
        registry.add(tool)
    tools = registry.authority()
    for name, policy in settings.policies.items():
        if name not in tools:
            known = ", ".join(sorted(tools))
            raise morphz.InputError(f"[policies] {name}: there is no such tool; the tools: {known}")
        registry.set_policy(name, policy)
    return registry


@dataclass(frozen=True, slots=True)
class Agent:
    """What exec and chat make before they open the store, so that a command refused for its
    configuration, model, profile or tools creates nothing (docs/cli.md: exit 1 leaves the
    store unchanged)."""

    model: Model
    tools: ToolRegistry
    config: RuntimeConfig
    settings: Settings  # where each policy came from: what exec's note of denied calls names

    def engine(self, ctx: morphz.Context) -> Engine:
        """The engine for ``ctx``; refused at once when the configured [budget] keys make no
        budget over ``ctx``'s own."""
        engine = Engine(ctx, self.model, self.tools, self.config)
        engine.budget()
        return engine

    def _over(self, stored: Budget) -> Budget:
        """The configured [budget] keys over ``stored`` (refused naming them as the file does)."""
        return budget_over(self.config.budget or stored, self.config.budget_keys, CONFIG_NAMES)

    def check_new_store(self, db_path: str, context_id: str) -> None:
        """When no store exists at ``db_path`` yet, refuse before creating one the [budget]
        keys that make no budget over a new context's, and an id a new context may not have."""
        if not store_path(db_path).exists():
            check_new_context_id(context_id)
            self._over(Budget())

    def open_context(self, db: morphz.Database, context_id: str) -> morphz.Context:
        """CTX, created when missing unless the configured [budget] keys make no budget over
        the one it would have, after marking interrupted the activations that a process on
        this host left running when it died (said on stderr, so JSON output stays clean)."""
        if context_id not in db.contexts():
            self._over(Budget())
            ctx = db.context(context_id, create=True)
        else:  # refused before anything is written, orphans' ends included
            ctx = db.context(context_id)
            self._over(ctx.budget())
        marked = ctx.interrupt_orphaned()
        if marked:
            click.echo(
                f"morphz: marked {len(marked)} orphaned activation(s) of {context_id} "
                "interrupted: " + ", ".join(marked),
                err=True,
            )
        return ctx


def prepare(
    db_path: str,
    model_spec: str | None,
    workspace: Path,
    *,
    interactive: bool,
    profile_path: Path | None,
) -> Agent:
    """The settings, the profile, the tools and then the model (the one with a client to close)
    of an exec or chat run; nothing is opened or created."""
    if unicode_problem(str(workspace)) is not None:  # bound in every request: it must be text
        shown = os.fsencode(workspace).decode("utf-8", "backslashreplace")
        raise morphz.InputError(
            f"--workspace {shown} is not valid UTF-8: the workspace folder is named to the model "
            "in every request, as text; give a folder whose path is UTF-8"
        )
    settings = load(Path.home(), Path.cwd(), os.environ)
    # --profile replaces the configured profile, which is then not read at all
    profile = read_profile(profile_path) if profile_path is not None else settings.profile_text()
    # the bound profile and the configured one (a later run without --profile reads it again)
    profiles = [p.resolve() for p in (profile_path, settings.profile_path) if p is not None]
    spec = _model_spec(model_spec, settings)
    tools = build_tools(settings)
    model = make_model(spec, settings, os.environ)
    store = store_path(db_path).resolve()
    configs = config_paths(Path.home(), Path.cwd())
    protected = (store, *configs, *settings.files, *profiles)

    config = RuntimeConfig(
        workspace=workspace.resolve(),
        step_limit=settings.step_limit,
        protected_paths=protected,
        budget_keys=settings.budget,
        approver=functools.partial(_ask, workspace=workspace.resolve()) if interactive else None,
        ask_default=settings.ask_default,
        delta=settings.delta_for(spec),
        delta_messages=settings.delta_messages_for(spec),
        exact_tokens=settings.exact_tokens,
        profile=profile,
    )
    return Agent(model, tools, config, settings)


async def _ask(tool: Tool, args: dict[str, Any], workspace: Path | None = None) -> bool:
    """A person's approval of ``tool`` called with ``args``: shown whole, however long, so that
    they approve exactly what runs (:mod:`.approval_text`: long blank runs counted, a path that
    a symlink leads elsewhere in ``workspace`` with where it resolves to). The answer is read in
    a daemon thread, not the loop's executor: after Ctrl-C the loop's shutdown does not wait for
    a line that never comes."""
    shown = shown_call(args, workspace)
    show_new = _SHOW_NEW.get()
    if show_new is not None:  # what led to the question comes before it
        await show_new()
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bool] = loop.create_future()

    def settle(result: bool | None, error: BaseException | None) -> None:
        if answer.done():  # cancelled meanwhile
            return
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(bool(result))

    def read() -> None:
        error: BaseException | None
        try:
            result, error = click.confirm(f"allow {tool.name}({shown})?", False), None
        except click.Abort:  # the end of input: the turn ends, stopped by the person
            said = f"input ended at the approval prompt for {tool.name}: the person stopped it"
            result, error = None, ApprovalEnded(said)
        except BaseException as exc:
            result, error = None, exc
        with suppress(RuntimeError):  # the loop closed while the person was answering
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=read, name="morphz-approval", daemon=True).start()
    return await answer


def _model_spec(given: str | None, settings: Settings) -> str:
    spec = given or settings.model
    if spec is None:
        raise morphz.InputError(
            "no model is configured: give --model SPEC (e.g. --model openai:gpt-4o-mini) or set "
            'model = "openai:gpt-4o-mini" in morphz.toml (./morphz.toml or ~/.morphz/morphz.toml)'
        )
    return spec


async def close_model(model: Model) -> None:
    """Close ``model``'s client (an SDK adapter's pooled connections) in the event loop that
    used it; a model without one has nothing to close."""
    aclose = getattr(model, "aclose", None)
    if aclose is not None:
        await aclose()


async def _closing(model: Model, work: Awaitable[T]) -> T:
    """``work``, then ``model`` closed, in the same event loop."""
    try:
        return await work
    finally:
        await close_model(model)


def _split(context_and_prompt: tuple[str, ...]) -> tuple[str, str]:
    if len(context_and_prompt) == 1:
        return DEFAULT_CONTEXT, context_and_prompt[0]
    if len(context_and_prompt) == 2:
        return context_and_prompt[0], context_and_prompt[1]
    raise click.UsageError("give [CTX] PROMPT (quote a prompt of several words)")


F = TypeVar("F", bound=Callable[..., Any])


def agent_options(f: F) -> F:
    """--model, --session, --profile and --workspace, shared by exec and chat."""
    f = click.option(
        "--workspace",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=Path("."),
        show_default=True,
        help="The folder the file and exec tools work in (it must exist).",
    )(f)
    f = click.option(
        "--profile",
        "profile_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A file with the agent's harness definition (default: the configuration's).",
    )(f)
    f = click.option("--session", default="default", show_default=True, metavar="ID")(f)
    return click.option(
        "--model",
        "model_spec",
        metavar="SPEC",
        help="openai:NAME, anthropic:NAME or scripted:PATH (default: the configuration's model).",
    )(f)


@main.command("exec")
@click.argument("context_and_prompt", nargs=-1, required=True, metavar="[CTX] PROMPT")
@agent_options
@db_option
@format_option
def exec_command(
    *,
    context_and_prompt: tuple[str, ...],
    model_spec: str | None,
    session: str,
    profile_path: Path | None,
    workspace: Path,
    db_path: str,
    fmt: str,
) -> None:
    """Run one activation on CTX for PROMPT, non-interactively, and print the reply.

    Tools whose policy is "ask" follow the configuration's ask_default (deny unless set).
    JSON gives the activation and every event it produced."""
    context_id, prompt = _split(context_and_prompt)
    check_stored_id(context_id, "context id")  # before anything is created (a new one: more)
    check_id(session, "session id")
    if not check_text(prompt, "PROMPT").strip():  # not a paid request on an empty message
        raise morphz.InputError("PROMPT is empty: give the request for the agent")
    agent = prepare(db_path, model_spec, workspace, interactive=False, profile_path=profile_path)
    agent.check_new_store(db_path, context_id)
    withhold()  # the secrets blanked in /proc/PID/environ, not dumpable (docs/cli.md)
    with open_store(db_path, create=True) as db, stopping.stopped_like_ctrl_c():
        ctx = agent.open_context(db, context_id)
        engine = agent.engine(ctx)
        with _said_if_left_running(ctx):
            result = asyncio.run(_closing(engine.model, engine.run(prompt, session=session)))
        _note_merged_turns(engine, said=False)
        produced = _produced(ctx, result)
    events = [e.to_dict() for e in produced]
    emit(fmt, {**result.to_dict(), "event_records": events}, lambda: _reply_text(result))
    user = config_paths(Path.home(), Path.cwd())[0]
    if (denied := denied_note(produced, agent.settings.policy_sources, user)) is not None:
        click.echo(denied, err=True)
    if result.state != "delivered":
        raise click.exceptions.Exit(1)


def _produced(ctx: morphz.Context, result: ActivationResult) -> list[morphz.Event]:
    """Every event ``result``'s activation produced, in order: what its steps recorded (its
    request, replies, results, receipts), its start and finish records, and the commits its
    receipts name. Another activation's events, even in the same session, are not among them."""
    seqs = {ref_seq(ref) for ref in result.events}
    for seq in sorted(seqs):
        event = ctx.event(f"@e{seq}")
        if event.kind == "tx_receipt" and (event.text or "").startswith('{"ok":true'):
            committed = json.loads(event.text or "").get("event")  # the commit it is for
            if isinstance(committed, str) and committed.startswith("@e"):
                seqs.add(ref_seq(committed))
    (row,) = [a for a in ctx.activations() if a.activation_id == result.activation]
    seqs |= {row.started_seq} | ({row.finished_seq} if row.finished_seq else set())
    return [ctx.event(f"@e{seq}") for seq in sorted(seqs)]


def _note_merged_turns(engine: Engine, said: bool) -> bool:
    """Unless ``said`` already, say on stderr that the server refused ContextDelta increments as
    messages of their own, so the adapter sends each request's encoding as one message from now
    on (see openai_compat); returns whether it was said."""
    model = engine.model
    if getattr(model, "turns_merged", False) and not said:
        click.echo(
            f"morphz: {model.name} refused two user messages in a row, so ContextDelta "
            "increments go in one message with the encoding from now on; set "
            f'delta_messages = false in [models."{model.name}"] to skip the refused first try',
            err=True,
        )
        return True
    return said


@contextmanager
def _said_if_left_running(ctx: morphz.Context) -> Iterator[None]:
    """When an interrupt stops the block (Ctrl-C, SIGTERM, SIGHUP), say which activations of
    this process on ``ctx`` are still marked running: their interruption could not be recorded
    (another process held the store, and the wait ran out or a second Ctrl-C gave it up)."""
    try:
        yield
    except KeyboardInterrupt:
        for line in _left_running(ctx):
            click.echo(f"morphz: {line}", err=True)
        raise


def _left_running(ctx: morphz.Context) -> list[str]:
    me = current_owner()
    try:
        left = [a.activation_id for a in ctx.activations(True) if a.owner == me]
    except morphz.MorphzError as exc:  # the interrupt is what to report, with this
        return [f"could not check what the interrupt left running: {exc}"]
    return [  # the command advised names this command's store (advice.on_this_store)
        advice.on_this_store(
            f"activation {activation} could not be recorded as interrupted (another process "
            f"held the store), so it is still marked running: `morphz context recover "
            f"{shlex.quote(ctx.id)}` marks it, as the next exec or chat on it does"
        )
        for activation in left
    ]


def _reply_text(result: ActivationResult) -> str:
    if result.state == "delivered":
        if result.reason:  # delivered, with a caveat (the output limit cut the reply)
            click.echo(f"morphz: {result.reason}", err=True)
        return result.reply or ""
    # the reason may quote a provider's error body (remote text): its controls are shown; the
    # commands it advises name this command's store
    reason = advice.on_this_store(result.reason or "")
    return tables.visible(f"activation {result.state}: {reason}")


@main.command("chat")
@click.argument("context_id", metavar="[CTX]", required=False, default=DEFAULT_CONTEXT)
@agent_options
@db_option
def chat_command(
    *,
    context_id: str,
    model_spec: str | None,
    session: str,
    profile_path: Path | None,
    workspace: Path,
    db_path: str,
) -> None:
    """Talk to the agent of CTX. Commands: /status, /mind, /encoding, /requests, /recall QUERY,
    /quit.

    Tool calls, approvals and commits are shown as they happen; "ask" tools ask you."""
    check_stored_id(context_id, "context id")  # at once, before anything is created
    check_id(session, "session id")
    agent = prepare(db_path, model_spec, workspace, interactive=True, profile_path=profile_path)
    agent.check_new_store(db_path, context_id)
    _lenient_stdio()
    withhold()  # the secrets blanked in /proc/PID/environ, not dumpable (docs/cli.md)
    # one event loop for the whole chat: the model's client keeps its connections in it
    with (
        open_store(db_path, create=True) as db,
        stopping.stopped_like_ctrl_c(),
        _terminal_kept(),
        asyncio.Runner() as runner,
    ):
        engine = agent.engine(agent.open_context(db, context_id))
        out(
            f"morphz chat: context {context_id}, session {session}, model "
            f"{engine.model.name}; /quit to leave"
        )
        try:
            with _said_if_left_running(engine.ctx):
                _converse(runner, engine, session)
        finally:
            runner.run(close_model(engine.model))


@contextmanager
def _terminal_kept() -> Iterator[None]:
    """The terminal's modes as they were when the chat started, set back however it ends: an
    approval prompt is read in a thread (under readline, which turns echo and line editing off
    while it waits), and a Ctrl-C there leaves that thread behind with the modes still off."""
    try:
        import termios
    except ImportError:  # no POSIX terminal: nothing to keep
        yield
        return
    saved = termios.tcgetattr(sys.stdin) if _at_a_terminal() else None
    try:
        yield
    finally:
        if saved is not None:
            with suppress(termios.error, OSError):  # the terminal is gone: nothing to restore
                termios.tcsetattr(sys.stdin, termios.TCSADRAIN, saved)


def _converse(runner: asyncio.Runner, engine: Engine, session: str) -> None:
    """Read lines until /quit or the end of input; each runs a turn or a command. A refused
    command or a turn refused for its input (e.g. a line that is not UTF-8) is said and the
    chat goes on; any other MorphzError of a turn ends the chat (docs/decisions.md)."""
    said = False  # the note on merged ContextDelta turns
    while (line := _read_line()) is not None:
        if not line.strip():
            continue
        if line.strip().startswith("//"):  # a line that begins with / itself, for the agent
            line = line.strip()[1:]
        elif line.strip().startswith("/"):
            try:
                if not chat_commands.run(engine, session, line.strip()):
                    break
            except morphz.MorphzError as exc:  # a refused command: say so, keep the chat
                report_error(exc, "text")
            continue
        try:
            turn = _follow(engine.ctx, session, engine.run(line, session=session))
            result = runner.run(turn)
        except ApprovalEnded:  # input ended at an approval prompt: the turn was interrupted
            break
        except morphz.InputError as exc:  # the line was refused: say so, keep the chat
            report_error(exc, "text")
            continue
        said = _note_merged_turns(engine, said)
        out(f"agent> {_reply_text(result)}")


def _read_line() -> str | None:
    """The next line typed, or None at the end of input (or Ctrl-C). A line that is not UTF-8
    is refused (said through the one error mapping) and the next one is read. SIGTERM or SIGHUP
    at the prompt is no end of input: click's Abort goes on, and the process ends by it."""
    if sys.stdin is None:  # started with standard input closed (<&-): no line will come
        return None
    while True:
        try:
            line: str = click.prompt("you", prompt_suffix="> ", default="", show_default=False)
            line.encode("utf-8")  # bad bytes come in as lone surrogates (_lenient_stdio)
            return line
        except click.Abort:
            click.echo()  # end the prompt's line, so the shell's prompt starts on its own
            if stopping.terminated():  # SIGTERM, SIGHUP: the chat ends by it, not as at /quit
                raise
            return None
        except UnicodeError as exc:  # encoding it, or reading from a stream left strict
            at = f" at character {exc.start + 1}" if isinstance(exc, UnicodeEncodeError) else ""
            said = f"the line is not valid UTF-8{at}: check the terminal's encoding, type it again"
            report_error(morphz.InputError(said), "text")


def _lenient_stdio() -> None:
    """Read standard input with bad bytes kept as lone surrogates, and write them back as the
    bytes they were, as Python does under a C locale: a line that is not UTF-8 is then refused
    alone (_read_line), not a UnicodeDecodeError that also loses what was typed after it, and
    an echo of it (click's test runner) cannot fail. For the rest of the process (chat is the
    last to read); a stream that cannot change is left as it is. At a terminal, lines are read
    through readline when it is installed: editing and history, and no 4,095-byte cut."""
    for stream in (sys.stdin, sys.stdout):  # (None when the process was started without it)
        if isinstance(stream, io.TextIOWrapper):
            with suppress(io.UnsupportedOperation):  # decoded text already waiting in a buffer
                stream.reconfigure(errors="surrogateescape")
    if _at_a_terminal():  # line editing, and lines longer than the terminal's 4,095 bytes
        with suppress(ImportError):  # (input() reads through readline once it is imported)
            import readline  # noqa: F401


def _at_a_terminal() -> bool:
    """Whether standard input is a terminal (it may be closed: ``sys.stdin`` None)."""
    return sys.stdin is not None and sys.stdin.isatty()


# What the turn being followed shows before a question is asked: _ask prints the activity
# recorded so far (the call, its approval request) before its prompt, not after it
_SHOW_NEW: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("show_new", default=None)


async def _follow(
    ctx: morphz.Context, session: str, activation: Coroutine[Any, Any, ActivationResult]
) -> ActivationResult:
    """Run ``activation`` while printing (to stderr) the events it records as they land: tool
    calls, results, commits and refusals, approvals."""
    seen = await asyncio.to_thread(lambda: ctx.status().last_seq)
    lock = asyncio.Lock()  # the poll and an approval prompt print each event once, in order

    async def show_new() -> None:
        nonlocal seen
        async with lock:
            for event in await asyncio.to_thread(ctx.events, after=seen):
                seen = event.seq
                if _worth_showing(event, session):
                    click.echo(render.activity_line(event), err=True)

    token = _SHOW_NEW.set(show_new)
    try:
        task = asyncio.ensure_future(activation)  # the task sees show_new (its context's copy)
    finally:
        _SHOW_NEW.reset(token)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=FOLLOW_INTERVAL)
            await show_new()
    except BaseException:  # cancelled (Ctrl-C) or the events could not be read: end the turn
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    return task.result()


def _worth_showing(event: morphz.Event, session: str) -> bool:
    """Everything but the user's own message, the reply (printed as ``agent>``), and this
    session's commit events (their receipts say it); other sessions' commits are shown."""
    if event.kind in ("user_message", "agent_reply"):  # the agent_reply: its agent> line
        return False
    if event.kind == "context_tx_committed":
        return event.session_id != session
    return event.kind != "model_reply" or bool((event.payload or {}).get("tool_calls"))
