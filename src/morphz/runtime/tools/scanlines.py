"""The lines of search_files: how a file's lines are read and matched, for the literal search
(in the agent's process) and the regex search, which runs this file as a script in a child
process (``python -I -S scanlines.py``): a JSON request line on stdin, then one JSON line
``[path shown, path to read]`` per file as the agent's process finds them; one JSON result on
stdout.

Why a child: Python's ``re`` holds the GIL while it matches, and a regex can backtrack for ever
('(a|aa)+$' against a line of a's and a b), so in the agent's process it would freeze the event
loop and the signal handlers until SIGKILL. ``re`` does check for signals as it matches, but
only the main thread runs their handlers; here the search runs in the main thread, where a
SIGALRM tick stops a line that takes over ``line_s`` (the regex is refused) or a search past
``total_s``, walking included (the matches found so far are returned). Its memory is capped, and
the parent kills it if it does not answer in time. Standard library only: the script imports
nothing of morphz.
"""

from __future__ import annotations

import contextlib
import json
import re
import resource
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

BINARY_PROBE = 8192  # a NUL byte in the first 8 KiB marks a binary file
TICK_S = 0.05  # how often the child looks at the clock


def is_binary(head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is binary (a NUL in the probe)."""
    return b"\0" in head[:BINARY_PROBE]


Span = tuple[int, int]  # where a match starts and ends in its line


@dataclass
class Found:
    """What a search found: matches ``[path, line number, text, column]`` in path order (the
    text shown of the line, which starts at that column: see :func:`excerpt`), binary files
    skipped, lines searched in their first characters only, and why it stopped early: "limit"
    (more matches than asked for), "time", "memory" or "cancelled"; for a refused regex,
    ``error`` (it does not compile) or ``slow`` (``[path, line]`` where one line took too long;
    ``["", 0]``: the compilation did)."""

    matches: list[list[Any]] = field(default_factory=list)
    binary: int = 0
    lines_cut: int = 0
    stop: str | None = None
    error: str | None = None
    slow: list[Any] | None = None
    unreadable: list[str] | None = None  # [path, reason]


class Clock:
    """The child's time limits, looked at on each SIGALRM tick: one line (or the compilation)
    may take ``line_s``, the whole search ``total_s``."""

    def __init__(self, line_s: float, total_s: float) -> None:
        self.line_s = line_s
        self.deadline = time.monotonic() + total_s
        self.rel, self.number = "", 0  # the line being matched (0: compiling)
        self.busy = True  # compiling or matching (False: waiting for the next file)
        self._seen: tuple[str, int] | None = None
        self._since = 0.0
        self._fired = False

    def check(self) -> None:
        if time.monotonic() >= self.deadline:
            self._fire(OutOfTime())

    def tick(self, _signum: int, _frame: FrameType | None) -> None:
        # one line's time is CPU time: waiting for a file (a slow walk, a network file system)
        # or being stopped (Ctrl-Z) is no backtracking; the whole search's is the wall clock's
        cpu, at = time.process_time(), (self.rel, self.number)
        if time.monotonic() >= self.deadline:
            self._fire(OutOfTime())
        elif not self.busy or at != self._seen:
            self._seen, self._since = (at if self.busy else None), cpu
        elif cpu - self._since >= self.line_s:
            self._fire(SlowLine(*at))

    def _fire(self, stop: Exception) -> None:
        if not self._fired:  # once: a tick while the first is being handled changes nothing
            self._fired = True
            raise stop


class OutOfTime(Exception):
    """The search's time is over."""


class SlowLine(Exception):
    def __init__(self, rel: str, number: int) -> None:
        super().__init__(rel, number)
        self.rel, self.number = rel, number


def excerpt(line: str, span: Span, width: int) -> tuple[str, int]:
    """What is shown of ``line`` for a match at ``span``, at most ``width`` characters, and the
    (1-based) column where it starts: the line's head when the match ends within it, else from
    a quarter of ``width`` before the match (a match far into a long line is seen)."""
    start, end = span
    if end <= width:
        return line[:width], 1
    begin = max(0, start - width // 4)
    return line[begin : begin + width], begin + 1


def scan(
    files: Iterable[tuple[str, str]],
    match: Callable[[str], Span | None],
    *,
    limit: int,
    line_chars: int | None,
    shown_chars: int,
    found: Found,
    clock: Clock | None = None,
    until: Callable[[], bool] | None = None,
) -> None:
    """Match the lines of ``files`` (``(path shown, path to read)``), numbered as read_file
    numbers them (split at \\n only: splitlines also breaks at \\f, \\r...) and each cut at
    ``line_chars`` (None: searched whole), until more than ``limit`` match, or ``until()`` is
    true before a file (the search was cancelled: ``stop`` is "cancelled"). A match keeps
    :func:`excerpt` of its line, ``shown_chars`` wide."""
    for rel, path in files:
        if until is not None and until():
            found.stop = "cancelled"
            return
        if clock is not None:
            clock.check()
            clock.rel, clock.number, clock.busy = rel, 0, True
        with open(path, "rb") as f:
            content = f.read()
        if is_binary(content):
            found.binary += 1
            if clock is not None:
                clock.busy = False  # waiting for the next file is no slow line
            continue
        text = content.decode("utf-8", "replace")
        for number, whole in enumerate(text.removesuffix("\n").split("\n"), 1):
            line = whole if line_chars is None else whole[:line_chars]
            found.lines_cut += len(line) < len(whole)
            if clock is not None:
                clock.number = number
            if (span := match(line)) is not None:
                if len(found.matches) == limit:
                    found.stop = "limit"
                    return
                found.matches.append([rel, number, *excerpt(line, span, shown_chars)])
        if clock is not None:
            clock.busy = False  # the next file comes when the agent's process finds it


def _compiled(pattern: str, ignore_case: bool, found: Found) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.I if ignore_case else 0)
    except (re.error, OverflowError, RecursionError) as exc:  # bad, too big, too deep
        found.error = "it nests too deep" if isinstance(exc, RecursionError) else str(exc)
        return None


def _cap_memory(limit: int) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _search(request: dict[str, Any], lines: Iterable[str], found: Found) -> None:
    clock = Clock(request["line_s"], request["total_s"])
    signal.signal(signal.SIGALRM, clock.tick)
    signal.setitimer(signal.ITIMER_REAL, TICK_S, TICK_S)
    try:
        rx = _compiled(request["pattern"], request["ignore_case"], found)
        clock.busy = False
        if rx is not None:
            files = (tuple(json.loads(line)) for line in lines)
            scan(
                files,
                lambda line: None if (m := rx.search(line)) is None else m.span(),
                limit=request["limit"],
                line_chars=request["line_chars"],
                shown_chars=request["shown_chars"],
                found=found,
                clock=clock,
            )
    except OutOfTime:
        found.stop = "time"
    except SlowLine as slow:
        found.slow = [slow.rel, slow.number]
    except MemoryError:
        found.stop = "memory"
    except OSError as exc:
        found.unreadable = [clock.rel, exc.strerror or str(exc)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    request = json.loads(sys.stdin.readline())
    with contextlib.suppress(ValueError, OSError):  # (macOS refuses it): the search runs uncapped
        _cap_memory(request["memory"])
    found = Found()
    _search(request, sys.stdin, found)
    json.dump(asdict(found), sys.stdout)


if __name__ == "__main__":
    main()
