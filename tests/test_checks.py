"""The whole-number check every entry point shares: one message shape naming the range, and
booleans refused (Python counts ``True`` as the integer 1; a user who passes it meant no count)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import morphz
from morphz.capacity import Budget
from morphz.checks import check_whole
from morphz.encoding.view import View
from morphz.errors import InputError
from morphz.runtime.config import _settings


@given(st.integers(), st.integers(-5, 5), st.one_of(st.none(), st.integers(-5, 10)))
def test_accepts_exactly_the_whole_numbers_in_range(
    value: int, least: int, most: int | None
) -> None:
    inside = value >= least and (most is None or value <= most)
    if inside:
        assert check_whole(value, "n", least, most) == value
    else:
        with pytest.raises(InputError, match="n must be a whole number"):
            check_whole(value, "n", least, most)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_refuses_what_is_not_an_int(value: object) -> None:
    with pytest.raises(InputError, match=r"^n must be a whole number of at least 0, not "):
        check_whole(value, "n", 0)


def test_message_names_range_unit_and_reason() -> None:
    with pytest.raises(InputError) as caught:
        check_whole(9, "window", 0, 8, unit="ticks", why="the organizing window")
    assert str(caught.value) == (
        "window must be a whole number from 0 to 8 (ticks; the organizing window), not 9"
    )


def _entry_points(ctx: morphz.Context, db: morphz.Database) -> dict[str, Callable[[Any], object]]:
    event = ctx.observe("user_message", "hello there")
    ctx.commit(f"(context-tx (base-version 0) (derive f1 (from {event.ref}) (fact x)))")
    return {
        "search limit": lambda v: ctx.recall.search("hello", limit=v),
        "read offset": lambda v: ctx.recall.read(event.ref, offset=v),
        "read limit": lambda v: ctx.recall.read(event.ref, limit=v),
        "traverse depth": lambda v: ctx.recall.frame("f1", depth=v),
        "traverse budget": lambda v: ctx.recall.frame("f1", budget=v),
        "set window": ctx.set_window,
        "create window": lambda v: db.create_context("other", window=v),
        "view count": lambda v: View(session_count=v),
        "view threshold": lambda v: View(preview_threshold=v),
        "step limit": lambda v: _settings({"step_limit": v}, {}, ()),
        "budget window": lambda v: Budget(window=v),
        "configured budget": lambda v: Budget(configured=v),
        "[budget] reserve": lambda v: _settings({"budget": {"reserve": v}}, {}, ()),
    }


@pytest.mark.parametrize("value", [True, False])
def test_every_entry_point_refuses_booleans(
    ctx: morphz.Context, db: morphz.Database, value: bool
) -> None:
    for name, call in _entry_points(ctx, db).items():
        with pytest.raises(InputError, match="must be a whole number") as caught:
            call(value)
        assert str(caught.value).endswith(f"not {value!r}"), name
