"""The encoding and capacity commands of the ``morphz`` command line: ``context encoding`` and
``context budget``. Same conventions as :mod:`morphz.interfaces.cli`; registered onto its
``context`` group when imported. Reference: docs/cli.md.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import click

from morphz.capacity import Budget
from morphz.encoding.blocks import encoding_layout
from morphz.encoding.tokens import exact_counter
from morphz.interfaces import render
from morphz.interfaces.cli import (
    context_argument,
    context_group,
    db_option,
    emit,
    format_option,
    open_context,
    session_option,
)


@context_group.command("encoding")
@context_argument
@session_option
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Token budget for this compile (instead of the context's configured one).",
)
@click.option(
    "--model",
    default="none",
    show_default=True,
    help="Model spec the request is for (openai:NAME, anthropic:NAME): named in the encoding, "
    "and tokens are counted for it as the runtime counts them (exact, calibrated, estimated).",
)
@db_option
@format_option
def encoding_command(
    *, context_id: str, session: str, budget: int | None, model: str, db_path: str, fmt: str
) -> None:
    """Print the Context Encoding a model request on CTX would see.

    Text: the encoding itself. JSON: its text, each region's byte range and token estimate, the
    context pressure, the session working set, and where a request sending it is cut into
    blocks and marked for a provider's prompt cache."""
    local_time = datetime.now().astimezone().isoformat(timespec="seconds")
    with open_context(db_path, context_id) as ctx:
        limits = ctx.budget()
        if budget is not None:
            limits = replace(limits, configured=budget)
        encoding = ctx.encode(
            session=session,
            budget=limits,
            model=model,
            local_time=local_time,
            calibration=ctx.calibration(model),
            counter=exact_counter(model),
        )
    layout = encoding_layout(encoding).to_dict(encoding.text)
    emit(fmt, encoding.to_dict() | {"cache": layout}, lambda: encoding.text.rstrip("\n"))


@context_group.command("budget")
@context_argument
@click.option("--window", type=click.IntRange(min=1), metavar="N", help="Model window (tokens).")
@click.option(
    "--output-reserve", type=click.IntRange(min=0), metavar="N", help="Tokens kept for the reply."
)
@click.option(
    "--limit", type=click.IntRange(min=1), metavar="N", help="This context's own token budget."
)
@click.option(
    "--reserve", type=click.IntRange(min=0), metavar="N", help="Room kept for maintenance."
)
@db_option
@format_option
def budget_command(
    *,
    context_id: str,
    window: int | None,
    output_reserve: int | None,
    limit: int | None,
    reserve: int | None,
    db_path: str,
    fmt: str,
) -> None:
    """Show CTX's token budget; with options, change it first.

    hard = min(limit, window - output reserve); critical from hard - reserve."""
    with open_context(db_path, context_id) as ctx:
        current = ctx.budget()
        changes = {
            "window": window,
            "output_reserve": output_reserve,
            "configured": limit,
            "reserve": reserve,
        }
        given = {k: v for k, v in changes.items() if v is not None}
        if given:
            current = Budget.from_dict({**current.to_dict(), **given})
            ctx.set_budget(current)
        pressure = ctx.status().pressure
    emit(
        fmt,
        {"budget": current.to_dict(), "pressure": pressure},
        lambda: render.budget(current, pressure),
    )
