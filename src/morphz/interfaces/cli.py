"""The ``morphz`` command line: a thin layer that parses input, calls the library and prints.

Every MorphzError is mapped to output in one place, :meth:`MorphzGroup.invoke`: with
``--format=json`` the error object ``{"ok": false, "error": {...}}`` goes to stdout, with
``--format=text`` a readable message goes to stderr; the exit status is 1 either way. Usage
errors stay click's (exit status 2). A command that Ctrl-C, SIGTERM or SIGHUP stopped ends the
process by that signal, in :func:`run` (the ``morphz`` script, ``python -m morphz``); called
in-process, :data:`main` raises SystemExit as any click program does. The reference is
docs/cli.md.
"""

from __future__ import annotations

import codecs
import copy
import errno
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, TypeVar

import click

import morphz
from morphz import DEFAULT_CONTEXT, DEFAULT_SESSION, DEFAULT_WINDOW, OBSERVATION_KINDS
from morphz import demo as demo_module
from morphz.checks import check_new_context_id, check_window
from morphz.interfaces import advice, arguments, listing, render, stopping, tables, unwritten
from morphz.interfaces.output import as_json, emit, out
from morphz.owners import host_name, owner_alive, still_runs, untold_reason
from morphz.store.base import ActivationRow

DB_ENV = "MORPHZ_DB"
BUSY_ENV = "MORPHZ_BUSY_TIMEOUT"
BUSY_KEY = "morphz.busy_timeout"
BUSY_USAGE = f"--busy-timeout SECONDS (or {BUSY_ENV})"
DEFAULT_DB = "~/.morphz/morphz.db"
FORMAT_KEY = "morphz.format"
FORMATS = ("json", "text")

F = TypeVar("F", bound=Callable[..., Any])


class MorphzGroup(arguments.CheckedGroup):
    """The root group; the one place where a MorphzError becomes output and exit status 1, and
    where a command stopped by a signal is noted (:mod:`morphz.interfaces.stopping`)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; each run starts with no signal noted as having stopped it
        (acting on one is :func:`run`'s, the process's entry point)."""
        stopping.forget()
        try:
            return super().main(*args, **kwargs)
        except OSError as exc:  # click's own output (--help, --version) on a full disk
            if exc.errno == errno.EPIPE:  # the reader stopped: click's handling, as ever
                raise
            raise SystemExit(unwritten.help_not_written(exc)) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except morphz.MorphzError as exc:
            fmt = ctx.meta.get(FORMAT_KEY, "text")
            with unwritten.reporting_a_refusal(render.error(_for_the_command_line(exc))):
                report_error(exc, fmt)
            ctx.exit(1)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP passed to SIGINT's handler
            stopping.interrupted()
            raise


def report_error(exc: morphz.MorphzError, fmt: str) -> None:
    exc = _for_the_command_line(exc)
    if fmt == "json":
        out(as_json({"ok": False, "error": exc.to_dict()}))
    else:
        click.echo(render.error(exc), err=True)


def _for_the_command_line(exc: morphz.MorphzError) -> morphz.MorphzError:
    """``exc`` as a command's user can act on it: a busy store's advice to raise the library's
    ``busy_timeout`` names the option that sets it here, and the commands the message advises
    name the command's store (:func:`advice.on_this_store`)."""
    said = advice.on_this_store(exc.message)
    if isinstance(exc, morphz.StoreBusyError) and exc.WAIT_LONGER in said:
        said = said.replace(exc.WAIT_LONGER, f"wait longer with {BUSY_USAGE}")
    if said == exc.message:
        return exc
    told = copy.copy(exc)  # the same error (type, code, details), its message for here
    told.message, told.args = said, (said,)
    return told


def fail() -> NoReturn:
    """Exit with status 1 after the command printed why (not an error: e.g. a failed audit)."""
    raise click.exceptions.Exit(1)


# ------------------------------------------------------------------ shared options


class InputFile(click.File):
    """click's File, where ``-`` (standard input) is a usage error when the process has none:
    started with it closed (``<&-``, some cron and service setups), ``sys.stdin`` is None."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-" and sys.stdin is None:
            self.fail(
                "- reads standard input, which is closed: give a file, or give the command an "
                "input",
                param,
                ctx,
            )
        return super().convert(value, param, ctx)


def _remember_format(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    ctx.meta[FORMAT_KEY] = value
    return value


def _remember_busy_timeout(
    ctx: click.Context, _param: click.Parameter, value: float | None
) -> None:
    if value is not None and not value >= 0:  # NaN passes FloatRange (comparisons are false)
        raise click.BadParameter(f"{value} is not a number of seconds from 0 on")
    if value is not None:
        ctx.meta[BUSY_KEY] = value


def db_option(f: F) -> F:
    """``--db`` and ``--busy-timeout`` (which :func:`open_store` reads from the click context,
    so a command's own parameters do not carry it)."""
    f = click.option(
        "--busy-timeout",
        type=click.FloatRange(min=0),
        envvar=BUSY_ENV,
        show_envvar=True,
        default=None,
        metavar="SECONDS",
        expose_value=False,
        callback=_remember_busy_timeout,
        help="How long to wait for a store another process is writing before failing with "
        "the error code busy  [default: 30]",
    )(f)
    return click.option(
        "--db",
        "db_path",
        envvar=DB_ENV,
        show_envvar=True,
        default=DEFAULT_DB,
        show_default=True,
        metavar="PATH",
        help="The store: a SQLite file path or file: URI (context create, exec and chat create "
        "it when missing).",
    )(f)


def format_option(f: F) -> F:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        callback=_remember_format,
        help="Output format.",
    )(f)


def context_argument(f: F) -> F:
    return click.argument("context_id", metavar="[CTX]", required=False, default=DEFAULT_CONTEXT)(f)


def session_option(f: F) -> F:
    return click.option(
        "--session",
        default=DEFAULT_SESSION,
        show_default=True,
        metavar="ID",
        help="The session the event belongs to (created on first use).",
    )(f)


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def terminal_progress(label: str, unit: str) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` that redraws one line on stderr, when stderr is a terminal;
    None otherwise (so pipes, files and JSON consumers see no progress)."""
    if not stderr_is_terminal():
        return None
    finished = False

    def show(done: int, total: int) -> None:
        nonlocal finished
        if finished:  # the library may report the end more than once
            return
        finished = done >= total
        click.echo(f"\r{label}: {done:,}/{total:,} {unit}", err=True, nl=finished)

    return show


def open_store(db_path: str, *, create: bool = False) -> morphz.Database:
    """The store at ``db_path``; when it is from an older release whose recall indexes are
    rebuilt as it opens, that shows on a terminal."""
    shown: dict[str, Callable[[int, int], None] | None] = {}

    def progress(context_id: str, done: int, total: int) -> None:
        if context_id not in shown:
            shown[context_id] = terminal_progress(f"recall index of {context_id}", "events")
        if (show := shown[context_id]) is not None:
            show(done, total)

    command = click.get_current_context(silent=True)
    busy_timeout = None if command is None else command.meta.get(BUSY_KEY)
    if busy_timeout is None:  # the library's default
        return morphz.open(db_path, create=create, progress=progress)
    return morphz.open(db_path, create=create, progress=progress, busy_timeout=busy_timeout)


@contextmanager
def open_context(db_path: str, context_id: str) -> Iterator[morphz.Context]:
    with open_store(db_path) as db:
        yield db.context(context_id)


# ------------------------------------------------------------------ commands


@click.group(cls=MorphzGroup)
@click.version_option(morphz.__version__, prog_name="morphz")
def main() -> None:
    """Morphz: contexts that LLM agents edit through context transactions."""


def run() -> NoReturn:
    """The process's entry point (the ``morphz`` script, ``python -m morphz``): :data:`main`
    on the command line's arguments; a command that Ctrl-C, SIGTERM or SIGHUP stopped prints
    "Aborted!" after its cleanup and then ends the process by that signal, as Python ends on an
    uncaught KeyboardInterrupt. Only here, at the process's top level: a host that calls
    :data:`main` itself gets the SystemExit and goes on."""
    try:
        main.main()
    except SystemExit as exc:
        signum = stopping.stopped_by()
        if signum is not None and exc.code not in (0, None):
            stopping.end_by(signum)
        raise
    raise SystemExit(0)  # (click's standalone mode always exits; this is for the type)


@main.group("context")
def context_group() -> None:
    """Inspect, change and audit contexts (no model needed).

    CTX, where a command takes it, is a context name; it defaults to context-default."""


@context_group.command("create")
@context_argument
@click.option(
    "--window",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help=f"Organizing window in clock ticks  [default: {DEFAULT_WINDOW}]",
)
@db_option
@format_option
def create_command(*, context_id: str, window: int | None, db_path: str, fmt: str) -> None:
    """Create context CTX (default: context-default)."""
    check_new_context_id(context_id)  # before the store is created: a refusal leaves none
    if window is not None:
        check_window(window)
    with open_store(db_path, create=True) as db:
        status = db.create_context(context_id, window=window).status(local_time=db.local_time())
    emit(
        fmt, status.to_dict(), lambda: f"created context {status.context}\n" + render.status(status)
    )


@context_group.command("list")
@db_option
@format_option
def list_command(*, db_path: str, fmt: str) -> None:
    """List the contexts of the store (one whose status cannot be read, with why)."""
    with open_store(db_path) as db:
        listed = listing.contexts(db)
    emit(fmt, listing.contexts_json(listed), lambda: listing.contexts_text(listed))


def _parse_meta(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        meta = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from exc
    except (ValueError, RecursionError) as exc:  # a huge integer, nesting too deep
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise click.BadParameter(f"not usable JSON: {what}") from exc
    if not isinstance(meta, dict):
        raise click.BadParameter('must be a JSON object, e.g. {"source": "ci"}')
    return meta


@context_group.command("observe")
@context_argument
@click.option("--kind", required=True, type=click.Choice(sorted(OBSERVATION_KINDS)))
@click.option("--text", required=True, help="The observation's text.")
@click.option("--time", "time", metavar="ISO8601", help="When it happened (with a UTC offset).")
@click.option("--meta", callback=_parse_meta, metavar="JSON", help="A JSON object kept with it.")
@session_option
@db_option
@format_option
def observe_command(
    *,
    context_id: str,
    kind: str,
    text: str,
    time: str | None,
    meta: dict[str, Any] | None,
    session: str,
    db_path: str,
    fmt: str,
) -> None:
    """Append an observation to CTX; prints the event.

    The event's ref (@eN) is how transactions cite it."""
    with open_context(db_path, context_id) as ctx:
        event = ctx.observe(kind, text, time=time, meta=meta, session=session)
    emit(fmt, event.to_dict(), lambda: render.event_line(event))


def _read_tx_text(tx_file: BinaryIO) -> str:
    """The text of the transaction file as written: UTF-8, its line ends kept (a text-mode
    read would turn "\\r\\n" and "\\r" in its strings into "\\n"); a byte-order mark at its
    start is not part of the text. Bytes that are not UTF-8 are a usage error naming the first."""
    data = tx_file.read()
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{tx_file.name} is not valid UTF-8 (byte {skip + exc.start + 1}): save it as UTF-8",
            param_hint="--file",
        ) from exc


@context_group.command("tx")
@context_argument
@click.option(
    "--file",
    "tx_file",
    required=True,
    type=InputFile("rb"),  # bytes: _read_tx_text decodes them, every \r kept
    metavar="F",
    help="File holding the (context-tx ...) text; - reads stdin.",
)
@session_option
@db_option
@format_option
def tx_command(*, context_id: str, tx_file: BinaryIO, session: str, db_path: str, fmt: str) -> None:
    """Commit a context transaction to CTX.

    Prints the receipt; a refused transaction prints the error, exits with status 1 and leaves
    the store unchanged. The `budget` refusal measures as exec would: with the configuration's
    [budget] keys over CTX's budget, and its model's calibration."""
    text = _read_tx_text(tx_file)
    from morphz.interfaces.cli_encoding import commit_limits
    from morphz.runtime.config import load

    settings = load(Path.home(), Path.cwd(), os.environ)
    with open_context(db_path, context_id) as ctx:  # refused by the budget exec measures with
        receipt = ctx.commit(text, session=session, **commit_limits(settings, ctx))
    emit(fmt, receipt.to_dict(), lambda: render.receipt(receipt))


@context_group.command("status")
@context_argument
@db_option
@format_option
def status_command(*, context_id: str, db_path: str, fmt: str) -> None:
    """Version, clock, counts and head hash of CTX."""
    with open_context(db_path, context_id) as ctx:
        status = ctx.status(local_time=ctx.db.local_time())
    emit(fmt, status.to_dict(), lambda: render.status(status))


@context_group.command("show")
@context_argument
@click.option("--all-observations", is_flag=True, help="Also list retired observations.")
@db_option
@format_option
def show_command(*, context_id: str, all_observations: bool, db_path: str, fmt: str) -> None:
    """Show the mind of CTX.

    Frames in projection order, relations, checkpoints, observation states and sessions."""
    with open_context(db_path, context_id) as ctx:
        mind = ctx.mind(all_observations=all_observations)
    emit(fmt, mind.to_dict(), lambda: render.mind(mind, all_observations=all_observations))


@context_group.command("audit")
@context_argument
@db_option
@format_option
def audit_command(*, context_id: str, db_path: str, fmt: str) -> None:
    """Replay CTX's history and compare it with the stored mind.

    Every event is replayed from genesis through the same pure functions as the live commit;
    exit status 1 when the replay differs from the stored projection."""
    with open_context(db_path, context_id) as ctx:
        report = ctx.audit(progress=terminal_progress("audit", "events replayed"))
    emit(fmt, report.to_dict(), lambda: advice.on_this_store(render.audit(report)))
    if not report.ok:
        fail()


@context_group.command("events")
@context_argument
@click.option(
    "--after",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=0,
    show_default=True,
    metavar="N",
    help="Only events with seq greater than N.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, metavar="N", help="At most N events."
)
@db_option
@format_option
def events_command(
    *, context_id: str, after: int, limit: int | None, db_path: str, fmt: str
) -> None:
    """The event history of CTX, oldest first."""
    with open_context(db_path, context_id) as ctx:  # printed as read (interfaces.listing)
        last = listing.last_seq(ctx)

        def history() -> Iterator[morphz.Event]:
            return listing.history(ctx, after, limit, last)

        if fmt == "json":
            listing.read_through(history())
            lines = listing.json_lines((e.to_dict() for e in history()), as_json)
        else:
            lines = render.event_lines(history)
        for chunk in listing.chunks(lines):
            out(chunk)


@context_group.command("recover")
@context_argument
@click.option(
    "--include-unowned",
    is_flag=True,
    help="Also interrupt running activations with no recorded owner (started by an older "
    "Morphz); only when no process can still be running them.",
)
@click.option(
    "--activation",
    "named",
    metavar="ID",
    multiple=True,
    help="Also mark this running activation interrupted, whatever its owner (one on another "
    "host, say), unless its process is alive on this host, or is of this host and hidden "
    "(/proc hidepid). Repeatable.",
)
@db_option
@format_option
def recover_command(
    *, context_id: str, include_unowned: bool, named: tuple[str, ...], db_path: str, fmt: str
) -> None:
    """Mark interrupted the running activations of CTX whose process died.

    Only activations whose owner process is on this host and provably gone are marked (each
    with an activation_finished event); those of live processes and other hosts stay running,
    unless named with --activation."""
    with open_context(db_path, context_id) as ctx:
        named = tuple(dict.fromkeys(named))
        for activation in named:  # every one checked before anything is written
            _check_named(ctx, activation)
        marked = ctx.interrupt_orphaned(include_unowned=include_unowned)
        for activation in named:
            if activation not in marked:
                ctx.finish_activation(activation, "interrupted", "marked interrupted by hand")
                marked.append(activation)
        running = [_running_entry(a) for a in ctx.activations(running_only=True)]
    data = {"context": context_id, "interrupted": marked, "running": running}
    emit(fmt, data, lambda: _recover_text(marked, running))


def _check_named(ctx: morphz.Context, activation: str) -> None:
    """Refuse (InputError) to mark ``activation`` by hand when it is not running or its owner
    process is alive on this host."""
    found = [a for a in ctx.activations(running_only=True) if a.activation_id == activation]
    if not found:
        raise morphz.InputError(
            f"no running activation {activation!r} in context '{ctx.id}': "
            f"`morphz context recover {ctx.id}` lists the running ones"
        )
    owner = found[0].owner
    if owner is None:
        return
    alive = still_runs(owner, activation)
    if alive:
        raise morphz.InputError(
            f"activation {activation} is run by process {owner.pid}, alive on this host: stop it "
            "first (it records its own end)"
        )
    if alive is None and owner.host == host_name():  # only another host's is the user's call
        raise morphz.InputError(
            f"activation {activation} is run by process {owner.pid} of this host, and whether it "
            f"is alive cannot be told: {untold_reason(owner)}; stop it first (it records its "
            "own end), or run recover as a user who can see it"
        )


def _running_entry(act: ActivationRow) -> dict[str, Any]:
    owner = act.owner
    return {
        "activation": act.activation_id,
        "session": act.session_id,
        "owner": owner.to_dict() if owner else None,
        "alive": owner_alive(owner) if owner else None,
    }


def _recover_text(marked: list[str], running: list[dict[str, Any]]) -> str:
    done = f"interrupted {len(marked)} orphaned activation(s)" if marked else "nothing to recover"
    lines = [done, *(f"  {a}" for a in marked)]
    if not running:
        return "\n".join([*lines, "no activations are running"])
    alive = {True: "yes", False: "no", None: "unknown"}
    rows = [
        (
            r["activation"],
            r["session"],
            f"pid {r['owner']['pid']} on {r['owner']['host']}" if r["owner"] else "not recorded",
            alive[r["alive"]],
        )
        for r in running
    ]
    shown = tables.table(["activation", "session", "owner", "alive"], rows)
    return "\n".join([*lines, "", "still running", shown])


def _fresh_path(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    if value is not None and value.exists():
        raise click.BadParameter(f"{value} already exists: the demo needs a fresh store")
    return value


@main.command(
    "demo", short_help="Run the seed's deployment example as an agent (scripted model, no key)."
)
@click.option(
    "--keep",
    type=click.Path(dir_okay=False, path_type=Path),
    callback=_fresh_path,
    metavar="PATH",
    help="Build the demo store at PATH (a new file) and keep it, instead of a temp folder.",
)
def demo_command(*, keep: Path | None) -> None:
    """Run the seed's deployment example on a fresh store: an agent run by the runtime with a
    scripted model, so it needs no API key and no network."""
    with stopping.stopped_like_ctrl_c():  # SIGTERM, SIGHUP: its temporary folders removed too
        if not demo_module.run(out, keep=keep):
            fail()


from morphz.interfaces import cli_agent, cli_encoding, cli_recall  # noqa: E402, F401  (register commands)
