"""chat's slash commands: /status, /mind [all], /encoding, /requests, /recall QUERY, /help and
/quit, each answered from the store and the engine of the chat, never sent to the agent."""

from __future__ import annotations

import shlex
from dataclasses import replace

import morphz
from morphz.interfaces import render, tables
from morphz.interfaces.output import out
from morphz.recall.tokenize import query_terms
from morphz.runtime.engine import Engine
from morphz.runtime.report import pick_activations, request_stats, total


def run(engine: Engine, session: str, line: str) -> bool:
    """One chat command; False for /quit. /encoding shows what the agent's next request in this
    session would carry, compiled as the engine compiles it."""
    ctx = engine.ctx
    command, _, rest = line.partition(" ")
    if command == "/quit":
        return False
    if command == "/status":  # the pressure of the request the agent would be sent now
        pressure = engine.encoding(session).pressure.to_dict()
        out(render.status(replace(ctx.status(), pressure=pressure)))
    elif command == "/mind" and rest.strip() in ("", "all"):  # /mind all: retired ones too
        every = rest.strip() == "all"
        out(render.mind(ctx.mind(all_observations=every), all_observations=every, for_all=MIND_ALL))
    elif command == "/encoding":
        out(engine.encoding(session).text)
    elif command == "/recall" and rest.strip():
        out(_recall(ctx, rest.strip()))
    elif command == "/requests":  # what this chat's activations sent, prefix reuse included
        stats = request_stats(ctx, pick_activations(ctx, last=5))
        out(render.request_stats(stats, total(stats)))
    elif command in ("/help", "/recall", "/mind"):
        out(COMMANDS)
    else:
        out(f"unknown command {tables.visible(command)}: the line was not sent to the agent")
        out(COMMANDS)
    return True


MIND_ALL = "/mind all for all"


def _recall(ctx: morphz.Context, query: str) -> str:
    """/recall QUERY: the search's first page; /recall takes no cursor and no time range, so
    what needs them is said as the `morphz context recall search` command that has them, on
    this chat's store, its options before ``--`` (a query may begin with a dash)."""
    store = getattr(ctx.db.store, "path", None)  # a SQLite store's file
    where = [] if store is None else ["--db", str(store)]
    search = shlex.join(["morphz", "context", "recall", "search", *where])
    if not query_terms(query):  # "-- CTX ''": given one argument, it would be the QUERY
        in_range = shlex.join(["--", ctx.id, ""])
        raise morphz.InputError(
            f"nothing searchable in {query!r} (only very common words, symbols or emoji): add "
            f"specific words; `{search} --since T --until T {in_range}` searches a time range"
        )
    arguments = shlex.join(["--", ctx.id, query])
    return render.search_page(ctx.recall.search(query), command=(search, arguments))


COMMANDS = (
    "commands: /status, /mind [all], /encoding, /requests, /recall QUERY, /quit, /help "
    "(a line that begins with // is sent to the agent without its first /)"
)
