"""Arguments that are not valid UTF-8: a terminal or script in another encoding gives Python
bytes it keeps as lone surrogates, which no store or model takes. Every command checks its text
arguments before it runs and refuses the first such one (InputError, exit status 1) by the
name the user gave it; file paths are exempt (a file name is any bytes on Linux)."""

from __future__ import annotations

from typing import Any

import click

from morphz.errors import InputError
from morphz.interfaces import advice
from morphz.txlang.sexpr import unicode_problem

# parameters that are file paths: --db, import's FILE. (A model spec, scripted:PATH included,
# is named to the model in every request: it must be text.)
PATHS = frozenset({"db_path", "import args"})


class CheckedCommand(click.Command):
    """A command whose text arguments are checked to be valid UTF-8 before it runs, and
    what it names noted (:func:`morphz.interfaces.advice.remember`)."""

    def invoke(self, ctx: click.Context) -> Any:
        for param in self.params:
            if param.name in PATHS or f"{self.name} {param.name}" in PATHS:
                continue
            value = ctx.params.get(param.name or "")
            for text in value if isinstance(value, tuple) else (value,):
                if isinstance(text, str) and unicode_problem(text) is not None:
                    raise InputError(_not_utf8(param.get_error_hint(ctx), text))
        advice.remember(ctx)  # its CTX and store, for the commands its advice names
        return super().invoke(ctx)


class CheckedGroup(click.Group):
    """A group whose commands (and groups) check their text arguments."""

    command_class = CheckedCommand
    group_class = type  # its groups are of its own class


def _not_utf8(name: str, text: str) -> str:
    given = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return (
        f"{name} is not valid UTF-8 ({given}): check the terminal's or the script's encoding "
        "(the locale) and give it again"
    )
