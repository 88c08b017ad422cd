"""The SQLite store's row conversions are the plain library calls they stand for: JSON columns
decode exactly as ``json.loads`` would (errors included) and encode exactly as the
``json.dumps`` call the store has always used, byte for byte (the head hash and the audit depend
on stored bytes never changing)."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from morphz.events import Event, make_event
from morphz.store.sqlite_txn import _dumps, _loads

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",))), inner, max_size=4)
    ),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(), JSON_VALUES, max_size=5)


def _old_dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _outcome(call: Any, text: Any) -> tuple[str, Any]:
    try:
        return "value", call(text)
    except Exception as exc:  # the exception itself is what is compared
        return type(exc).__name__, str(exc)


@settings(max_examples=300, deadline=None)
@given(OBJECTS)
def test_dumps_is_the_json_dumps_call_byte_for_byte(value: dict[str, Any]) -> None:
    assert _dumps(value) == _old_dumps(value)
    assert _loads(_old_dumps(value)) == json.loads(_old_dumps(value))


@settings(max_examples=300, deadline=None)
@given(st.one_of(OBJECTS.map(_old_dumps), OBJECTS.map(json.dumps), st.text(max_size=20)))
def test_loads_is_json_loads_for_any_text(text: str) -> None:
    spaced = [text, f" {text}", f"{text} ", f"{text}\n", f"\ufeff{text}", f"{text}x"]
    for variant in spaced:
        assert _outcome(_loads, variant) == _outcome(json.loads, variant)


@pytest.mark.parametrize(
    "text", ['{"tick":true}', "{}", "[1, 2]", "3", '"s"', "nul", "{", "{} {}", b'{"a":1}']
)
def test_loads_edge_cases(text: Any) -> None:
    assert _outcome(_loads, text) == _outcome(json.loads, text)
    assert _dumps(None) is None


def test_make_event_is_the_dataclass_event() -> None:
    values = (
        "ctx",
        7,
        "tool_result",
        "main",
        "t0",
        "t1",
        "text",
        {"m": 1},
        {"tick": True},
        3,
        2,
        "h",
    )
    fast, plain = make_event(*values), Event(*values)
    assert type(fast) is Event
    assert fast == plain and repr(fast) == repr(plain)
    bare = (*values[:7], None, None, *values[9:])  # no dicts: hashable
    assert hash(make_event(*bare)) == hash(Event(*bare))
    assert [getattr(fast, f.name) for f in fields(Event)] == list(values)
    with pytest.raises(FrozenInstanceError):
        fast.seq = 8  # type: ignore[misc]
