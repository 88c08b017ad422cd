"""The matching of ``search_files``: a literal query in the agent's process (``in``, linear in
the line and the query), a regex in a child process (:mod:`.scanlines` run as a script) that a
signal stops and the agent's process kills when it does not answer.

Python's ``re`` cannot be stopped in the agent's process: a regex that backtracks without end
holds the GIL, so the event loop and the signal handlers freeze until SIGKILL. The child's
limits: :data:`LINE_TIMEOUT_S` for one line (the regex is refused, naming the line) or for
compiling the regex, :data:`REGEX_SEARCH_S` for the whole search (the matches found so far are
returned), :data:`CHILD_MEMORY` of address space. A regex searches a line in its first
:data:`SEARCH_LINE_CHARS` characters (the time limit is per line); a literal searches it whole.
Either way a match keeps :data:`MATCH_SHOWN_CHARS` of its line, around the match when it lies
beyond the line's head.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from morphz.runtime.tools import scanlines
from morphz.runtime.tools.base import ToolError
from morphz.runtime.tools.paths import READ_MAX_CHARS
from morphz.runtime.tools.scanlines import Found, Span, scan
from morphz.runtime.tools.secrets import without_secrets

SEARCH_LINE_CHARS = READ_MAX_CHARS  # a regex's line at most: what one read_file page shows
MATCH_SHOWN_CHARS = 300  # what a result shows of a matching line
LINE_TIMEOUT_S = 1.0  # a regex taking longer on one line backtracks out of bounds
REGEX_SEARCH_S = 30.0  # a regex search in all: past it, the matches found so far
CHILD_MEMORY = 2 << 30  # bytes of address space for the regex search's child process
_WATCH_S = 0.05  # how often the guard of a child looks for a cancellation
_GRACE_S = 10.0  # the child's start and answer, beyond REGEX_SEARCH_S, before it is killed
_CHILD = Path(scanlines.__file__)
_ADVICE = "simplify it, anchor it with literal text, or pass regex=false for the literal text"


def literal_search(
    query: str,
    ignore_case: bool,
    files: Iterable[tuple[str, str]],
    limit: int,
    until: Callable[[], bool] | None = None,
) -> Found:
    """The lines holding ``query`` (ignoring case: both case-folded), in the agent's process,
    each searched whole (``str.find`` is linear: no line is too long for it); once ``until()``
    is true (looked at before each file), those found so far, ``stop`` being "cancelled"."""
    found = Found()
    match = _literal(query, ignore_case)
    shown = MATCH_SHOWN_CHARS
    scan(files, match, limit=limit, line_chars=None, shown_chars=shown, found=found, until=until)
    if found.stop is None and until is not None and until():  # the walk ended for it
        found.stop = "cancelled"
    return found


# 'İ' (U+0130) folds to 'i' and a combining dot; ignoring case it is found as 'i', as re finds it
_DOTTED_I = {0x130: "i"}


def fold(text: str) -> str:
    """``text`` as a literal search ignoring case compares it: case-folded, 'İ' as 'i'."""
    return text.translate(_DOTTED_I).casefold()


def _literal(query: str, ignore_case: bool) -> Callable[[str], Span | None]:
    """Where ``query`` first occurs in a line (ignoring case: in the case-folded line, its
    span taken back to the line's own characters)."""
    if not ignore_case:
        return lambda line: None if (at := line.find(query)) < 0 else (at, at + len(query))
    folded = fold(query)

    def find(line: str) -> Span | None:
        text = fold(line)
        if (at := text.find(folded)) < 0:
            return None
        if len(text) == len(line):  # no character folded to more than one
            return at, at + len(folded)
        return _unfolded(line, at, at + len(folded))

    return find


def _unfolded(line: str, start: int, end: int) -> Span:
    """The span of ``line`` whose case folding covers ``start:end`` of ``fold(line)``
    (which is longer where a character folds to several, 'ß' to 'ss'): each character folds on
    its own, so the folded length of a prefix grows with it, and a binary search finds it."""

    def folded(n: int) -> int:
        return len(fold(line[:n]))

    positions = range(len(line) + 1)
    first = bisect_right(positions, start, hi=min(start, len(line)) + 1, key=folded) - 1
    return first, bisect_left(positions, end, lo=first, hi=min(end, len(line)) + 1, key=folded)


def regex_search(
    query: str,
    ignore_case: bool,
    files: Iterable[tuple[str, str]],
    limit: int,
    *,
    done: threading.Event | None = None,
    cancelled: threading.Event | None = None,
) -> Found:
    """The lines ``query`` (Python's regex syntax) matches, found by a child process that is
    given ``files`` as they come (it stops taking them once it has found enough, or its time is
    over; then ``done`` is set, for the walk that makes ``files`` to end); a regex that does not
    compile, or takes too long on one line, is refused (ToolError)."""
    request = {
        "pattern": query,
        "ignore_case": ignore_case,
        "limit": limit,
        "line_chars": SEARCH_LINE_CHARS,
        "shown_chars": MATCH_SHOWN_CHARS,
        "line_s": LINE_TIMEOUT_S,
        "total_s": REGEX_SEARCH_S,
        "memory": CHILD_MEMORY,
    }
    answer = _run_child(request, files, done or threading.Event(), cancelled)
    try:
        found = Found(**json.loads(answer))
    except (ValueError, TypeError) as exc:  # no answer, or not one: the child did not run
        raise ToolError(
            f"the regex search gave no answer ({type(exc).__name__}: {exc}); pass regex=false"
        ) from None
    _refuse(query, found)
    return found


def _run_child(
    request: dict[str, object],
    files: Iterable[tuple[str, str]],
    done: threading.Event,
    cancelled: threading.Event | None,
) -> bytes:
    """The child's answer; it is killed if it has not answered within its time and a grace, or
    as soon as ``cancelled`` is set (the activation was interrupted)."""
    if not sys.executable:
        raise ToolError("no Python interpreter to run a regex search; pass regex=false")
    with tempfile.TemporaryFile() as errors:  # a file: a long traceback never blocks the child
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_CHILD)],
                env=without_secrets(),  # no provider secret reaches it
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        except OSError as exc:
            raise ToolError(
                f"cannot start the regex search ({exc.strerror or exc}); pass regex=false"
            ) from None
        assert child.stdin is not None and child.stdout is not None  # both are pipes
        feeding = _Feeder(child.stdin, request, files)
        answered = threading.Event()
        killer = threading.Thread(
            target=_kill_unless_answered,
            args=(child, answered, cancelled),
            name="morphz-search-guard",
            daemon=True,
        )
        killer.start()
        try:
            answer = child.stdout.read()
            child.wait()
        finally:
            answered.set()
            child.kill()  # (ended already, unless this thread was interrupted)
            child.wait()
            child.stdout.close()
            done.set()
            feeding.finish()
        errors.seek(0)
        _check_exit(child.returncode, errors.read().decode("utf-8", "replace"))
    return answer


def _kill_unless_answered(
    child: subprocess.Popen[bytes], answered: threading.Event, cancelled: threading.Event | None
) -> None:
    """Kill ``child`` when its time and a grace are over, or at once when ``cancelled`` is set,
    unless it answered first."""
    deadline = time.monotonic() + REGEX_SEARCH_S + _GRACE_S
    while not answered.wait(_WATCH_S):
        if (cancelled is not None and cancelled.is_set()) or time.monotonic() >= deadline:
            child.kill()
            return


class _Feeder:
    """Writes the request, then the files one JSON line each, to the child's stdin in a thread
    of its own, walking the workspace as the child asks for more."""

    def __init__(
        self, pipe: IO[bytes], request: dict[str, object], files: Iterable[tuple[str, str]]
    ) -> None:
        self.pipe = pipe
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._feed, args=(request, files), name="morphz-search-feed", daemon=True
        )
        self.thread.start()

    def _feed(self, request: dict[str, object], files: Iterable[tuple[str, str]]) -> None:
        try:
            self._send(request)
            for rel, path in files:
                self._send([rel, path])
        except BrokenPipeError:  # the child stopped reading: it has enough, or its time is over
            return
        except BaseException as exc:  # the walk failed: said once the child has answered
            self.error = exc
        finally:  # no more files: the child answers with what it found
            with contextlib.suppress(BrokenPipeError):
                self.pipe.close()

    def _send(self, item: object) -> None:
        self.pipe.write(json.dumps(item).encode("ascii") + b"\n")
        self.pipe.flush()  # now: the walk may take long to find the next file

    def finish(self) -> None:
        """Wait for the thread (the child has ended: its writes fail at once) and raise what
        the walk raised."""
        self.thread.join()
        with contextlib.suppress(BrokenPipeError):
            self.pipe.close()
        if self.error is not None:
            raise self.error


def _check_exit(code: int, errors: str) -> None:
    if code == 0:
        return
    if code == -signal.SIGKILL:
        raise ToolError(
            f"the regex search did not answer within {REGEX_SEARCH_S + _GRACE_S:g} s and was "
            "stopped; narrow path or glob, or simplify the regex"
        )
    said = (errors.strip().splitlines() or ["no message"])[-1]
    raise ToolError(
        f"the regex search failed (exit status {code}: {said[:300]}); narrow path or glob, "
        "simplify the regex, or pass regex=false"
    )


def _refuse(query: str, found: Found) -> None:
    """A ToolError for a search the child could not do."""
    shown = f"{query!r:.120}"
    if found.error is not None:
        raise ToolError(f"bad regex {shown}: {found.error}; fix it, or pass regex=false")
    if found.slow is not None:
        rel, number = found.slow
        where = f"on one line ({rel}:{number})" if number else "to compile"
        raise ToolError(
            f"the regex {shown} took over {LINE_TIMEOUT_S:g} s {where}: it backtracks too much "
            f"(nested repeats such as (a+)+ or (a|aa)* can take for ever); {_ADVICE}"
        )
    if found.stop == "memory":
        raise ToolError(f"the regex {shown} needs more than {CHILD_MEMORY >> 30} GiB; {_ADVICE}")
    if found.unreadable is not None:
        rel, reason = found.unreadable
        raise ToolError(f"search_files {rel!r}: {reason}")


def notes(found: Found) -> list[str]:
    """What a search's result says about lines not searched whole and time run out."""
    out = []
    if found.lines_cut:  # (a regex's only: a literal searches every line whole)
        out.append(
            f"[line(s) longer than {SEARCH_LINE_CHARS} characters were searched by the regex in "
            f"their first {SEARCH_LINE_CHARS} only: {found.lines_cut}; regex=false searches "
            "a line whole]"
        )
    if found.stop == "cancelled":
        out.append("[the search was cancelled: these are the matches found so far]")
    if found.stop == "time":
        out.append(
            f"[the regex search stopped after {REGEX_SEARCH_S:g} s: these are the matches "
            "found so far; narrow path or glob, or simplify the regex]"
        )
    return out


__all__ = [
    "LINE_TIMEOUT_S",
    "MATCH_SHOWN_CHARS",
    "REGEX_SEARCH_S",
    "SEARCH_LINE_CHARS",
    "literal_search",
    "notes",
    "regex_search",
]
