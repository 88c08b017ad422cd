"""How an approval prompt shows a tool call: every argument whole, so that the person approves
exactly what runs, and readable on a terminal.

Values are shown as ``repr`` shows them (control and format characters escaped, so a value
cannot redraw the prompt or show itself reordered), with two additions: a long run of one white
space character is shown counted, as a Python expression (``'rm -rf ~;' + ' ' * 10000 + 'ls'``),
so that blanks cannot scroll the head of a command off the screen; and a path argument that
resolves elsewhere through a symlink names the file it reaches (``path='docs/notes.md'
(resolves to '.git/hooks/pre-commit')``), the one a write changes.

Where no one is asked (``exec``), :func:`denied_note` says which calls ``ask_default`` denied
and which settings allow them.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from morphz.events import Event

LONG_RUN = 40  # more blank characters in a row are shown counted (indentation stays)
PATH_ARGUMENTS = ("path", "cwd")  # the arguments the workspace tools resolve in the workspace
# white space, and the printable characters that draw as nothing (repr shows them as they are):
# Hangul fillers, the blank Braille pattern
_BLANK = r"[\s\u115f\u1160\u2800\u3164\uffa0]"
_RUN = re.compile(rf"({_BLANK})\1{{{LONG_RUN},}}")


def shown_call(args: dict[str, Any], workspace: Path | None = None) -> str:
    """``args`` as the prompt shows them: ``name=value, ...``; with ``workspace`` (resolved),
    each path argument that resolves elsewhere is followed by where it resolves to."""
    return ", ".join(
        f"{argument_name(k)}={shown_value(v)}{_resolved(k, v, workspace)}" for k, v in args.items()
    )


def argument_name(name: str) -> str:
    """An argument's name as the approval prompt shows it: as written when it is a plain name,
    else quoted with its control characters escaped (repr), like the values, so that a name
    the model chose cannot redraw the prompt."""
    return name if name.isidentifier() and name.isprintable() else repr(name)


def shown_value(value: Any) -> str:
    """``repr(value)``; for a text with long runs of one blank character (white space, or one
    that draws as nothing), its pieces and those runs counted, joined by ``+`` (the expression
    equals the text)."""
    if not isinstance(value, str) or _RUN.search(value) is None:
        return repr(value)
    parts, at = [], 0
    for run in _RUN.finditer(value):
        if run.start() > at:
            parts.append(repr(value[at : run.start()]))
        parts.append(f"{run.group(1)!r} * {len(run.group())}")
        at = run.end()
    if at < len(value):
        parts.append(repr(value[at:]))
    return " + ".join(parts)


def _resolved(name: str, value: Any, workspace: Path | None) -> str:
    if workspace is None or name not in PATH_ARGUMENTS or not isinstance(value, str):
        return ""
    given = workspace / value
    try:
        real = given.resolve()
    except (OSError, RuntimeError, ValueError):  # a loop, a NUL: the tool refuses it itself
        return ""
    if real == Path(os.path.normpath(given)):
        return ""
    where = real.relative_to(workspace).as_posix() if real.is_relative_to(workspace) else str(real)
    return f" (resolves to {where!r})"


def denied_note(events: Iterable[Event], sources: Mapping[str, Path], user: Path) -> str | None:
    """What a run with no one to ask (``exec``) says on stderr when ``ask_default`` denied calls
    of tools whose policy is "ask" (``events``: the run's; a denied ``approval_result`` each):
    which tools, how many calls, and how to allow them; None when it denied none. ``sources``:
    the configuration file each policy that applies comes from; one other than the user's own
    file ``user`` (a project's, which wins) is where to change it."""
    denied = Counter(
        str((e.meta or {}).get("tool"))
        for e in events
        if e.kind == "approval_result" and (e.meta or {}).get("approved") is False
    )
    if not denied:
        return None
    tools = ", ".join(name if n == 1 else f"{name} ({n} calls)" for name, n in denied.items())
    said = 'morphz: ask_default denied calls of tools whose policy is "ask" (exec asks no one): '
    named = [*denied, "ask_default"]  # a project's ask_default = "deny" denies them too
    project = sorted({str(sources[t]) for t in named if t in sources and sources[t] != user})
    if project:  # a project's file makes them ask: the user's own allow cannot win over it
        return (
            f"{said}{tools}. {' and '.join(project)} makes them ask (a project's file wins over "
            f"yours): change it there if you trust it, or run `morphz chat`, which asks you"
        )
    example = next(iter(denied))
    return (
        f'{said}{tools}. To allow them, set `{example} = "allow"` under `[policies]` (or '
        f'`ask_default = "allow"` for every "ask" tool) in {user}, or run `morphz chat`, which '
        "asks you"
    )


__all__ = ["LONG_RUN", "argument_name", "denied_note", "shown_call", "shown_value"]
