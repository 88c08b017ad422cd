"""Text that is not valid Unicode (a lone surrogate: what `json.loads('"\\ud800"')` or a
broken decode gives) is refused at every entry point with a typed error that says where and
what to do, and nothing is written."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest

import morphz
from morphz.errors import HistoryImportError, InputError, ParseError

BAD = "ok \ud800 then"


def _entry_points(ctx: morphz.Context) -> dict[str, Callable[[], object]]:
    root = ctx.observe("user_message", "the request")
    tx = f'(context-tx (base-version {ctx.version}) (create f1 (fact "{BAD}")))'
    line = json.dumps({"kind": "tool_result", "text": BAD}) + "\n"  # "\\ud800" in the file
    return {
        "observe text": lambda: ctx.observe("user_message", BAD),
        "observe meta": lambda: ctx.observe("user_message", "x", meta={"note": BAD}),
        "observe batch": lambda: ctx.observe_batch([morphz.Observation("tool_result", BAD)]),
        "import": lambda: ctx.import_history(io.StringIO(line)),
        "commit": lambda: ctx.commit(tx),
        "search": lambda: ctx.recall.search(BAD),
        "encode": lambda: ctx.encode(objectives=(BAD,)),
        "activation objective": lambda: ctx.start_activation("default", root.ref, BAD),
    }


def test_every_entry_point_refuses_a_lone_surrogate(ctx: morphz.Context) -> None:
    for name, call in _entry_points(ctx).items():
        before = ctx.status()
        with pytest.raises((InputError, ParseError)) as caught:
            call()
        message = caught.value.message
        assert "lone surrogate U+D800" in message and "errors='replace'" in message, name
        after = ctx.status()
        assert (after.last_seq, after.version) == (before.last_seq, before.version), name


def test_the_error_says_where(ctx: morphz.Context) -> None:
    with pytest.raises(ParseError) as parse:
        ctx.commit(f'(context-tx (base-version 0)\n (create f1 (fact "{BAD}")))')
    assert (parse.value.line, parse.value.column) == (2, 23)  # 1-based, on the surrogate
    line = json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": BAD}) + "\n"
    with pytest.raises(HistoryImportError) as imported:
        ctx.import_history(io.StringIO(line))
    assert imported.value.line == 2
    assert ctx.status().last_seq == 0  # the import is all or nothing
