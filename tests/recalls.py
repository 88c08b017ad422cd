"""Helpers the recall tests share: commits with a reason, observations each in a session of its
own (so no neighbour's text is ``near`` them), and the keys of a page's hits."""

from __future__ import annotations

import itertools

import morphz
from morphz.recall.search import Hit, SearchPage

_sessions = itertools.count(1)


def commit(ctx: morphz.Context, *ops: str, reason: str = "routine upkeep") -> morphz.Receipt:
    header = f'(base-version {ctx.version}) (reason "{reason}")'
    return ctx.commit(f"(context-tx {header} " + " ".join(ops) + ")")


def say(ctx: morphz.Context, text: str, session: str | None = None) -> str:
    """An observation in a session of its own (unless ``session`` is given); its ref."""
    return ctx.observe("user_message", text, session=session or f"s{next(_sessions)}").ref


def key(hit: Hit) -> str:
    return hit.ref if hit.ref is not None else f"frame:{hit.frame_id}"


def keys(page: SearchPage) -> list[str]:
    return [key(h) for h in page.hits]
