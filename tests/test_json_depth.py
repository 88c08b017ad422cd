"""One nesting limit for the JSON values Morphz stores or takes, the same on every Python: json
recurses once per level and stops near the recursion limit on 3.11 (about 990 levels) but goes
on to about 10,000 from 3.13, so without a limit of its own a meta 5,000 deep was refused on
3.11, stored on 3.13, and then read as a damaged event by 3.11."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz.checks import MAX_JSON_DEPTH, too_deep
from morphz.runtime.tools.base import ToolError, parse_arguments


def nested(depth: int) -> dict[str, object]:
    """An object ``depth`` levels deep: {"a": [[...[]...]]}."""
    inner: list[object] = []
    for _ in range(depth - 2):
        inner = [inner]
    return {"a": inner}


def test_depth_is_counted_without_recursion() -> None:
    assert not too_deep(1) and not too_deep("x" * 10)
    assert not too_deep(nested(MAX_JSON_DEPTH)) and too_deep(nested(MAX_JSON_DEPTH + 1))
    assert too_deep(nested(200_000))  # far past the interpreter's recursion limit


def test_meta_at_the_limit_is_stored_and_one_level_more_is_refused(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        event = ctx.observe("user_message", "ok", meta=nested(MAX_JSON_DEPTH))
        assert ctx.event(event.ref).meta == nested(MAX_JSON_DEPTH)
        with pytest.raises(morphz.InputError, match=f"more than {MAX_JSON_DEPTH}"):
            ctx.observe("user_message", "deep", meta=nested(MAX_JSON_DEPTH + 1))
        assert ctx.status().last_seq == event.seq
        assert ctx.audit().ok


def test_a_binding_one_level_past_the_limit_is_refused(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        ctx.encode(bindings={"w": nested(MAX_JSON_DEPTH)})
        with pytest.raises(morphz.InputError, match=f"more than {MAX_JSON_DEPTH} deep"):
            ctx.encode(bindings={"w": nested(MAX_JSON_DEPTH + 1)})


def test_tool_arguments_past_the_limit_are_a_tool_error() -> None:
    text = '{"a": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}"  # 501 levels
    with pytest.raises(ToolError, match=f"more than {MAX_JSON_DEPTH} lists"):
        parse_arguments("read_file", text)
    assert parse_arguments("read_file", '{"a": ' + "[" * 499 + "]" * 499 + "}")["a"]
