"""Which process owns a running activation, and whether that process still lives.

An owner is the host name, the process id and the process's start identity. On Linux the start
identity is the kernel boot id and the start time of the process (field 22 of
``/proc/<pid>/stat``), so neither a pid recycled by a later process nor a reboot is mistaken
for the owner; elsewhere it is ``None`` and liveness falls back to the pid alone.

:func:`owner_alive` answers ``True`` (alive), ``False`` (provably dead) or ``None`` (cannot
tell: the owner runs on another host). Hosts are told apart by name; two machines or containers
sharing a store under one host name (and separate pid namespaces) would be confused.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_DEAD_STATES = frozenset("ZXx")  # zombie, dead: the process has exited, not yet reaped


@dataclass(frozen=True, slots=True)
class Owner:
    """The process that started an activation."""

    host: str
    pid: int
    started: str | None  # start identity; None where the platform does not tell

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def to_dict(self) -> dict[str, str | int | None]:
        return {"host": self.host, "pid": self.pid, "started": self.started}


def host_name() -> str:
    return socket.gethostname()


def _boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on; None when there is none.
    The command name (field 2) may hold spaces and parentheses: it ends at the last ')'."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """The start identity of process ``pid`` (``"<boot id>:<start time>"``), or None when the
    platform has no ``/proc``, the process is gone, or it has exited (a zombie)."""
    boot = _boot_id()
    fields = _stat_fields(pid) if boot is not None else None
    if fields is None or len(fields) < 20 or fields[0] in _DEAD_STATES:
        return None
    return f"{boot}:{fields[19]}"  # field 22 of the whole line


def current_owner() -> Owner:
    """This process, as the owner of the activations it starts."""
    pid = os.getpid()
    return Owner(host_name(), pid, process_start(pid))


def _pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def owner_alive(owner: Owner) -> bool | None:
    """True when ``owner`` still runs, False when it provably does not (its pid is gone, has
    exited, or now belongs to a process with another start identity), None when this process
    cannot tell (another host)."""
    if owner.host != host_name():
        return None
    if not _pid_exists(owner.pid):
        return False
    boot = _boot_id()
    if owner.started is None or boot is None:
        return True  # no start identity to compare: the pid alone decides
    fields = _stat_fields(owner.pid)
    if fields is None:  # it exists, but its start cannot be read (/proc hidepid): cannot tell
        return None
    if len(fields) < 20 or fields[0] in _DEAD_STATES:
        return False  # exited (a zombie)
    return f"{boot}:{fields[19]}" == owner.started


def untold_reason(owner: Owner) -> str:
    """Why :func:`owner_alive` cannot tell whether ``owner`` lives (it answered None)."""
    if owner.host != host_name():
        return f"it runs on another host ({owner.host}), or on this one under another host name"
    return (
        f"its pid {owner.pid} exists on this host, but whether it is the same process cannot be "
        "read (/proc is hidden from this user: hidepid)"
    )


# The activations this process started and still runs. A run that ended, even by an error that
# kept its end from being recorded (a store busy past its timeout), is no longer one: this
# process will not record that end, so recovery may, although the process lives on.
_RUNNING: set[str] = set()


def track(activation_id: str) -> None:
    """This process runs ``activation_id`` (its start was recorded)."""
    _RUNNING.add(activation_id)


def untrack(activation_id: str) -> None:
    """This process no longer runs ``activation_id`` (its end was recorded, or its run ended)."""
    _RUNNING.discard(activation_id)


def still_runs(owner: Owner, activation_id: str) -> bool | None:
    """Whether ``owner`` still runs ``activation_id``: when ``owner`` is this process, whether
    it tracks the activation; otherwise whether that process lives (:func:`owner_alive`)."""
    if owner == current_owner():
        return activation_id in _RUNNING
    return owner_alive(owner)


__all__ = [
    "Owner",
    "current_owner",
    "host_name",
    "owner_alive",
    "process_start",
    "still_runs",
    "track",
    "untold_reason",
    "untrack",
]
