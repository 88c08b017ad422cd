"""Output the command line could not write: standard output on a full disk (``> log`` with no
room, ``/dev/full``) or failing with an I/O error after the command did its work.

:func:`morphz.interfaces.output.out` raises :class:`OutputNotWritten` (a broken pipe, the reader
having stopped, stays click's: exit status 1, silent). The root group gives it the command
that was running, and it tells, on standard error and without a traceback, that the output is
lost and whether that command changed the store (so a script does not run it again), with exit
status :data:`EXIT_STATUS`, distinct from 1 ("refused; the store is unchanged"). A refusal
whose JSON could not be written goes to standard error as text, with exit status 1.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

from morphz.interfaces import advice

EXIT_STATUS = 3
SHOWN = ("events", "show")  # the commands that show what a command left in the store
# Commands that never change the store ("context budget" and "context view" change it when
# given options, so they are not here; an unknown command is taken to have changed it).
READ_ONLY = frozenset(
    {
        "context list",
        "context status",
        "context show",
        "context audit",
        "context events",
        "context encoding",
        "context requests",
        "context recall search",
        "context recall read",
        "context recall frame",
        "context recall-index inspect",
    }
)


# Commands whose output runs alongside their work, which the failure stops wherever it was:
# what is kept of it ({events}: the command that shows the command's context's events)
STOPPED = {
    "chat": "what its turns recorded before is kept (`{events}` shows it)",
    "demo": "with --keep, its store holds what it had recorded by then; without, no store remains",
}


class OutputNotWritten(click.ClickException):
    """Standard output refused what a command printed (``reason``: the system's words)."""

    exit_code = EXIT_STATUS

    def __init__(self, cause: OSError) -> None:
        self.cause = cause
        self.reason = cause.strerror or str(cause)
        self.command = _running_command()
        self.where = advice.running().arguments()
        super().__init__(self._said())
        _quiet_stdout()

    def _said(self) -> str:
        command = f"`morphz {self.command}`" if self.command else "the command"
        events, show = (shlex.join(["morphz", "context", name, *self.where]) for name in SHOWN)
        if self.command in STOPPED:
            kept = STOPPED[self.command].format(events=events)
            return f"{command} stopped: its output could not be written: {self.reason}; {kept}"
        if self.command in READ_ONLY:
            return (
                f"the output of {command} could not be written: {self.reason}; it changes "
                "nothing, so run it again once its output can be written"
            )
        return (
            f"{command} did its work and what it changed in the store is kept, but its output "
            f"could not be written: {self.reason}; do not run it again for the output: "
            f"`{events}` and `{show}` show the store as it is now"
        )

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error (output): {self.message}", err=True)


class RefusalNotWritten(OutputNotWritten):
    """Standard output refused a refusal's JSON: the store is unchanged (exit status 1)."""

    exit_code = 1

    def _said(self) -> str:
        return (
            f"the refusal above could not be written to standard output: {self.reason}; "
            "the store is unchanged"
        )


def help_not_written(cause: OSError) -> int:
    """Say that what click printed itself (--help, --version, a usage text) could not be
    written, with nothing run; the exit status to end with."""
    reason = cause.strerror or str(cause)
    click.echo(
        f"error (output): the help or version text could not be written: {reason}; nothing "
        "was run or changed",
        err=True,
    )
    _quiet_stdout()
    return EXIT_STATUS


@contextmanager
def reporting_a_refusal(text: str) -> Iterator[None]:
    """Print a refusal in the block; when standard output cannot take it, ``text`` (the
    refusal for a person) goes to standard error and the failure says the store is unchanged."""
    try:
        yield
    except OutputNotWritten as exc:
        click.echo(text, err=True)
        raise RefusalNotWritten(exc.cause) from None


def _running_command() -> str:
    """The running command's path after ``morphz`` (e.g. ``context observe``); "" outside one."""
    names: list[str] = []
    ctx = click.get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


class _Quiet:
    """Standard output after it failed: what is still buffered is dropped, so the interpreter's
    last flush does not report the same failure again."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _quiet_stdout() -> None:
    if not isinstance(sys.stdout, _Quiet):
        sys.stdout = _Quiet(sys.stdout)
