"""How a ``morphz`` command ends when a person or a supervisor stops it: Ctrl-C (SIGINT),
SIGTERM (kill, timeout, a service manager, a CI runner) or SIGHUP (a closed terminal).

The command cleans up first (an agent's activation is recorded interrupted, its exec command's
process group killed, the store closed), then the process ends *by the signal that stopped it*,
as Python ends on an uncaught KeyboardInterrupt. Its parent can then tell "stopped" from
"failed": a shell stops the script that ran it (``for t in ...; do morphz exec "$t"; done``
goes no further), ``timeout`` and supervisors read 130 / 143 / 129, not the 1 of a failure.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import NoReturn

# the signals that stopped the command, the first first: SIGINT (a KeyboardInterrupt that ended
# the command), SIGTERM or SIGHUP (passed to SIGINT's handler by stopped_like_ctrl_c)
_STOPPED_BY: list[int] = []


def forget() -> None:
    """A new command starts: nothing stopped it yet."""
    _STOPPED_BY.clear()


def interrupted() -> None:
    """A KeyboardInterrupt ends the command: SIGINT, unless SIGTERM or SIGHUP caused it."""
    _STOPPED_BY.append(signal.SIGINT)


def stopped_by() -> int | None:
    """The signal that stopped the command (None: none did)."""
    return _STOPPED_BY[0] if _STOPPED_BY else None


def terminated() -> bool:
    """Whether SIGTERM or SIGHUP stopped the command (a supervisor, ``kill``, a closed
    terminal), which no prompt takes as the end of its input, as it may a Ctrl-C."""
    return stopped_by() not in (None, signal.SIGINT)


@contextmanager
def stopped_like_ctrl_c() -> Iterator[None]:
    """While an agent or the demo runs, SIGTERM and SIGHUP stop it as Ctrl-C does: the
    activation is recorded interrupted, the exec tool's command group is killed and temporary
    folders are removed, where Python's default would exit at once and leave them behind. The
    signal is remembered, and the process ends by it (:func:`end_by`)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (a host running us in a thread)
        return
    wanted = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    # a signal the parent set to be ignored (nohup) stays ignored
    wanted = [sig for sig in wanted if signal.getsignal(sig) is signal.SIG_DFL]
    before = {sig: signal.signal(sig, _as_sigint) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _as_sigint(signum: int, frame: FrameType | None) -> None:
    """Remember ``signum``, then handle it as SIGINT's handler of the moment would: inside an
    event loop's run, asyncio's (it cancels the running task, which then cleans up and records
    its end, and the run raises KeyboardInterrupt); outside, Python's (KeyboardInterrupt)."""
    _STOPPED_BY.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


# what Windows reports for a process that Ctrl-C ended (STATUS_CONTROL_C_EXIT, 0xC000013A),
# as Python's own exit on an uncaught KeyboardInterrupt there; signed, so that every Python's
# 32-bit exit status conversion takes it
_WINDOWS_CTRL_C_EXIT = 0xC000013A - 2**32


def end_by(signum: int) -> NoReturn:
    """End the process by ``signum`` (its default action), as Python ends on an uncaught
    KeyboardInterrupt; where signals cannot end it so, exit with the status Python would give
    (on Windows, STATUS_CONTROL_C_EXIT for Ctrl-C; otherwise 128 + ``signum``). A second
    Ctrl-C meanwhile ends the process by SIGINT at once, with no traceback."""
    posix = os.name == "posix"
    if posix and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # (a blocked flush: Ctrl-C still ends it)
        signal.signal(signum, signal.SIG_DFL)
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed or broken stream: nothing more can be said
            if stream is not None:
                stream.flush()
    if posix:
        os.kill(os.getpid(), signum)
    sys.exit(_WINDOWS_CTRL_C_EXIT if signum == signal.SIGINT and os.name == "nt" else 128 + signum)
