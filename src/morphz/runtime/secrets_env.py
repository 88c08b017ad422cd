"""The provider secrets kept out of reach of the agent's commands while ``exec`` or ``chat`` runs.

The configuration reads the secrets (:data:`~morphz.runtime.tools.secrets.HIDDEN_ENV`: the API
keys and ``OPENAI_BASE_URL``, which may hold credentials) from the environment into the model
it makes; after that the agent's commands have no need of them, though ``os.environ`` keeps them
for the host that runs Morphz. The exec tool runs its commands without them, but a command could
read them from the agent's own process: Linux shows every process's initial environment block
in ``/proc/PID/environ`` to the other processes of its user. :func:`withhold`, called by the CLI
once the model is made:

- on Linux, overwrites their values with NUL bytes in the initial environment block itself
  (``/proc/PID/environ`` then shows each name with an empty value), writing only inside the
  range ``/proc/self/stat`` gives for it (``env_start``..``env_end``) and only when that range
  is one writable mapping holding what ``/proc/self/environ`` shows;
  the C environment (``environ``), which pointed into the block, is then given fresh copies of
  the values from ``os.environ`` (in ordinary memory, which ``/proc/PID/environ`` does not show),
  so that a host's own children still inherit them;
- on Linux, makes the process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``), unless
  :data:`KEEP_DUMPABLE` is ``1`` in the environment: ``/proc/PID/environ``, ``mem``, ``fd``,
  ``maps`` and ptrace are then closed to the user's other processes (not to root), and the
  process dumps no core. A child's exec makes the child dumpable again.

Anything unexpected (no ctypes, a kernel that does not give the range, a block that is not
what ``/proc/self/environ`` shows) leaves that protection out, said in the :class:`Withheld`
returned; nothing is written elsewhere and nothing fails. ``os.environ`` is left as it is
(review 17i: taking the secrets out of it for the command's length took them from a host's other
threads too); the children Morphz starts get an environment without them (the exec tool's
commands, the regex search's child). Elsewhere (macOS) nothing is done: the initial block stays
as it was (``ps -E`` shows it to the same user).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from morphz.runtime.tools.secrets import HIDDEN_ENV

PR_SET_DUMPABLE = 4  # <linux/prctl.h>
KEEP_DUMPABLE = "MORPHZ_DUMPABLE"  # "1": leave the process dumpable (a debugger, a core dump)
_ENV_FIELDS = slice(47, 49)  # env_start, env_end: /proc/self/stat fields 50 and 51, proc(5)
_MAX_BLOCK = 16 << 20  # an initial environment larger than this is not one the kernel made
_LINUX = sys.platform.startswith("linux")


@dataclass(frozen=True, slots=True)
class Withheld:
    """What :func:`withhold` did: the names whose values it overwrote in the initial
    environment block, whether it made the process not dumpable, and why it left the block as
    it was (None when it looked at it)."""

    overwritten: tuple[str, ...]
    closed: bool
    skipped: str | None


def withhold() -> Withheld:
    """Put the provider secrets (:data:`HIDDEN_ENV`) out of reach of this process's other
    processes (see the module); what it does stays done (the block is not written back, the
    process stays not dumpable)."""
    overwritten, skipped = _overwrite_initial(HIDDEN_ENV) if _LINUX else ((), "not Linux")
    for name in overwritten:  # the C environment pointed into the block: a fresh copy, in memory
        if name in os.environ:  # /proc/PID/environ does not show, so that a host's own
            os.putenv(name, os.environ[name])  # children still inherit it (review 17m)
    closed = _LINUX and os.environ.get(KEEP_DUMPABLE) != "1" and _not_dumpable()
    return Withheld(overwritten, closed, skipped)


def _overwrite_initial(names: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """Overwrite with NUL bytes the values of ``names`` in the initial environment block: the
    names overwritten, and why nothing was looked at (None when the block was)."""
    try:
        import ctypes
    except ImportError as exc:  # a Python built without _ctypes
        return (), f"no ctypes: {exc}"
    try:
        start, end = _block_range()
        block = ctypes.string_at(start, end - start)
        with open("/proc/self/environ", "rb") as shown:
            if shown.read() != block:
                return (), "the block is not what /proc/self/environ shows"
    except (OSError, ValueError) as exc:
        return (), str(exc)
    found = set()
    for name, offset, length in value_spans(block, {n.encode() for n in names}):
        if offset >= 0 and offset + length <= end - start:  # within the block, always
            ctypes.memset(start + offset, 0, length)
            found.add(name.decode())
    return tuple(sorted(found)), None


def value_spans(block: bytes, names: set[bytes]) -> Iterator[tuple[bytes, int, int]]:
    """Each ``NAME=VALUE`` entry of ``block`` (NUL-separated) whose name is in ``names`` and
    whose value is not empty: (name, offset of the value in the block, its length)."""
    offset = 0
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and name in names:
            yield name, offset + len(name) + 1, len(value)
        offset += len(entry) + 1


def _block_range() -> tuple[int, int]:
    """Where the initial environment block lies (``/proc/self/stat``'s env_start and env_end),
    checked to be within one readable and writable mapping; ValueError otherwise."""
    with open("/proc/self/stat", "rb") as stat:
        text = stat.read()
    fields = text[text.rfind(b")") + 2 :].split()[_ENV_FIELDS]  # the name may hold spaces
    if len(fields) != 2:
        raise ValueError("/proc/self/stat gives no env_start and env_end (Linux before 3.5)")
    start, end = int(fields[0]), int(fields[1])
    if not 0 < start < end or end - start > _MAX_BLOCK:
        raise ValueError(f"an unexpected environment range {start:#x}-{end:#x}")
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            low, high = (int(bound, 16) for bound in span.split("-"))
            if low <= start and end <= high and perms.startswith("rw"):
                return start, end
    raise ValueError(f"the environment range {start:#x}-{end:#x} is not one writable mapping")


def _not_dumpable() -> bool:
    """Make this process not dumpable (PR_SET_DUMPABLE 0); False where it cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):  # no ctypes, no dlopen, no prctl: left open
        return False


__all__ = ["KEEP_DUMPABLE", "Withheld", "value_spans", "withhold"]
