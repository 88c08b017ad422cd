"""The commands a command's advice names, made to run on that command's own context and store.

The library names the context in the follow-up commands it advises (`morphz context recover
CTX`, `morphz context audit CTX`), but it cannot know the command line's ``--db``: run as
written, such a command reads the default store (or ``MORPHZ_DB``), another store. Nor can it
know that an id beginning with ``-`` (a context made before such ids were refused) is read as
an option unless it comes after ``--``. The command line fixes both here, in one place: each
command notes what it runs on as it starts (:func:`remember`), and :func:`on_this_store`
rewrites each ``morphz context`` command quoted in backticks in a text (an error's message, an
activation's reason, the audit's and the recall index's reports as text): ``--db PATH`` added
when it names no store, and the running command's CTX put after ``--`` when it begins with
``-``. The JSON of a result stays the library's ``to_dict()``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import click
from click.core import ParameterSource

from morphz.contextdb import DEFAULT_CONTEXT

KEY = "morphz.running"
# Parameters that hold CTX followed by another argument ([CTX] PROMPT, [CTX] FILE): CTX is
# given when there are two
_CTX_FIRST = ("context_and_prompt", "args")
# a command quoted in backticks: `morphz context SUBCOMMAND ...`
_ADVISED = re.compile(r"`(morphz context ([a-z-]+)(?: [^`\n]*)?)`")


@dataclass(frozen=True, slots=True)
class Running:
    """What the running command names: its context (None when it takes none) and its store as
    arguments of another command (``--db PATH``, none for the default store)."""

    context: str | None = None
    store: tuple[str, ...] = ()

    def arguments(self) -> list[str]:
        """CTX and ``--db PATH`` as the arguments of another ``morphz context`` command that
        takes CTX alone (CTX after ``--`` when it begins with ``-``)."""
        if self.context is None:
            return list(self.store)
        if self.context.startswith("-"):
            return [*self.store, "--", self.context]
        return [self.context, *self.store]


def remember(ctx: click.Context) -> None:
    """Note what the command of ``ctx``, about to run, names (kept for the whole command
    line, so that its errors' advice can name it once the command has ended)."""
    params = ctx.params
    named = params["context_id"] if isinstance(params.get("context_id"), str) else None
    for key in _CTX_FIRST:
        given = params.get(key)
        if isinstance(given, tuple):
            named = given[0] if len(given) == 2 else DEFAULT_CONTEXT
    db = params.get("db_path")
    given = ctx.get_parameter_source("db_path") not in (None, ParameterSource.DEFAULT)
    ctx.meta[KEY] = Running(named, ("--db", db) if given and isinstance(db, str) else ())


def running() -> Running:
    """What the running command names; nothing outside a command."""
    ctx = click.get_current_context(silent=True)
    found = None if ctx is None else ctx.meta.get(KEY)
    return found if isinstance(found, Running) else Running()


def on_this_store(text: str) -> str:
    """``text`` with each `morphz context ...` command it quotes (a subcommand of ``morphz
    context`` only) made to run where the running command ran: the command's ``--db PATH``
    added when it names no store (before its ``--``, after which every argument is
    positional), and the command's own CTX, when it begins with ``-``, put after ``--`` in a
    command that takes CTX alone."""
    now = running()
    dashed = now.context if now.context is not None and now.context.startswith("-") else None
    if not now.store and dashed is None:
        return text
    commands = _context_commands()

    def placed(match: re.Match[str]) -> str:
        command = commands.get(match.group(2))
        if command is None:
            return match.group(0)
        options, end, positional = match.group(1).partition(" -- ")
        words = options.split(" ")
        leaf, depth = _leaf(command, words)
        if dashed is not None and not end and _takes_ctx_alone(leaf):
            ctx_words = [w for w in words[depth:] if w in (dashed, shlex.quote(dashed))]
            if ctx_words:
                words.remove(ctx_words[0])
                end, positional = " -- ", ctx_words[0]
        if "--db" not in words:
            words += [shlex.quote(word) for word in now.store]
        return f"`{' '.join(words)}{end}{positional}`"

    return _ADVISED.sub(placed, text)


def _context_commands() -> dict[str, click.Command]:
    """``morphz context``'s subcommands by name, read from the running command line."""
    ctx = click.get_current_context(silent=True)
    root = None if ctx is None else ctx.find_root().command
    group = root.commands.get("context") if isinstance(root, click.Group) else None
    return dict(group.commands) if isinstance(group, click.Group) else {}


def _leaf(command: click.Command, words: list[str]) -> tuple[click.Command | None, int]:
    """The command ``words`` (``morphz context SUB [SUBSUB] ...``) run, and how many words name
    it; None for a group's subcommand it does not have."""
    if not isinstance(command, click.Group):
        return command, 3
    sub = command.commands.get(words[3]) if len(words) > 3 else None
    return sub, 4


def _takes_ctx_alone(command: click.Command | None) -> bool:
    """Whether ``command``'s one positional argument is CTX (so CTX may go after ``--``)."""
    if command is None:
        return False
    positional = [p.name for p in command.params if isinstance(p, click.Argument)]
    return positional == ["context_id"]
