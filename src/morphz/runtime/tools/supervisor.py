"""The supervisor of one ``exec`` command, run as a script in a child process of the agent
(``python -I -S supervisor.py COMMAND LC_CTYPE ENDS``, or ``-c SOURCE`` in place of the file
where morphz is imported from a zip; ENDS is ``all``, or :data:`GROUP_ONLY` where the user's
configuration says ``exec_ends = "group"``: then it kills the shell's group only and is no
subreaper); standard library only, it imports nothing of morphz.

It starts nothing until the agent says so: one byte, :data:`GO`, on its stdin, which the agent
writes once it holds the supervisor's pipes. A call cancelled while the supervisor starts kills
it (asyncio does) before that, so a command whose call was cancelled never runs; the end of
stdin before :data:`GO` (or a stop signal) ends the supervisor without starting anything, and
without a report.

Then it starts ``/bin/sh -c COMMAND`` leading a session of its own (stdin ``/dev/null``, stdout
and stderr both the supervisor's stdout, which is the agent's output pipe), by fork and exec as
:mod:`subprocess` starts a child, so the command starts with the signal dispositions a plain
child has. In a session of its own the shell's group is orphaned, so the kernel discards the
stop signals from the terminal (SIGTSTP, SIGTTIN, SIGTTOU) it or its jobs get, as it did when the
agent started the shell itself: a ``kill -TSTP $$`` does not stop the command till its timeout.
It waits for the shell to exit, then kills the shell's group and every process the command
left, and reports the shell's status. On Linux it first makes itself a child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``): a process the command started whose parent dies (a
``setsid`` job once the shell is gone, the grandchild of a daemon's double fork) becomes the
supervisor's child, not init's, so after the group it kills its children and their groups,
then, in the rounds after the first, every descendant that runs (a scan of /proc) and its group,
reaping what has ended, round after round, until it has no child. It never waits for one process
(a process traced by a stopped tracer cannot be reaped till the tracer is killed, a round later):
a round waits at most :data:`ROUND_S` for a SIGCHLD. A process it may not signal (one that became
another user's: sudo, a setuid program) is left and counted. On Linux it also makes itself not
dumpable, so the command (the same user) cannot open its pipes through /proc/PID/fd. Elsewhere
(macOS), or on a Linux where it cannot be a subreaper (a Python without :mod:`ctypes`, a libc it
cannot load, ``prctl`` refused), only the group is killed: a process in a session of its own
escapes.

It cleans up the same way, at once, when asked to stop: the end of its stdin (a pipe only the
agent holds open: the agent closes it on a timeout or a cancellation, and the system closes it
when the agent dies, however it dies) or SIGTERM, SIGINT or SIGHUP (the agent sends SIGTERM
too: a process of the command may hold that stdin open). It runs in a session of its own (the
agent starts it so), so a signal to the agent's process group does not reach it. It unblocks
SIGCHLD and the stop signals, which the agent's thread may have blocked (a signal mask is
inherited), and gives the shell the mask it had.

What it says goes to its stderr, a pipe of its own to the agent, one line each, each starting
with a newline (a line the command writes there cannot swallow the next real one):
``no-subreaper REASON`` on Linux when it cannot be a subreaper, ``pid N`` once the shell runs,
then ``end RETURNCODE LEFT`` (the shell's return code, negative for the signal that killed it, as
``subprocess`` gives it; LEFT, the processes that still run at the end, 0 unless they kept
forking past :data:`ROUNDS` rounds or could not be signalled), or ``error MESSAGE`` if the shell
could not be started. A traceback there means the supervisor itself failed.

Killed itself (SIGKILL: nothing can catch it), it cleans up nothing: the agent, if it lives,
kills the shell's group (it has the pid from the report); a process in another session runs on,
reparented to init (or the nearest subreaper), and if the agent is gone too, the group runs on
as well.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from contextlib import suppress
from types import FrameType

TYPE_CHECKING = False  # not typing's: importing typing costs milliseconds on every exec call
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import NoReturn

PR_SET_DUMPABLE = 4  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 200  # kill-and-reap rounds at the end; more only if the command's processes keep forking
ROUND_S = 0.05  # the longest wait in a round for a killed process's end (SIGCHLD ends it sooner)


def _signals(*names: str) -> tuple[signal.Signals, ...]:
    """The signals named that this system has: the module imports where ``signal`` has only
    Windows' (the agent's modules import it there; it runs only on POSIX systems)."""
    return tuple(getattr(signal, name) for name in names if hasattr(signal, name))


STOP_SIGNALS = _signals("SIGTERM", "SIGINT", "SIGHUP")
_DEFAULTED = _signals("SIGPIPE", "SIGXFSZ")  # ignored by Python, reset for the shell as
# subprocess (restore_signals) resets them; the handlers set here end with the exec
GO = b"g"  # the agent's word to start the command
GROUP_ONLY = "group"  # ENDS: the shell's process group only (a setsid process runs on)
UNSET = "-"  # the LC_CTYPE argument when the command's environment has none; else "=VALUE"

_stop_asked: list[int] = []  # the stop signals received


def _stop(signum: int, frame: FrameType | None) -> None:
    _stop_asked.append(signum)


def _noted(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD: nothing to do here; its arrival wakes the wait (the wakeup pipe)."""


def become_subreaper() -> bool:
    """Make the orphans among this process's descendants its children (Linux, with /proc to
    find them); False where it cannot, said to the agent on Linux (``no-subreaper REASON``)."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/stat"):
        return False
    try:  # imported here only: it costs time on every exec call elsewhere for nothing
        import ctypes
    except ImportError as exc:  # a Python built without _ctypes
        return _no_subreaper(f"no ctypes: {exc}")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # not dumpable: the user's other processes, the command's included, cannot open
        # /proc/PID/fd (its stdin and report pipes) nor ptrace it; the shell's exec makes the
        # shell dumpable again. Refused, it is only that protection lost.
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        done = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError) as exc:  # no dlopen (a static build), no prctl
        return _no_subreaper(f"no prctl: {exc}")
    return bool(done) or _no_subreaper(f"prctl: {os.strerror(ctypes.get_errno())}")


def _no_subreaper(why: str) -> bool:
    report(f"no-subreaper {why}")
    return False


def watch_signals() -> int:
    """Handlers for SIGCHLD and the stop signals (one already ignored stays ignored, for the
    shell too); the read end of a pipe that becomes readable when one arrives."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _noted)
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stop)
    return read


def environment(lc_ctype: str) -> dict[bytes, bytes]:
    """This process's environment as the command is to have it: Python's start-up may have set
    LC_CTYPE (the C locale coerced to UTF-8, PEP 538); the agent says what it was."""
    env = dict(os.environb)
    env.pop(b"LC_CTYPE", None)
    if lc_ctype != UNSET:
        env[b"LC_CTYPE"] = os.fsencode(lc_ctype[1:])
    return env


def started(wake: int) -> bool:
    """Whether the agent said to start the command (:data:`GO` on stdin) before the end of
    stdin or a stop signal."""
    while not _stop_asked:
        ready, _, _ = select.select([0, wake], [], [])
        if wake in ready:
            os.read(wake, 4096)
        if 0 in ready:
            return os.read(0, len(GO)) == GO
    return False


def start(command: bytes, env: dict[bytes, bytes], mask: Iterable[int] = ()) -> int:
    """The shell's pid: ``/bin/sh -c command`` leading a session of its own (its group's id is
    its pid). Started by fork and exec, not posix_spawn: glibc's leaves its own signals (32 and
    33) ignored in the child, and an ignored signal stays ignored across exec. OSError if it
    cannot be started. ``mask``: the signals the shell has blocked (the agent's mask)."""
    failure_read, failure_write = os.pipe()  # close-on-exec: empty at its end, the exec worked
    pid = os.fork()
    if pid == 0:
        _become_shell(command, env, failure_write, mask)
    os.close(failure_write)
    with open(failure_read, "rb") as failure:
        said = failure.read()
    if said:
        os.waitpid(pid, 0)
        raise OSError(said.decode("utf-8", "replace"))
    return pid


def _become_shell(
    command: bytes, env: dict[bytes, bytes], failure: int, mask: Iterable[int]
) -> NoReturn:
    """In the forked child: a session of its own, the dispositions Python changed back to the
    default, the signal mask the agent had, the standard streams, then the shell. If the exec
    fails, why goes on ``failure`` and the child exits: nothing here returns into the
    supervisor's code."""
    why = "the shell's process ended before its exec"
    try:
        os.setsid()
        for signum in _DEFAULTED:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        os.dup2(1, 2)
        os.execve("/bin/sh", [b"/bin/sh", b"-c", command], env)
    except OSError as exc:
        why = exc.strerror or str(exc)
    except BaseException as exc:  # told to the supervisor, which reports it as an error
        why = f"{type(exc).__name__}: {exc}"
    finally:
        os.write(failure, (why or "unknown error").encode("utf-8", "replace"))
        os._exit(127)


class Shell:
    """The shell's pid and, once it is reaped, its wait status."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None

    def exited(self) -> bool:
        """Whether the shell has exited. Where ``os.waitid`` is (Linux) it is left unreaped, so
        its number, which is its group's, is not reused before the group is killed, and the
        adopted orphans that ended meanwhile are reaped; elsewhere it is reaped."""
        if not hasattr(os, "waitid"):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
            return pid != 0
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        while (info := os.waitid(os.P_ALL, 0, flags)) is not None:
            if info.si_pid == self.pid:
                return True
            os.waitpid(info.si_pid, 0)
        return False

    def code(self) -> int:
        """The shell's return code (negative for the signal that killed it); -SIGKILL if it
        could not be reaped (traced by a stopped process): it was sent SIGKILL."""
        if self.status is None:
            return -signal.SIGKILL
        return os.waitstatus_to_exitcode(self.status)


def wait(shell: Shell, wake: int) -> None:
    """Until the shell has exited or a stop is asked (a stop signal, the end of stdin)."""
    while not _stop_asked and not shell.exited():
        ready, _, _ = select.select([0, wake], [], [])
        if wake in ready:
            os.read(wake, 4096)
        if 0 in ready and not os.read(0, 4096):
            return


def children() -> list[int]:
    """This process's children, zombies included."""
    me = os.getpid()
    # the kernel may not list them (CONFIG_PROC_CHILDREN): then /proc is scanned
    with suppress(OSError), open(f"/proc/{me}/task/{me}/children", "rb") as listing:
        return [int(pid) for pid in listing.read().split()]
    return [pid for pid, (parent, _) in processes().items() if parent == me]


def processes() -> dict[int, tuple[int, bool]]:
    """Every process in /proc: its parent, and whether it runs (not a zombie)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:  # it ended meanwhile
            continue
        state, parent = stat[stat.rindex(b")") + 2 :].split()[:2]
        found[int(name)] = int(parent), state not in (b"Z", b"X")
    return found


def descendants() -> list[int]:
    """This process's descendants that run (zombies left out), from a scan of /proc."""
    below: dict[int, list[int]] = {}
    running = set()
    for pid, (parent, runs) in processes().items():
        below.setdefault(parent, []).append(pid)
        if runs:
            running.add(pid)
    found, todo = [], [os.getpid()]
    while todo:
        for pid in below.get(todo.pop(), ()):
            todo.append(pid)
            if pid in running:
                found.append(pid)
    return found


def _kill(pid: int, group: bool = False) -> bool:
    """SIGKILL to a process (a group); whether it was sent. A process this one may not signal
    (one that became another user's: sudo, a setuid program) cannot be ended from here."""
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_with_groups(pids: list[int]) -> bool:
    """Kill each process and its process group (a ``setsid`` job's pipeline, a chain of
    background jobs: all at once); whether any signal was sent."""
    sent = False
    mine = os.getpgrp()
    for pid in pids:
        sent |= _kill(pid)
        with suppress(ProcessLookupError):
            if (group := os.getpgid(pid)) != mine:
                sent |= _kill(group, group=True)
    return sent


def reap(shell: Shell) -> int | None:
    """Reap every child that has ended, never waiting (a child traced by a stopped process
    cannot be reaped till its tracer ends); how many were, None if no child is left. The
    shell's status is kept."""
    count = 0
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        if not pid:
            return count
        count += 1
        if pid == shell.pid:
            shell.status = status


def end(shell: Shell, wake: int, subreaper: bool) -> int:
    """Kill the shell's group and the shell, then round after round reap what has ended and (a
    subreaper) kill what runs on: the children and their groups in the first round, then
    every running descendant (a /proc scan) and their groups, until no child is left. No
    process is waited for on its own: a round waits at most :data:`ROUND_S` for a SIGCHLD.
    It stops early when a round has nothing to reap and nothing was killed the round before
    (processes it may not signal). The processes that still run are counted (on Linux)."""
    sent = _kill(shell.pid, group=True) | _kill(shell.pid)
    for round_number in range(ROUNDS):
        reaped = reap(shell)
        if reaped is None:  # no child left: the usual case, with no need to look in /proc
            return 0
        if not reaped and not sent:  # nothing changes any more
            break
        sent = False
        if subreaper:
            sent = _kill_with_groups(children() if round_number == 0 else descendants())
        ready, _, _ = select.select([wake], [], [], ROUND_S)
        if ready:
            os.read(wake, 4096)
    return len(descendants()) if subreaper else 0


def report(line: str) -> None:
    """A line to the agent. An agent that died no longer reads: the cleanup was for it."""
    with suppress(BrokenPipeError):
        os.write(2, b"\n" + line.encode())


def main() -> None:
    # a signal mask is inherited: an agent's thread that blocks SIGCHLD would hide the shell's
    # end from this process. Unblocked here; the shell gets the mask back.
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD, *STOP_SIGNALS})
    command, lc_ctype = os.fsencode(sys.argv[1]), sys.argv[2]
    subreaper = sys.argv[3:4] != [GROUP_ONLY] and become_subreaper()
    wake = watch_signals()
    if not started(wake):  # the agent is gone, or a stop signal came: nothing to start or end
        return
    try:
        shell = Shell(start(command, environment(lc_ctype), mask))
    except OSError as exc:
        report(f"error {exc.strerror or exc}")
        return
    report(f"pid {shell.pid}")
    try:
        wait(shell, wake)
    finally:  # a failure here too ends what the command started, then shows its traceback
        left = end(shell, wake, subreaper)
    report(f"end {shell.code()} {left}")


if __name__ == "__main__":
    main()
