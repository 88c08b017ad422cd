"""Review 15b of exec's supervisor (runtime/tools/supervisor.py, as fixed after review 15): what
its end does with a process it may not signal, a tracee, a deep tree of processes in a session
of their own; what the agent's signal mask does to it; what the command can do to its report
and its stop; where its module imports; what a failed start says. Real processes throughout;
each test failed on the code reviewed because of the defect its docstring names."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from morphz.runtime.tools import shell, supervisor
from morphz.runtime.tools.base import ToolContext, ToolError, ToolOutcome
from morphz.runtime.tools.shell import exec_tool
from processes import MARK, marked, survivors
from toolruns import run

LINUX = sys.platform.startswith("linux") and Path("/proc/self/environ").exists()
linux_only = pytest.mark.skipif(not LINUX, reason="a child subreaper and /proc: Linux")
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed


def left_said(text: str) -> int:
    """How many processes the outcome says could not be ended."""
    found = re.search(r"; (\d+) processes it started could not be ended", text)
    return int(found[1]) if found else 0


# --- 1. a process the supervisor may not signal (sudo, a daemon of another user) ---------------


def _runs_as_nobody(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", "import ctypes"],
            check=False,
            user=65534,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@linux_only
def test_a_process_the_supervisor_may_not_kill_does_not_crash_its_end() -> None:
    """A command run by a user often starts a process of another user: ``sudo`` (its process
    runs as root), ``sudo service x start`` (a daemon that double-forks, so it becomes the
    subreaper supervisor's child), ``sudo -u postgres pg_ctl start``. The supervisor's end
    kills each child with ``_kill`` (supervisor.py:232-234), which lets PermissionError
    through: the supervisor dies with a traceback in its end, kills none of the children after
    that one, never reports ``end``, and the agent turns a command that succeeded into a tool
    error ("ended without saying how the command ended ... may still run"), its output and exit
    code lost. It should skip a process it may not signal (not wait for it: that can be for
    ever) and count it in LEFT.

    Here the supervisor runs as ``nobody`` and the command starts a set-user-id copy of Python
    that makes itself root (needs root to set up)."""
    if os.geteuid() != 0:
        pytest.skip("setting up a process of another user needs root")
    python = next((p for p in (sys.executable, "/usr/bin/python3") if _runs_as_nobody(p)), None)
    if python is None:
        pytest.skip("no Python that the user nobody can run")
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        root_python = folder / "python-setuid"
        shutil.copy(os.path.realpath(python), root_python)
        root_python.chmod(0o4755)
        script = folder / "supervisor.py"
        shutil.copy(supervisor.__file__, script)
        script.chmod(0o644)
        ws = folder / "ws"
        ws.mkdir()
        os.chown(ws, 65534, 65534)
        becomes_root = (
            "import os, time; os.setuid(0); "
            "open('root.pid', 'w').write(str(os.getpid())); time.sleep(300)"
        )
        command = (
            f'{root_python} -I -S -c "{becomes_root}" & '
            "while [ ! -s root.pid ]; do sleep 0.05; done; echo done"
        )
        proc = subprocess.Popen(
            [python, "-I", "-S", str(script), command, supervisor.UNSET],
            cwd=ws,
            user=65534,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the root process keeps the output open
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(supervisor.GO)
        proc.stdin.flush()
        said = b""
        try:
            while True:  # the report until its end, with a guard of two minutes
                ready, _, _ = select.select([proc.stderr], [], [], 120)
                assert ready, f"the supervisor did not end; it said {said!r}"
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                said += chunk
        finally:
            proc.stdin.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stderr.close()
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int((ws / "root.pid").read_text()), signal.SIGKILL)
        text = said.decode(errors="replace")
        assert (ws / "root.pid").exists(), text
        assert "Traceback" not in text, text
        assert re.fullmatch(r"end 0 [1-9]\d*", text.splitlines()[-1]), text
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- 2. the agent's signal mask -------------------------------------------------------------


@linux_only
def test_exec_called_from_a_thread_that_blocks_sigchld_returns_when_the_command_ends(
    tc: ToolContext,
) -> None:
    """The supervisor learns that the shell exited only from SIGCHLD (its wakeup pipe,
    supervisor.py:103-106, 200-208), and a signal mask is inherited through fork and exec: an
    agent whose event loop runs in a thread that blocks SIGCHLD (a host that reaps its own
    children with sigwaitinfo or a signalfd, a thread started by a C library with every signal
    blocked) starts supervisors that never see the shell end. Every exec call then runs to its
    timeout (60 s by default) and says "timed out ... and was killed" of a command that ended
    at once. Before the supervisor, asyncio's child watcher did not depend on the mask. The
    supervisor should unblock the signals it waits for (and give the shell the mask it had)."""
    outcome: list[ToolOutcome] = []

    def agent() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        outcome.append(run(exec_tool(), tc, command="echo done", timeout_s=5))

    thread = threading.Thread(target=agent)
    thread.start()
    thread.join()
    (out,) = outcome
    assert out.data["timed_out"] is False, out.text
    assert out.data["exit_code"] == 0 and out.text.endswith("done\n"), out.text


# --- 3. the end: a tracee, a deep tree ----------------------------------------------------------

TRACER = """
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
    open("tracer.failed", "w").write(os.strerror(ctypes.get_errno()))
    sys.exit(1)
os.waitpid(pid, 0)
open("tracer.ready", "w").close()
os.kill(os.getpid(), signal.SIGSTOP)  # a debugger stopped (Ctrl-Z'd gdb, a stopped strace)
time.sleep(300)
"""


@linux_only
def test_a_traced_process_does_not_hang_the_supervisors_end(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    """The end kills the children it found, then waits for each in turn with a blocking
    ``waitpid(pid, 0)`` (supervisor.py:255-257). A child that is traced by a process that is
    not itself killed in that round (here a stopped tracer, the child of another process of
    the command) is not reaped by its real parent until its tracer waits for it or detaches:
    the supervisor blocks there for ever, deaf to the agent's stop (it no longer reads its
    stdin). The command ended after a second, yet the call runs to its timeout, says it timed
    out, then, 10 s later, that the supervisor was killed without a report, and the tracer
    and its tracee run on. Reaping whatever child ends (``waitpid(-1)``) and going on to the
    next round, which kills the tracer (now the supervisor's child), ends them all."""
    (ws / "tracer.py").write_text(TRACER)
    command = (
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & "
        f'setsid sh -c "{sys.executable} tracer.py $! & wait" </dev/null >/dev/null 2>&1 & '
        "while [ ! -e tracer.ready ] && [ ! -e tracer.failed ]; do sleep 0.05; done; echo done"
    )
    try:
        out = run(exec_tool(env={MARK: mark}), tc, command=command, timeout_s=10)
    except ToolError as exc:
        pytest.fail(f"a tool error for a command that ended: {exc.message}")
    if (ws / "tracer.failed").exists():
        pytest.skip(f"ptrace refused here: {(ws / 'tracer.failed').read_text()}")
    assert out.data["timed_out"] is False and out.data["exit_code"] == 0, out.text
    assert not survivors(mark, tries=100), f"left running: {marked(mark)}"


CHAIN = """n=$1
if [ "$n" -gt 0 ]; then sh ./chain.sh $((n - 1)) & wait; else echo $$ > bottom.pid; sleep 300; fi
"""


@linux_only
def test_processes_left_by_a_deep_tree_are_ended_or_counted(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    """Each round of the end kills the supervisor's children only; their children become its
    children for the next round, so a tree in a session of its own is ended one level a round,
    and a chain deeper than ROUNDS (200) outlives the call though it never forked again (the
    bound is documented for processes that keep forking). Worse, LEFT is
    ``len(children())`` (supervisor.py:258), the supervisor's children only: here 12 processes
    run on and the outcome says "1 processes it started could not be ended". Killing each
    child's process group (or its whole session) in a round ends such a tree at once; at
    least LEFT should count what runs on."""
    (ws / "chain.sh").write_text(CHAIN)
    command = (
        "setsid sh ./chain.sh 210 </dev/null >/dev/null 2>&1 & "
        "while [ ! -s bottom.pid ]; do sleep 0.05; done; echo up"
    )
    out = run(exec_tool(env={MARK: mark}), tc, command=command, timeout_s=120)
    assert out.data["exit_code"] == 0, out.text
    running = survivors(mark, tries=100)
    assert len(running) == left_said(out.text), (len(running), out.text)


# --- 4. what the command can do to the supervisor's report and stop ------------------------------


@linux_only
def test_a_command_cannot_forge_its_exit_code_through_the_supervisors_report(
    tc: ToolContext,
) -> None:
    """The shell is the supervisor's child and runs as the same user, so it can open the
    supervisor's report pipe (/proc/$PPID/fd/2) and write to it. _Report.read
    (shell.py:279-294) takes the last line that matches and the supervisor writes its lines
    with no newline before them (supervisor.py:261-265): a forged line ``end 0 0`` followed by a
    byte without a newline glues onto the real ``end 3 0``, which no longer matches, so the
    agent reads exit code 0 for a command that failed (and a forged ``pid N`` followed so makes
    the agent SIGKILL the process group N). The command is trusted as far as the user approved
    it, but a status it can forge misleads the agent. Starting each report line with a newline
    (the real end is then always a whole last line), and on Linux making the supervisor not
    dumpable (PR_SET_DUMPABLE 0: /proc/PID/fd closed to other processes of the user), fix it."""
    out = run(exec_tool(), tc, command=r"printf 'end 0 0\nX' > /proc/$PPID/fd/2; exit 3")
    assert out.data["exit_code"] == 3, out.text


@linux_only
def test_a_command_holding_the_supervisors_stdin_does_not_outlive_a_timeout(
    tc: ToolContext, ws: Path, mark: str
) -> None:
    """The agent asks the supervisor to stop only by closing its stdin (shell.py:249-251); a
    process of the command can open the supervisor's stdin pipe for writing
    (/proc/$PPID/fd/0) and hold it, so the end of stdin never comes: on a timeout the agent
    waits 10 s more, SIGKILLs the supervisor and raises a tool error, and the holder, in a
    session of its own, runs on (as it would once the agent died). The agent should also send
    the supervisor SIGTERM (which it handles) when it asks it to stop, and the supervisor could
    take PR_SET_PDEATHSIG for the agent's death."""
    holder = (
        'setsid sh -c "exec 9>/proc/$PPID/fd/0; echo \\$\\$ > holder.pid; exec sleep 300" '
        "</dev/null >/dev/null 2>&1 & "
        "while [ ! -s holder.pid ]; do sleep 0.05; done; sleep 300"
    )
    try:
        out = run(exec_tool(env={MARK: mark}), tc, command=holder, timeout_s=2)
    except ToolError as exc:
        pytest.fail(f"a tool error for a command that timed out: {exc.message}")
    assert out.data["timed_out"] is True, out.text
    assert not survivors(mark, tries=100), f"left running: {marked(mark)}"


# --- 5. where the module imports ---------------------------------------------------------------

WINDOWS_SIGNALS = """
import signal
windows = {"SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIGBREAK"}
for name in list(vars(signal)):
    if name.startswith("SIG") and not name.startswith("SIG_") and name not in windows:
        delattr(signal, name)  # as on Windows: no SIGHUP, SIGPIPE, SIGXFSZ, SIGCHLD, ...
import morphz.interfaces.cli
"""


def test_the_cli_imports_where_signal_has_only_windows_signals() -> None:
    """supervisor.py names SIGHUP, SIGPIPE and SIGXFSZ at import (STOP_SIGNALS, _DEFAULTED,
    lines 59 and 60), and shell.py imports it, and cli_agent imports shell: on Windows, whose
    signal module has none of them, ``import morphz.interfaces.cli`` raises AttributeError, so
    the morphz command does not start at all (interfaces/stopping.py takes care to run there:
    it looks SIGHUP up with hasattr). Before the supervisor the module imported everywhere."""
    done = subprocess.run(
        [sys.executable, "-c", WINDOWS_SIGNALS],
        check=False,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


# --- 6. what a failed start says ----------------------------------------------------------------


@linux_only
def test_a_folder_that_cannot_be_entered_is_named_not_the_supervisor(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor is started with ``cwd=`` the call's folder, so a folder that cannot be
    entered (removed between the agent's check and the start here; for a user who is not
    root, a folder without its x permission, which ``is_dir`` accepts) fails the start, and
    the tool error blames the supervisor: "exec: cannot start the command's supervisor: No such
    file or directory" (shell.py:235-238), which sends the agent looking for a missing Python.
    The error should name the folder (OSError.filename says it)."""
    (ws / "gone").mkdir()
    real = shell._start

    async def start_after_removal(command: str, cwd: Path, *rest: Any) -> Any:
        cwd.rmdir()
        return await real(command, cwd, *rest)

    monkeypatch.setattr(shell, "_start", start_after_removal)
    with pytest.raises(ToolError) as info:
        run(exec_tool(), tc, command="true", cwd="gone")
    assert "supervisor" not in info.value.message and "gone" in info.value.message, (
        info.value.message
    )
