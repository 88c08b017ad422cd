"""The encoding and capacity commands of the ``morphz`` command line: ``context encoding``,
``context budget``, ``context view`` and ``context requests``. Same conventions as
:mod:`morphz.interfaces.cli`; registered onto its ``context`` group when imported. Reference:
docs/cli.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

import morphz
from morphz import DEFAULT_SESSION
from morphz.capacity import CONFIG_NAMES, Budget, budget_over, resume_below
from morphz.encoding.blocks import encoding_layout
from morphz.encoding.tokens import exact_counter, figure, part_tokens
from morphz.interfaces import render
from morphz.interfaces.cli import (
    context_argument,
    context_group,
    db_option,
    format_option,
    open_context,
)
from morphz.interfaces.output import emit
from morphz.runtime.config import Settings, load, model_name
from morphz.runtime.floor import empty_request, request_options, store_folder
from morphz.runtime.report import pick_activations, request_stats, total


def _configured_model(settings: Settings) -> str:
    return "none" if settings.model is None else model_name(settings.model)


def runtime_floor(
    settings: Settings, ctx: morphz.Context, *, maintenance: bool, profile: str | None = None
) -> int:
    """The figure of the smallest request `morphz exec` would send on ``ctx`` in work or in
    ``maintenance``, as the configuration sets it up (its model, profile, tools and token
    counting; the current folder as the workspace): morphz.runtime.floor. ``profile``: the
    configured profile's text when the caller read it already (None: read here)."""
    from morphz.interfaces.cli_agent import build_tools  # it imports cli, which imports us

    name = _configured_model(settings)
    options = request_options(
        build_tools(settings),
        maintenance=maintenance,
        model=name,
        profile=settings.profile_text() if profile is None else profile,
        bindings={"workspace": str(Path.cwd())},
        calibration=ctx.calibration(name),
        counter=exact_counter(name) if settings.exact_tokens else None,
    )
    return empty_request(options, store_folder(ctx))


def commit_limits(settings: Settings, ctx: morphz.Context) -> dict[str, Any]:
    """What ``ctx.commit``'s `budget` refusal measures with when the command line commits, as
    the agent's own commits under `morphz exec` would: the configuration's [budget] keys, the
    configured model's calibration, the floor of its maintenance request and the configured
    profile's tokens within it (named when the request is past critical without any frame and
    the profile is at least half of it)."""
    name = _configured_model(settings)
    calibration = ctx.calibration(name)
    profile = settings.profile_text()
    counter = exact_counter(name) if settings.exact_tokens else None
    return {
        "budget_keys": configured_keys(settings, ctx),
        "calibration": calibration,
        "request_floor": runtime_floor(settings, ctx, maintenance=True, profile=profile),
        "profile_tokens": None
        if profile is None
        else figure(part_tokens(profile, counter), calibration, counter).tokens,
    }


def configured_keys(
    settings: Settings, ctx: morphz.Context, budget: int | None = None
) -> dict[str, int]:
    """The configuration's [budget] keys (with ``budget``, given as --budget, for its limit),
    refused at once, named as they were given, when they make no budget over ``ctx``'s."""
    keys = settings.budget | ({} if budget is None else {"configured": budget})
    names = CONFIG_NAMES | ({} if budget is None else {"configured": "--budget"})
    budget_over(ctx.budget(), keys, names)
    return keys


@context_group.command("encoding")
@context_argument
@click.option(
    "--session",
    default=DEFAULT_SESSION,
    show_default=True,
    metavar="ID",
    help="The session the request is for: the kernel's current session, first in the session "
    "directory once it has events. Nothing is written.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Token limit for this compile: replaces the configured limit (the configuration's "
    "[budget] limit, else the context's own); the other [budget] keys still apply.",
)
@click.option(
    "--model",
    default=None,
    metavar="SPEC",
    help="Model spec the request is for (openai:NAME, anthropic:NAME, scripted:PATH; none: "
    "no model) [default: the configuration's model, as exec uses it, else none]: named in "
    "the encoding, and tokens are counted for it as the runtime counts them under the "
    "configuration (exact, calibrated, estimated).",
)
@db_option
@format_option
def encoding_command(
    *, context_id: str, session: str, budget: int | None, model: str | None, db_path: str, fmt: str
) -> None:
    """Print the Context Encoding a model request on CTX would see.

    Text: the encoding itself. JSON: its text, each region's byte range and tokens (counted as
    the total is: exact, calibrated or estimated), the context pressure, the session working
    set, and where a request sending it is cut into blocks and marked for a provider's prompt
    cache.

    The configuration (./morphz.toml, ~/.morphz/morphz.toml) applies as it does to exec and
    chat: its profile (the evaluation-profile region), its [budget] keys over the context's
    budget (--budget over its limit) and its tokenizer setting."""
    settings = load(Path.home(), Path.cwd(), os.environ)
    # a typo is refused as exec refuses it; named as the runtime names the model it makes; with
    # no --model, the configuration's: the figure the agent under exec and chat would see
    if model is None:
        name = _configured_model(settings)
    else:
        name = model if model == "none" else model_name(model)
    with open_context(db_path, context_id) as ctx:
        keys = configured_keys(settings, ctx, budget)
        encoding = ctx.encode(  # the budget: the keys over the one stored in its snapshot
            session=session,
            budget_keys=keys,
            model=name,
            local_time=ctx.db.local_time(),
            profile=settings.profile_text(),
            calibration=ctx.calibration(name),
            counter=exact_counter(name) if settings.exact_tokens else None,
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
    "--no-limit",
    is_flag=True,
    help="Remove this context's own budget (hard = window - output reserve again).",
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
    no_limit: bool,
    reserve: int | None,
    db_path: str,
    fmt: str,
) -> None:
    """Show CTX's token budget; with options, change it first.

    hard = min(limit, window - output reserve); critical from hard - reserve. Only the keys
    given change, in one write. When even a request on an empty context (the protocol, the
    kernel, the tool schemas of exec under the configuration) is at warning pressure under the
    new budget, a note on stderr says what that does to maintenance."""
    if no_limit and limit is not None:
        raise click.UsageError("give --limit N or --no-limit, not both")
    changes = _given(
        {"window": window, "output_reserve": output_reserve, "configured": limit,
         "reserve": reserve},
    ) | ({"configured": None} if no_limit else {})  # fmt: skip
    with open_context(db_path, context_id) as ctx:
        if changes:  # the floor first: a configuration it cannot read changes nothing
            settings = load(Path.home(), Path.cwd(), os.environ)
            floor = runtime_floor(settings, ctx, maintenance=False)
            _note_floor(ctx.update_budget(changes), floor)
        current = ctx.budget()
        pressure = ctx.status(local_time=ctx.db.local_time()).pressure
    emit(
        fmt,
        {"budget": current.to_dict(), "pressure": pressure},
        lambda: render.budget(current, pressure),
    )


@context_group.command("view")
@context_argument
@click.option(
    "--preview-threshold",
    type=int,
    metavar="N",
    help="Characters above which an observation shows only its head and tail.",
)
@click.option(
    "--session-hours",
    type=float,
    metavar="H",
    help="Other sessions last active longer ago are left out of the directory.",
)
@click.option(
    "--session-count", type=int, metavar="N", help="Sessions listed at most (current included)."
)
@click.option(
    "--session-tokens",
    type=int,
    metavar="N",
    help="The directory's token budget: sessions in full, then as metadata, then left out.",
)
@db_option
@format_option
def view_command(
    *,
    context_id: str,
    preview_threshold: int | None,
    session_hours: float | None,
    session_count: int | None,
    session_tokens: int | None,
    db_path: str,
    fmt: str,
) -> None:
    """Show how CTX is shown to a model; with options, change it first.

    The inbox preview threshold and the session directory's working set, used by every
    encoding of CTX (the runtime's, `context encoding`, `ctx.encode`) unless a compile
    overrides them."""
    changes = _given(
        {"preview_threshold": preview_threshold, "session_hours": session_hours,
         "session_count": session_count, "session_tokens": session_tokens},
    )  # fmt: skip
    with open_context(db_path, context_id) as ctx:  # only the settings given change, in one write
        current = ctx.update_view(changes) if changes else ctx.view()
    emit(fmt, {"view": current.to_dict()}, lambda: render.view(current))


def _note_floor(budget: Budget, floor: int) -> None:
    """Say on stderr (JSON output stays clean) when even a request on an empty context (its
    figure ``floor``) is at warning pressure under ``budget``: maintenance then ends below
    critical, or never starts."""
    below = resume_below(budget, floor)
    if below == budget.warning:
        return
    said = (
        f"morphz: under this budget even a request on an empty context (the protocol, the "
        f"kernel and exec's tool schemas) takes about {floor} tokens, at or above the warning "
        f"level ({budget.warning})"
    )
    if below is None:
        said += (
            f" and the critical level ({budget.critical}): maintenance could not lower it, so "
            "pressure never starts maintenance"
        )
    else:
        said += ": after maintenance, work resumes below the critical level instead"
    click.echo(f"{said}; raise the limit or the window for room to work", err=True)


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """The options that were given (not None)."""
    return {k: v for k, v in options.items() if v is not None}


@context_group.command("requests")
@context_argument
@click.option("--activation", metavar="ID", help="This activation only.")
@click.option(
    "--last",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="The N most recently started activations.",
)
@db_option
@format_option
def requests_command(
    *, context_id: str, activation: str | None, last: int, db_path: str, fmt: str
) -> None:
    """What CTX's activations sent to their models: requests, prefix reuse, provider tokens.

    Prefix reuse is the share of each request's bytes that began the previous request the same
    process sent (tool schemas, then the encoding): what a provider's prefix cache could reuse.
    Input and cached tokens are what the provider reported. With ContextDelta, each
    activation's increments and its seeds by reason are listed too."""
    with open_context(db_path, context_id) as ctx:
        stats = request_stats(ctx, pick_activations(ctx, activation, last))
    overall = total(stats)
    emit(
        fmt,
        {"activations": [s.to_dict() for s in stats], "total": overall.to_dict()},
        lambda: render.request_stats(stats, overall),
    )
