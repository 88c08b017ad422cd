"""exec's supervisor (runtime/tools/supervisor.py): every process a command starts ends with the
call, those in a session of their own (``setsid``, a daemon's double fork) too, whether the
command ends, times out or is cancelled, and when the agent's process dies; the shell's exit
code and the signal that killed it are reported as before. Real processes throughout: each test
marks its command's environment and looks in /proc for a live process still carrying the mark.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import morphz
from morphz.runtime.tools import supervisor
from morphz.runtime.tools.base import ArgumentError, Tool, ToolContext, ToolError
from morphz.runtime.tools.shell import (
    MAX_COMMAND_BYTES,
    WHAT_DIES_ELSEWHERE,
    WHAT_DIES_LINUX,
    CappedOutput,
    _outcome,
    _Report,
    exec_tool,
)
from processes import MARK, alive, marked, survivors
from toolruns import run

LINUX = sys.platform.startswith("linux") and Path("/proc/self/environ").exists()
linux_only = pytest.mark.skipif(not LINUX, reason="a child subreaper and /proc: Linux")
SRC = Path(__file__).resolve().parents[1] / "src"

# a process in a session of its own, and a daemon (fork, setsid, fork, the middle one exits):
# each writes its pid to a file once it runs
SETSID = "setsid sh -c 'echo $$ > setsid.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &"
DAEMON = "sh -c 'setsid sh -c \"sleep 300 & echo \\$! > daemon.pid\" &' </dev/null >/dev/null 2>&1;"
READY = "while [ ! -s setsid.pid ] || [ ! -s daemon.pid ]; do sleep 0.01; done"
ESCAPES = f"{SETSID} {DAEMON} {READY}"


@pytest.fixture
def tc(ctx: morphz.Context, ws: Path) -> ToolContext:
    return ToolContext(ctx, "session-1", "activation-1", ws)


def marked_exec(mark: str) -> Tool:
    return exec_tool(env={MARK: mark})


def started(ws: Path) -> list[int]:
    return [int((ws / name).read_text()) for name in ("setsid.pid", "daemon.pid")]


# --- the call ends them all -----------------------------------------------------------------


@linux_only
def test_a_setsid_process_and_a_daemon_end_with_the_command(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    out = run(marked_exec(mark), tc, command=f"{ESCAPES}; echo done")
    assert out.data["exit_code"] == 0 and out.text.endswith("done\n"), out.text
    pids = started(ws)
    assert not survivors(mark), f"left running after the call: {marked(mark)} (started {pids})"
    assert not any(alive(pid) for pid in pids)


@linux_only
def test_a_setsid_process_and_a_daemon_end_when_the_command_times_out(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    out = run(marked_exec(mark), tc, command=f"{ESCAPES}; echo ready; sleep 300", timeout_s=5)
    assert out.data["timed_out"] is True and out.data["exit_code"] is None, out.text
    assert out.text.endswith("ready\n"), "the escapes had started before the timeout"
    assert not survivors(mark), f"left running after the timeout: {marked(mark)}"


@linux_only
def test_a_setsid_process_and_a_daemon_end_when_the_call_is_cancelled(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    async def scenario() -> None:
        command = f"{ESCAPES}; echo ready > ready.txt; sleep 300"
        task = asyncio.create_task(marked_exec(mark).run({"command": command}, tc))
        while not (ws / "ready.txt").exists() and not task.done():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert (ws / "ready.txt").exists() and len(started(ws)) == 2
    assert not survivors(mark), f"left running after the cancellation: {marked(mark)}"


@linux_only
def test_a_process_that_keeps_forking_in_a_session_of_its_own_ends(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    """A forker's children, made while it is killed, become the supervisor's and die in the
    next round."""
    forker = "setsid sh -c 'echo $$ > forker.pid; while :; do sleep 300 & sleep 0.01; done' &"
    wait = "while [ ! -s forker.pid ]; do sleep 0.01; done; sleep 0.2"
    out = run(marked_exec(mark), tc, command=f"{forker} {wait}")
    assert out.data["exit_code"] == 0, out.text
    assert "could not be ended" not in out.text
    assert not survivors(mark), f"left running: {marked(mark)}"


# --- what the outcome says --------------------------------------------------------------------


def test_the_exit_code_and_the_killing_signal_are_reported_as_before(tc: ToolContext) -> None:
    tool = exec_tool()
    three = run(tool, tc, command="echo out; exit 3")
    assert three.text == "$ echo out; exit 3\n[exit code 3]\nout\n"
    assert three.data["exit_code"] == 3 and not three.error
    killed = run(tool, tc, command="echo before; kill -9 $$")
    assert killed.text == "$ echo before; kill -9 $$\n[killed by signal 9]\nbefore\n"
    assert killed.data["exit_code"] == -9 and killed.data["timed_out"] is False
    termed = run(tool, tc, command="kill -TERM $$")
    assert "[killed by signal 15]" in termed.text and termed.data["exit_code"] == -15
    assert run(tool, tc, command="exit 255").data["exit_code"] == 255


def test_processes_left_are_told() -> None:
    out = CappedOutput(100)
    text = _outcome("x", ".", 0, timed_out=False, timeout=1, out=out, left=3).text
    assert text == "$ x\n[exit code 0; 3 processes it started could not be ended]\n"


def test_the_description_says_what_dies_in_as_many_bytes_everywhere() -> None:
    """The benchmarks' documented schema size holds on every platform."""
    assert len(WHAT_DIES_LINUX.encode()) == len(WHAT_DIES_ELSEWHERE.encode())
    assert "setsid ones as well" in WHAT_DIES_LINUX and "survive" in WHAT_DIES_ELSEWHERE
    description = exec_tool().schema.description
    assert description.endswith(WHAT_DIES_LINUX if LINUX else WHAT_DIES_ELSEWHERE)


def test_the_command_gets_the_environment_it_was_given(tc: ToolContext) -> None:
    """Python's start-up in the supervisor sets LC_CTYPE under the C locale (PEP 538); the
    shell sees the variable as the agent gave it, or not at all."""
    hidden = ("LC_ALL", "LC_CTYPE", "LANG")
    command = 'echo "[${LC_CTYPE-unset}]"'
    unset = exec_tool(hidden_env=hidden, env={"LANG": "C"})
    assert run(unset, tc, command=command).text.endswith("[unset]\n")
    given = exec_tool(hidden_env=hidden, env={"LANG": "C", "LC_CTYPE": "C"})
    assert run(given, tc, command=command).text.endswith("[C]\n")


def test_what_the_supervisor_says_is_read_as_the_outcome_or_a_tool_error() -> None:
    assert _Report.read(b"pid 12\nend -9 0\n").ending(0) == (-9, 0)
    with pytest.raises(ToolError, match="cannot start the shell: No such file or directory"):
        _Report.read(b"error No such file or directory\n").ending(0)
    with pytest.raises(ToolError, match="may not have started"):
        _Report.read(b"Traceback (most recent call last):\n").ending(1)


def test_a_forged_report_line_does_not_override_the_supervisors() -> None:
    """Each real line starts with a newline; the first ``pid`` and the last ``end`` count, and
    an ``end`` outweighs an ``error`` (a command can write to the report's pipe as root)."""
    said = _Report.read(b"\npid 12\npid 1\nend 0 0\nerror forged\nX\nend 3 0")
    assert said.pid == 12 and said.ending(0) == (3, 0)


def test_a_command_too_long_for_one_argument_is_refused_before_approval() -> None:
    tool = exec_tool()
    assert tool.check is not None
    tool.check({"command": "x" * (MAX_COMMAND_BYTES - 1)})
    with pytest.raises(ArgumentError, match="write it to a script file"):
        tool.check({"command": "é" * (MAX_COMMAND_BYTES // 2)})


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@linux_only
def test_a_killed_supervisor_is_a_tool_error_and_the_group_is_killed(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    """The supervisor killed (SIGKILL) while the command runs says nothing more; the agent kills
    the command's group and says what may still run."""

    async def scenario() -> None:
        command = "sleep 300 & echo $PPID > supervisor.pid; wait"
        task = asyncio.create_task(marked_exec(mark).run({"command": command}, tc))
        while not (ws / "supervisor.pid").exists() or not (ws / "supervisor.pid").read_text():
            await asyncio.sleep(0.02)
        pid = int((ws / "supervisor.pid").read_text())
        while state(pid) != "S":  # asleep in its wait: it has said the shell's pid
            await asyncio.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ToolError, match=r"supervisor ended \(return code -9\) without") as info:
            await task
        assert "check with ps" in info.value.message, info.value.message

    asyncio.run(scenario())
    assert not survivors(mark), f"left running: {marked(mark)}"


# --- the supervisor on its own: asked to stop, or its agent gone ------------------------------


def start_supervisor(ws: Path, mark: str, command: str) -> subprocess.Popen[bytes]:
    """The supervisor running ``command``: told to start it, as the agent tells it."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", supervisor.__file__, command, supervisor.UNSET],
        cwd=ws,
        env={**os.environ, MARK: mark},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(supervisor.GO)
    proc.stdin.flush()
    return proc


def wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``path`` is written (a guard of two minutes, not a timing)."""
    for _ in range(2400):
        if path.exists() and path.read_text().strip():
            return
        assert proc.poll() is None, f"the supervisor ended: {proc.communicate()[1]!r}"
        time.sleep(0.05)
    raise AssertionError(f"{path.name} was never written")


@linux_only
@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_a_supervisor_asked_to_stop_ends_the_command(ws: Path, mark: str, how: str) -> None:
    proc = start_supervisor(ws, mark, f"{ESCAPES}; echo ready > ready.txt; sleep 300")
    assert proc.stdin is not None and proc.stderr is not None
    try:
        wait_for(ws / "ready.txt", proc)
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.close()
        proc.wait(timeout=120)
        said = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stderr.close()
    lines = said.decode().splitlines()  # each line starts with a newline: the first is empty
    assert lines[0] == "" and lines[1].startswith("pid ") and lines[-1] == "end -9 0", said
    assert not survivors(mark), f"left running: {marked(mark)}"


AGENT = """
import asyncio, sys
from pathlib import Path
from morphz.runtime.tools.base import ToolContext
from morphz.runtime.tools.shell import exec_tool
tc = ToolContext(None, "s", "a", Path(sys.argv[1]))
asyncio.run(exec_tool().run({"command": sys.argv[2], "timeout_s": 600}, tc))
"""


@linux_only
def test_the_command_ends_when_the_agent_is_killed(tmp_path: Path, mark: str) -> None:
    """The agent's process killed with SIGKILL: the supervisor sees its stdin end and ends the
    command, the processes in sessions of their own too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    command = f"{ESCAPES}; echo ready > {fifo}; sleep 300"
    env = {**os.environ, MARK: mark, "PYTHONPATH": str(SRC)}
    reader = os.open(fifo, os.O_RDWR)  # never blocks; the shell's write does not either
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(ws), command], env=env)
    try:
        ready, _, _ = select.select([reader], [], [], 120)  # a guard, not a timing
        assert ready, "the command never started"
        agent.kill()
        agent.wait()
        assert not survivors(mark), f"left running after the agent died: {marked(mark)}"
    finally:
        os.close(reader)
        if agent.poll() is None:
            agent.kill()
            agent.wait()


# --- the agent's word to start, a shell that cannot start, no subreaper -----------------------


def test_a_supervisor_whose_stdin_ends_before_the_word_to_start_runs_nothing(ws: Path) -> None:
    """A call cancelled while the supervisor starts: asyncio closes its pipes (and kills it)
    before the agent said go; the command never runs, and nothing is reported."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", supervisor.__file__, "echo ran > ran.txt", supervisor.UNSET],
        cwd=ws,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _, said = proc.communicate(b"", timeout=120)  # stdin closed at once
    assert proc.returncode == 0 and said == b""
    assert not (ws / "ran.txt").exists()


STARTS = """
import sys
sys.path.insert(0, sys.argv[1])
import supervisor
try:
    supervisor.start(b"true", {b"BIG": b"x" * 300_000})  # more than one argument may hold
except OSError as exc:
    print(exc)
"""


@linux_only
def test_a_shell_whose_exec_fails_is_an_error_with_the_reason(tmp_path: Path) -> None:
    """The forked child tells the supervisor why its exec failed (a pipe closed by a good exec);
    the supervisor reports it as ``error MESSAGE``."""
    folder = str(Path(supervisor.__file__).parent)
    said = subprocess.run(
        [sys.executable, "-I", "-S", "-c", STARTS, folder],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert said.stdout == f"{os.strerror(errno.E2BIG)}\n", said


def test_a_supervisor_that_cannot_be_a_subreaper_on_linux_is_told_in_the_outcome() -> None:
    """The description says setsid ones die on Linux; where the supervisor cannot be a
    subreaper (no ctypes), each outcome says they do not."""
    said = _Report.read(b"no-subreaper no ctypes: halted\npid 12\nend 0 0\n")
    assert said.no_subreaper == "no ctypes: halted" and said.ending(0) == (0, 0)
    text = _outcome(
        "x", ".", 0, timed_out=False, timeout=1, out=CappedOutput(100), no_subreaper="why"
    ).text
    assert text == "$ x\n[exit code 0; setsid processes it started are not ended here (why)]\n"
