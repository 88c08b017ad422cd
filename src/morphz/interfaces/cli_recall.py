"""The recall commands of the ``morphz`` command line: ``context recall search|read|frame``,
``context recall-index inspect|rebuild|clean`` and ``context import``.

They follow the conventions of :mod:`morphz.interfaces.cli` (``--db``/``MORPHZ_DB``, an optional
``CTX``, ``--format json|text``, errors mapped once by ``MorphzGroup``) and are registered onto
its ``context`` group when this module is imported (``cli.py`` imports it at its end). These are
operator reads: they never call ``Recall.deliver``, so searching, reading and traversing change
nothing in the store. Reference: docs/cli.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, cast

import click

from morphz import DEFAULT_CONTEXT
from morphz.errors import HistoryImportError
from morphz.interfaces import advice, render, stopping
from morphz.interfaces.cli import (
    InputFile,
    context_argument,
    context_group,
    db_option,
    format_option,
    open_context,
    session_option,
    terminal_progress,
)
from morphz.interfaces.output import emit
from morphz.recall.read import DEFAULT_READ_CHARS
from morphz.recall.search import LIFECYCLES, SEARCH_KINDS
from morphz.recall.traverse import Direction

DIRECTIONS = ("ancestors", "descendants", "both")

ProgressFn = Callable[[int, int], None]


# ------------------------------------------------------------------ helpers


def _context_and(args: tuple[str, ...], name: str, *, required: bool) -> tuple[str, str | None]:
    """Split ``[CTX] NAME`` given as up to two positional arguments: one argument is NAME (in
    the default context), two are CTX and NAME."""
    if len(args) > 2:
        raise click.UsageError(f"expected [CTX] {name}, got {len(args)} arguments: quote {name}")
    if len(args) == 2:
        return args[0], args[1]
    if len(args) == 1:
        return DEFAULT_CONTEXT, args[0]
    if required:
        raise click.UsageError(f"missing argument {name}")
    return DEFAULT_CONTEXT, None


class Utf8Lines:
    """The lines of a binary file read as UTF-8, so that a line that is not valid UTF-8 is
    refused as a :class:`HistoryImportError` naming it (a leading byte-order mark is dropped).
    Lines are numbered as the import numbers them: every line counts, blank or not."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw

    def __iter__(self) -> Iterator[str]:
        for number, data in enumerate(self.raw, start=1):
            try:
                yield data.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise HistoryImportError(
                    f"line {number}: not valid UTF-8 (byte {exc.start + 1} of the line): "
                    "save the file as UTF-8",
                    line=number,
                ) from exc


def open_history(name: str) -> IO[str]:
    """FILE of ``context import`` (``-``: stdin), opened for :meth:`Context.import_history`;
    a file that cannot be opened is a usage error (exit status 2)."""
    ctx = click.get_current_context()
    try:
        raw = InputFile("rb", lazy=False).convert(name, None, ctx)
    except click.BadParameter as exc:
        exc.param_hint = "'FILE'"
        raise
    return cast(IO[str], Utf8Lines(raw))  # the import only iterates its lines


# ------------------------------------------------------------------ recall


@context_group.group("recall")
def recall_group() -> None:
    """Search, read and traverse a context's history and mind (changes nothing)."""


@recall_group.command("search")
@click.argument("args", nargs=-1, metavar="[CTX] [QUERY]")
@click.option("--since", metavar="ISO8601", help="Only from this time on (inclusive; with offset).")
@click.option("--until", metavar="ISO8601", help="Only before this time (exclusive; with offset).")
@click.option(
    "--limit", type=int, default=10, show_default=True, metavar="N", help="Hits per page (1-100)."
)
@click.option("--cursor", metavar="C", help="The next_cursor of the previous page of this search.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(SEARCH_KINDS),
    help="Only these kinds (repeatable): a group (observations, frames, replies, transactions) "
    "or an event kind.",
)
@click.option(
    "--lifecycle",
    "lifecycles",
    multiple=True,
    type=click.Choice(sorted(LIFECYCLES)),
    help="Only content in this lifecycle state (repeatable).",
)
@db_option
@format_option
def search_command(
    *,
    args: tuple[str, ...],
    since: str | None,
    until: str | None,
    limit: int,
    cursor: str | None,
    kinds: tuple[str, ...],
    lifecycles: tuple[str, ...],
    db_path: str,
    fmt: str,
) -> None:
    """Search CTX by words (QUERY), by time range (--since/--until), or both.

    One positional argument is the QUERY (in context-default); give two for CTX and QUERY
    (QUERY may be "" to search another context by time alone). Quote a query of several
    words. A query is ranked by relevance; a time range alone lists hits in time order. For the
    next page, repeat the same search with --cursor set to the printed next cursor."""
    context_id, query = _context_and(args, "QUERY", required=False)
    with open_context(db_path, context_id) as ctx:
        page = ctx.recall.search(
            query or None,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
            kinds=list(kinds) or None,
            lifecycle=list(lifecycles) or None,
        )
    emit(fmt, page.to_dict(), lambda: render.search_page(page))


@recall_group.command("read")
@click.argument("args", nargs=-1, metavar="[CTX] REF")
@click.option(
    "--offset",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="First character of the page.",
)
@click.option(
    "--limit",
    type=int,
    default=DEFAULT_READ_CHARS,
    show_default=True,
    metavar="N",
    help="Characters per page (1-100000).",
)
@db_option
@format_option
def read_command(*, args: tuple[str, ...], offset: int, limit: int, db_path: str, fmt: str) -> None:
    """A page of one event's full content, by REF (@e42) or full identity (CTX:@e42).

    One positional argument is the REF (in context-default); give two for CTX and REF. Pass
    the printed next_offset as --offset for the next page."""
    context_id, ref = _context_and(args, "REF", required=True)
    assert ref is not None
    with open_context(db_path, context_id) as ctx:
        page = ctx.recall.read(ref, offset=offset, limit=limit)
    emit(fmt, page.to_dict(), lambda: render.read_page(page))


@recall_group.command("frame")
@click.argument("args", nargs=-1, metavar="[CTX] FRAME_ID")
@click.option(
    "--depth", type=int, default=2, show_default=True, metavar="N", help="Links to follow (1-4)."
)
@click.option(
    "--direction",
    type=click.Choice(DIRECTIONS),
    default=None,
    help="ancestors: what the frame derives from; descendants: what cites it; both. "
    "[default: ancestors from a frame, descendants from an event]",
)
@click.option("--include-events", is_flag=True, help="Also visit source events (with previews).")
@click.option("--include-bodies", is_flag=True, help="Include the frames' bodies.")
@click.option(
    "--budget", type=int, default=50, show_default=True, metavar="N", help="Nodes per page."
)
@click.option("--cursor", metavar="C", help="The next_cursor of the previous page.")
@db_option
@format_option
def frame_command(
    *,
    args: tuple[str, ...],
    depth: int,
    direction: str | None,
    include_events: bool,
    include_bodies: bool,
    budget: int,
    cursor: str | None,
    db_path: str,
    fmt: str,
) -> None:
    """Follow a frame's source and relation links, breadth-first, from FRAME_ID.

    One positional argument is the FRAME_ID (in context-default); give two for CTX and
    FRAME_ID. FRAME_ID may be an event ref (@e12), walked descendants (the default there) or
    both: the frames citing it, and on from them. A cursor is valid only while the mind stays at the
    version the traversal started from."""
    context_id, frame_id = _context_and(args, "FRAME_ID", required=True)
    assert frame_id is not None
    with open_context(db_path, context_id) as ctx:
        page = ctx.recall.frame(
            frame_id,
            depth=depth,
            direction=cast(Direction | None, direction),
            include_events=include_events,
            include_bodies=include_bodies,
            budget=budget,
            cursor=cursor,
        )
    emit(fmt, page.to_dict(), lambda: render.traversal(page))


# ------------------------------------------------------------------ recall-index


@context_group.group("recall-index")
def recall_index_group() -> None:
    """Inspect, rebuild or clean the recall index (derived data; events and mind are never
    touched)."""


@recall_index_group.command("inspect")
@context_argument
@db_option
@format_option
def index_inspect_command(*, context_id: str, db_path: str, fmt: str) -> None:
    """Documents by kind, the last indexed event, and whether the index of CTX is current."""
    with open_context(db_path, context_id) as ctx:
        report = ctx.recall_index.inspect()
    emit(fmt, report.to_dict(), lambda: advice.on_this_store(render.index_report(report)))


@recall_index_group.command("clean")
@context_argument
@db_option
@format_option
@click.option(
    "--force",
    is_flag=True,
    help="Also drop the tables of rebuilds whose process cannot be told alive (another host "
    "name, e.g. a container that was recreated; /proc hidden): a rebuild still filling one fails.",
)
def index_clean_command(*, context_id: str, db_path: str, fmt: str, force: bool) -> None:
    """Drop the tables CTX's recall rebuilds left when their process died, without rebuilding,
    and forget the records of such tables dropped by hand.

    A table whose rebuild still runs is kept (and listed); so is one whose process cannot be
    told alive from here (another host, /proc hidden), unless --force."""
    with open_context(db_path, context_id) as ctx:
        report = ctx.recall_index.clean(force=force)
    for table in report.forced:  # on stderr, so JSON output stays clean
        click.echo(f"morphz: {render.forced_warning(table)}", err=True)
    emit(fmt, report.to_dict(), lambda: advice.on_this_store(render.clean_report(report)))


@recall_index_group.command("rebuild")
@context_argument
@db_option
@format_option
def index_rebuild_command(*, context_id: str, db_path: str, fmt: str) -> None:
    """Regenerate the recall index of CTX from its events and mind.

    Progress goes to stderr when it is a terminal. Safe to interrupt and run again: the live
    index serves searches until the new one is swapped in."""
    try:  # SIGTERM, SIGHUP: the table it was building is dropped, as for Ctrl-C
        with open_context(db_path, context_id) as ctx, stopping.stopped_like_ctrl_c():
            progress = terminal_progress("rebuild", "events indexed")
            report = ctx.recall_index.rebuild(progress=progress)
    except BaseException as exc:  # Ctrl-C too: a table the cleanup could not drop is said
        for note in getattr(exc, "__notes__", ()):
            click.echo(f"morphz: {advice.on_this_store(note)}", err=True)
        raise
    emit(
        fmt,
        report.to_dict(),
        lambda: (
            f"rebuilt the recall index of {report.context}\n"
            + advice.on_this_store(render.index_report(report))
        ),
    )


# ------------------------------------------------------------------ import


@context_group.command("import")
@click.argument("args", nargs=-1, metavar="[CTX] FILE")
@session_option
@db_option
@format_option
def import_command(*, args: tuple[str, ...], session: str, db_path: str, fmt: str) -> None:
    """Import a JSON Lines history into CTX, one observation per line (FILE; - reads stdin).

    \b
    Each line is a JSON object:
    {"kind": "user_message", "text": "...", "time": "2023-05-08T13:56:00+00:00", "meta": {...}}

    kind defaults to user_message; time (with a UTC offset) and meta are optional. All lines or
    none: a bad line exits with status 1, names the line and imports nothing. One positional
    argument is the FILE (into context-default); give two for CTX and FILE."""
    context_id, name = _context_and(args, "FILE", required=True)
    assert name is not None
    source = open_history(name)
    with open_context(db_path, context_id) as ctx:
        report = ctx.import_history(
            source,
            session=session,
            progress=terminal_progress("import", "observations written"),
        )
    emit(fmt, report.to_dict(), lambda: render.import_report(report))
