"""The ``exec`` tool: a shell command run in the workspace, output captured and size-capped.

The command runs through ``/bin/sh`` under a small supervisor process (:mod:`.supervisor`, a
standard-library script run with ``python -I -S``), with stdin closed and stderr merged into
stdout. When the command finishes, or times out, or the call is cancelled, the supervisor kills
the shell's process group and, on Linux, where it is a child subreaper, every other process the
command started, those in a session of their own (``setsid``, a daemon's double fork) too: none
outlives the call. It does the same when the agent's process dies (the end of a pipe only the
agent holds open). On macOS only the group is killed: a process in a session of its own
outlives the call, as the tool's description there says (in as many bytes as on Linux: the
benchmarks' documented schema size stays true). So it does on a Linux where the supervisor
cannot be a subreaper (a Python without ctypes), and there each outcome says so, since the
description says otherwise. The supervisor starts the command only once this process holds its
pipes and tells it to (:data:`.supervisor.GO`): a call cancelled while the supervisor starts
runs nothing.
Output is kept within a cap (head and tail, with a marker for what was left out) while it is
read, so a chatty command never fills memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.resources
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morphz.runtime.models.base import ToolSchema
from morphz.runtime.tools import supervisor
from morphz.runtime.tools.base import (
    ArgumentError,
    Policy,
    Tool,
    ToolContext,
    ToolError,
    ToolOutcome,
)
from morphz.runtime.tools.secrets import HIDDEN_ENV, without_secrets
from morphz.runtime.tools.workspace import params, parse_args, prop, relative, resolve_path

MAX_TIMEOUT_S = 600.0
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT = 16_000
# the provider secrets (docs/cli.md) never reach a command: the keys, and the base URL, which
# may hold credentials (https://user:password@host); exec and chat also blank them in the
# initial environment block /proc/PID/environ shows and make the process not dumpable
# (runtime/secrets_env.py); os.environ keeps them for the host
_DRAIN_S = 2.0  # after the kill, how long the pipes may take to close
_STOP_S = 10.0  # how long the supervisor may take to end the command once asked to
_REPORT_CHARS = 4000  # what is kept of the supervisor's stderr (a traceback's end)
# the longest command: Linux takes no single argument of 32 pages (MAX_ARG_STRLEN) or more
MAX_COMMAND_BYTES = 131_072
# the kill reaches processes in sessions of their own only where the supervisor is a subreaper;
# both sentences are as long, in bytes, as the one the benchmarks' schema sizes were measured with
WHAT_DIES_LINUX = "Background jobs die when it ends or times out, setsid ones as well."
WHAT_DIES_ELSEWHERE = "Background jobs die when it ends or times out; setsid ones survive."
_WHAT_DIES = WHAT_DIES_LINUX if sys.platform.startswith("linux") else WHAT_DIES_ELSEWHERE

_EXEC = params(
    ["command"],
    command=prop("string", "Shell command, run by /bin/sh.", minLength=1),
    timeout_s=prop(
        "number",
        "Seconds before the command is killed.",
        exclusiveMinimum=0,
        maximum=MAX_TIMEOUT_S,
        default=DEFAULT_TIMEOUT_S,
    ),
    cwd=prop("string", "Directory to run in, relative to the workspace.", default="."),
)


class CappedOutput:
    """Bytes read from a pipe, keeping at most ``limit`` characters: the head and the tail."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head_bytes = 4 * (limit - limit // 2)  # room for multi-byte characters
        self.tail_bytes = 4 * (limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_bytes - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_bytes:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_bytes)]

    def text(self) -> tuple[str, bool]:
        """The captured text and whether anything was left out."""
        keep_tail = self.limit // 2
        if self.total == len(self.head) + len(self.tail):  # nothing dropped: one buffer
            data = bytes(self.head + self.tail)
            whole = data.decode("utf-8", "replace")
            if len(whole) <= self.limit:
                return whole, False
            # cut the text with each undecodable byte kept as itself, so the bytes kept (and
            # the count of those omitted) are exact; shown with U+FFFD for each such byte
            head = tail = data.decode("utf-8", "surrogateescape")
        else:
            head = self.head.decode("utf-8", "surrogateescape")
            tail = self.tail.decode("utf-8", "surrogateescape")
        kept = (head[: self.limit - keep_tail], tail[len(tail) - keep_tail :] if keep_tail else "")
        raw = [part.encode("utf-8", "surrogateescape") for part in kept]
        omitted = self.total - sum(len(part) for part in raw)
        shown = [part.decode("utf-8", "replace") for part in raw]
        return f"{shown[0]}\n[... {omitted} bytes of output omitted ...]\n{shown[1]}", True


class _Capture(asyncio.SubprocessProtocol):
    """Collects the output (the supervisor's stdout) and the supervisor's report (its stderr);
    ``exited`` is set when the supervisor exits, ``closed`` when, in addition, every pipe is
    closed (a process the kill did not reach may hold the output open)."""

    def __init__(self, out: CappedOutput) -> None:
        self.out = out
        self.report = bytearray()
        self.reported = asyncio.Event()  # the report's pipe is closed: it is all here
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.out.add(data)
            return
        self.report += data
        del self.report[: max(0, len(self.report) - 4 * _REPORT_CHARS)]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2:
            self.reported.set()

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def exec_tool(
    policy: Policy = "ask",
    max_output_chars: int = DEFAULT_MAX_OUTPUT,
    hidden_env: Iterable[str] = HIDDEN_ENV,
    env: Mapping[str, str] | None = None,
    end_all: bool = True,
) -> Tool:
    """The ``exec`` tool. ``hidden_env`` names environment variables removed before the command
    runs (provider keys by default); ``env`` adds or overrides variables. ``end_all`` False
    (``exec_ends = "group"``): only the command's process group is ended, so a process that
    starts a session of its own (a server the agent means to keep) runs on."""
    if max_output_chars < 2:
        raise ValueError("max_output_chars must be at least 2")
    hidden = tuple(hidden_env)

    async def run(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
        a = _check(args)
        command, timeout = a["command"], float(a["timeout_s"])
        cwd = resolve_path(tc, a["cwd"])
        if not cwd.is_dir():
            raise ToolError(f"cwd {a['cwd']!r} is not a directory; use list_files to find one")
        out = CappedOutput(max_output_chars)
        transport, capture = await _start(command, cwd, without_secrets(env, hidden), out, end_all)
        timed_out = False
        try:
            await asyncio.wait_for(capture.exited.wait(), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            await _stop(transport, capture)
        said = _Report.read(capture.report)
        code, left = said.ending(transport.get_returncode())
        return _outcome(
            command,
            relative(tc, cwd),
            code,
            timed_out=timed_out,
            timeout=timeout,
            out=out,
            left=left,
            no_subreaper=said.no_subreaper,
        )

    return Tool(
        ToolSchema(
            "exec",
            "Run a shell command in the workspace (stdout and stderr together, capped at "
            f"{max_output_chars} characters keeping head and tail). "
            + (_WHAT_DIES if end_all else WHAT_DIES_ELSEWHERE),
            _EXEC,
        ),
        run,
        policy,
        check=_check,
    )


@functools.cache
def _supervisor_program() -> tuple[str, ...]:
    """How the interpreter is given the supervisor: its file where it is one, else its source
    (``-c``): morphz imported from a zip (a zipapp, a zip on PYTHONPATH) has no file to run."""
    path = supervisor.__file__
    if path is not None and Path(path).is_file():
        return (path,)
    source = importlib.resources.files("morphz.runtime.tools") / "supervisor.py"
    return ("-c", source.read_text(encoding="utf-8"))


async def _start(
    command: str, cwd: Path, env: dict[str, str], out: CappedOutput, end_all: bool
) -> tuple[asyncio.SubprocessTransport, _Capture]:
    """The supervisor running the command, in a session of its own (a signal to this process's
    group does not reach it); its stdin is the pipe whose end tells it to stop. It is told to
    start the command only here, once asyncio has connected its pipes: a cancellation while it
    starts makes asyncio kill it, and then no command has run."""
    if not sys.executable:
        raise ToolError("exec: no Python interpreter to run the command's supervisor")
    lc_ctype = supervisor.UNSET if "LC_CTYPE" not in env else "=" + env["LC_CTYPE"]
    ends = "all" if end_all else supervisor.GROUP_ONLY
    loop = asyncio.get_running_loop()
    try:
        transport, capture = await loop.subprocess_exec(
            lambda: _Capture(out),
            *(sys.executable, "-I", "-S", *_supervisor_program(), command, lc_ctype, ends),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except OSError as exc:
        if exc.filename is not None and os.fsdecode(exc.filename) == str(cwd):
            raise ToolError(
                f"exec: cannot run a command in the folder {str(cwd)!r}: "
                f"{exc.strerror or exc}; check it with list_files, or choose another cwd"
            ) from None
        raise ToolError(
            f"exec: cannot start the command's supervisor: {exc.strerror or exc}"
        ) from None
    stdin = transport.get_pipe_transport(0)
    assert isinstance(stdin, asyncio.WriteTransport)  # stdin=PIPE
    stdin.write(supervisor.GO)  # no await since the transport came: no cancellation between
    return transport, capture


async def _stop(transport: asyncio.SubprocessTransport, capture: _Capture) -> None:
    """Ask the supervisor to end the command (close its stdin, and, once the command runs,
    SIGTERM: a process of the command may hold its stdin open; nothing if it has ended), wait
    for it (killed if it takes too long) and its report; if it ended without one, kill the
    command's group from here. Then give the output a moment to drain, and close the pipes."""
    stdin = transport.get_pipe_transport(0)
    if stdin is not None:
        stdin.close()
    # before the pid is said, its handlers may not be set yet: SIGTERM would kill it
    if not capture.exited.is_set() and _Report.read(capture.report).pid is not None:
        with contextlib.suppress(ProcessLookupError):
            transport.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(capture.exited.wait(), _STOP_S)
    except TimeoutError:
        transport.kill()
        await capture.exited.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(capture.reported.wait(), _DRAIN_S)
    report = _Report.read(capture.report)
    if report.end is None and report.pid is not None:
        _kill_group(report.pid)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(capture.closed.wait(), _DRAIN_S)
    transport.close()


@dataclass
class _Report:
    """What the supervisor said (its stderr): on Linux, why it is no subreaper if it is not;
    the shell's pid, then how it ended (its return code, and the processes left), or why it
    could not start; ``lines``, all of it."""

    lines: list[str]
    no_subreaper: str | None = None  # why the supervisor is no subreaper, on Linux
    pid: int | None = None
    end: tuple[int, int] | None = None
    error: str | None = None

    @classmethod
    def read(cls, report: bytes | bytearray) -> _Report:
        """The report read. Each line the supervisor writes starts with a newline, so a line a
        command wrote there (it can open the pipe, /proc/PID/fd/2) cannot swallow the real
        one; its ``pid`` comes first, its ``end`` last, and ``end`` outweighs ``error``."""
        said = cls([line for line in report.decode("utf-8", "replace").splitlines() if line])
        for line in said.lines:
            if (pid := re.fullmatch(r"pid (\d+)", line)) is not None:
                said.pid = int(pid[1]) if said.pid is None else said.pid
            elif (end := re.fullmatch(r"end (-?\d+) (\d+)", line)) is not None:
                said.end = int(end[1]), int(end[2])
            elif line.startswith("no-subreaper "):
                said.no_subreaper = line.removeprefix("no-subreaper ")
            elif line.startswith("error "):
                said.error = line.removeprefix("error ")
        return said

    def ending(self, supervisor_code: int | None) -> tuple[int, int]:
        """The shell's return code and the count of processes left; ToolError if the shell did
        not start, or the supervisor ended without saying how it ended."""
        if self.end is not None:
            return self.end
        if self.error is not None:
            raise ToolError(f"exec: cannot start the shell: {self.error}")
        said = "\n".join(self.lines)[-_REPORT_CHARS:] or "nothing"
        if self.pid is None:
            what = "the command may not have started"
        else:
            what = (
                "the command's process group was killed, but processes it started in sessions "
                "of their own may still run: check with ps before running it again"
            )
        raise ToolError(
            f"exec: the command's supervisor ended (return code {supervisor_code}) without "
            f"saying how the command ended; it said: {said}. So {what}"
        )


def _check(args: dict[str, Any]) -> dict[str, Any]:
    """exec's arguments parsed, or ArgumentError: against the schema, and a command a shell
    can run (not blank, no NUL character, not too long for one argument)."""
    a = parse_args("exec", args, _EXEC)
    if not a["command"].strip():
        raise ArgumentError("exec: command must not be blank")
    if "\x00" in a["command"]:
        raise ArgumentError(
            "exec: command must not contain a NUL character (a shell cannot run it)"
        )
    if len(a["command"].encode("utf-8", "surrogatepass")) >= MAX_COMMAND_BYTES:
        raise ArgumentError(
            f"exec: command must be shorter than {MAX_COMMAND_BYTES:,} bytes (the system's "
            "limit for one argument); write it to a script file with write_file and run that"
        )
    return a


def _outcome(
    command: str,
    cwd: str,
    code: int | None,
    *,
    timed_out: bool,
    timeout: float,
    out: CappedOutput,
    left: int = 0,
    no_subreaper: str | None = None,
) -> ToolOutcome:
    output, truncated = out.text()
    if timed_out:
        status = f"timed out after {timeout:g} s and was killed (partial output below)"
    elif code is not None and code < 0:
        status = f"killed by signal {-code}"
    else:
        status = f"exit code {code}"
    if left:  # processes that kept forking faster than they were killed
        status += f"; {left} processes it started could not be ended"
    if no_subreaper is not None:  # on Linux, where the description says setsid ones die too
        status += f"; setsid processes it started are not ended here ({no_subreaper})"
    text = f"$ {command}\n[{status}]\n{output}"
    data = {
        "command": command,
        "cwd": cwd,
        "exit_code": None if timed_out else code,
        "timed_out": timed_out,
        "output_truncated": truncated,
        "output_bytes": out.total,
    }
    return ToolOutcome(text, error=timed_out, data=data)


def shell_tools(end_all: bool = True) -> list[Tool]:
    return [exec_tool(end_all=end_all)]
