"""The ``exec`` tool: a shell command run in the workspace, output captured and size-capped.

The command runs through ``/bin/sh`` (``asyncio.create_subprocess_shell``) in its own process
group, with stdin closed and stderr merged into stdout. When the command finishes, or times out,
or the call is cancelled, the whole group is killed: its background jobs do not outlive the call.
A process that leaves the group by starting a session of its own (``setsid``, a daemon's double
fork) is not in it and does outlive the call, and the agent; the tool's description says so
(in as many bytes as it had: the benchmarks' documented schema size stays true).
Output is kept within a cap (head and tail, with a marker for what was left out) while it is
read, so a chatty command never fills memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from morphz.runtime.models.base import ToolSchema
from morphz.runtime.tools.base import (
    ArgumentError,
    Policy,
    Tool,
    ToolContext,
    ToolError,
    ToolOutcome,
)
from morphz.runtime.tools.workspace import params, parse_args, prop, relative, resolve_path

MAX_TIMEOUT_S = 600.0
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT = 16_000
# the provider secrets (docs/cli.md) never reach a command: the keys, and the base URL, which
# may hold credentials (https://user:password@host)
HIDDEN_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")
_DRAIN_S = 2.0  # after the kill, how long the pipes may take to close

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
    """Collects the output; ``exited`` is set when the shell exits, ``closed`` when, in addition,
    every pipe is closed (a background process may hold one open after the shell exits)."""

    def __init__(self, out: CappedOutput) -> None:
        self.out = out
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.out.add(data)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Warden:
    """A small process that ends a command's process group if this process dies while the
    command runs (killed with SIGKILL, by the OOM killer, a crash): it waits on a pipe only this
    process holds open, and kills the group when the pipe reaches its end. It runs in a session
    of its own, so a signal to this process's group (job control, a CI runner) does not take it
    away before it acts. Without it a command killed only from here would outlive the agent."""

    def __init__(self, pgid: int) -> None:
        read, self._write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                ["/bin/sh", "-c", 'read _; kill -9 "-$1" 2>/dev/null', "morphz-warden", str(pgid)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(self._write)
            raise ToolError(
                f"exec: cannot start the command's warden: {exc.strerror or exc}"
            ) from None
        finally:
            os.close(read)

    def dismiss(self) -> None:
        """The command's group was ended here: stop the warden first (so it never signals a
        group number reused later), then close the pipe."""
        self._proc.kill()
        self._proc.wait()
        os.close(self._write)


def _environment(hidden: Iterable[str], extra: Mapping[str, str] | None) -> dict[str, str]:
    drop = set(hidden)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env


def exec_tool(
    policy: Policy = "ask",
    max_output_chars: int = DEFAULT_MAX_OUTPUT,
    hidden_env: Iterable[str] = HIDDEN_ENV,
    env: Mapping[str, str] | None = None,
) -> Tool:
    """The ``exec`` tool. ``hidden_env`` names environment variables removed before the command
    runs (provider keys by default); ``env`` adds or overrides variables."""
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
        loop = asyncio.get_running_loop()
        try:
            transport, capture = await loop.subprocess_shell(
                lambda: _Capture(out),
                command,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=_environment(hidden, env),
            )
        except OSError as exc:
            raise ToolError(f"exec: cannot start the shell: {exc.strerror or exc}") from None
        timed_out = False
        warden: _Warden | None = None
        try:
            warden = _Warden(transport.get_pid())
            await asyncio.wait_for(capture.exited.wait(), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            # the shell leads its own process group: end the group (background jobs included),
            # wait for the exit, give the pipes a moment to drain, then close them
            _kill_group(transport.get_pid())
            if warden is not None:
                warden.dismiss()
            await capture.exited.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(capture.closed.wait(), _DRAIN_S)
            transport.close()
        return _outcome(
            command,
            relative(tc, cwd),
            transport.get_returncode(),
            timed_out=timed_out,
            timeout=timeout,
            out=out,
        )

    return Tool(
        ToolSchema(
            "exec",
            "Run a shell command in the workspace (stdout and stderr together, capped at "
            f"{max_output_chars} characters keeping head and tail). Background jobs die when it "
            "ends or times out; setsid ones survive.",
            _EXEC,
        ),
        run,
        policy,
        check=_check,
    )


def _check(args: dict[str, Any]) -> dict[str, Any]:
    """exec's arguments parsed, or ArgumentError: against the schema, and a command a shell
    can run (not blank, no NUL character)."""
    a = parse_args("exec", args, _EXEC)
    if not a["command"].strip():
        raise ArgumentError("exec: command must not be blank")
    if "\x00" in a["command"]:
        raise ArgumentError(
            "exec: command must not contain a NUL character (a shell cannot run it)"
        )
    return a


def _outcome(
    command: str, cwd: str, code: int | None, *, timed_out: bool, timeout: float, out: CappedOutput
) -> ToolOutcome:
    output, truncated = out.text()
    if timed_out:
        status = f"timed out after {timeout:g} s and was killed (partial output below)"
    elif code is not None and code < 0:
        status = f"killed by signal {-code}"
    else:
        status = f"exit code {code}"
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


def shell_tools() -> list[Tool]:
    return [exec_tool()]
