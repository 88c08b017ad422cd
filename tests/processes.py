"""Helpers for tests that watch real processes: whether one still runs, waiting for one to end,
waiting for a process to block on a locked store, and what the CLI writes to a terminal. The
waits are safety nets, not timings."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc/self").exists()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper has ended: its exit is
    done). Without /proc, whether it exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: it exists
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # reaped meanwhile (or no /proc, where kill said it exists)
        return not PROC
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pid: int, tries: int = 400) -> bool:
    """Whether ``pid`` has ended, after a generous wait for a kill's delivery (which is
    asynchronous): not a speed test."""
    for _ in range(tries):
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# the environment a morphz process needs for a test to read its /proc/PID/task/*/syscall: exec
# and chat make themselves not dumpable (runtime/secrets_env.py), which closes that file to a
# user other than root
WATCHED = {"MORPHZ_DUMPABLE": "1"}


def wait_for_sqlite_busy_sleep(pid: int) -> None:
    """Return once a thread of ``pid`` sleeps (the nanosleep system calls, x86-64 Linux
    numbers), i.e. a write of it waits for a store's lock; a safety net of 120 s."""
    for _ in range(12000):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                if (task / "syscall").read_text().split()[0] in ("35", "230"):
                    return
        time.sleep(0.01)  # polling a state, not a timing
    raise AssertionError("no write of morphz waited for the lock")


# A test marks the processes a command starts by this variable in their environment, so that
# it can find them in /proc whatever became of their parents (the ``mark`` fixture, conftest.py).
MARK = "MORPHZ_TEST_MARK"


def marked(mark: str) -> list[int]:
    """The live processes whose environment holds ``MARK=mark`` (a zombie's is empty)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def survivors(mark: str, tries: int = 400) -> list[int]:
    """The marked processes still alive after a generous wait for a kill's delivery (empty when
    all are gone): not a speed test."""
    left = marked(mark)
    for _ in range(tries):
        if not left:
            break
        time.sleep(0.05)
        left = marked(mark)
    return left


def morphz_on_a_terminal(
    *args: str, env: dict[str, str], cwd: Path, stderr_too: bool = False
) -> tuple[int, bytes]:
    """``morphz ARGS`` run with a pseudo-terminal as its standard output (and standard error
    when ``stderr_too``; otherwise it is discarded): its exit status and what it wrote (the
    terminal's line discipline turns ``\\n`` into ``\\r\\n``)."""
    master, slave = pty.openpty()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "morphz", *args],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave if stderr_too else subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
    finally:
        os.close(slave)
    shown = b""
    try:
        while chunk := _read_terminal(master):
            shown += chunk
    finally:
        os.close(master)
        status = child.wait(timeout=120)
    return status, shown


def _read_terminal(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: every writer closed the terminal
        return b""
