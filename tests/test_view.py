"""The context's view (issue 4: the configurable preview threshold and the session working set):
stored per context, used by every encoding of it, overridable per compile, checked on the way in.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import morphz
from morphz.encoding import View
from morphz.errors import InputError
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel

LONG = "start " + "abcdefghij" * 60 + " end"  # 610 characters


def _previewed(encoding: morphz.encoding.Encoding, ref: str) -> bool:
    line = next(x for x in encoding.region("inbox").splitlines() if f"(observation {ref} " in x)
    return "(preview (total-chars" in line


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("preview_threshold", 0, "preview_threshold must be a whole number from 1 to 1000000000"),
        ("preview_threshold", -7, "not -7"),
        ("preview_threshold", 2.5, "not 2.5"),
        ("preview_threshold", True, "not True"),
        ("session_count", 0, "the current session is always listed"),
        ("session_tokens", -1, "session_tokens must be a whole number from 0 to 1000000000"),
        ("session_hours", 0, "session_hours must be more than 0 and at most 876,000 hours"),
        ("session_hours", -3.0, "more than 0"),
        ("session_hours", 876_001, "not 876001"),
        ("session_hours", 1e12, "100 years"),
        ("session_hours", math.inf, "not inf"),
        ("session_hours", math.nan, "not nan"),
        ("session_hours", "24", "must be a number of hours"),
    ],
)
def test_a_view_out_of_range_is_refused_with_what_to_give(
    field: str, value: Any, says: str
) -> None:
    with pytest.raises(InputError, match=says):
        View(**{field: value})


@given(
    st.integers(1, 10**7),
    st.floats(0.001, 10**5, allow_nan=False),
    st.integers(1, 10**4),
    st.integers(0, 10**6),
)
def test_a_view_round_trips(threshold: int, hours: float, count: int, tokens: int) -> None:
    view = View(threshold, hours, count, tokens)
    assert View.from_dict(json.loads(json.dumps(view.to_dict()))) == view


def test_the_widest_window_compiles(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "hello")
    ctx.observe("user_message", "hello", session="old")
    later = "2126-01-01T00:00:00+00:00"  # about a century after the fixed clock's times
    ctx.set_view(View(session_hours=1))
    plan = ctx.encode(local_time=later).sessions.to_dict()
    assert plan["excluded"] == {"inactive-beyond-window": 1}
    ctx.set_view(View(session_hours=876_000))
    plan = ctx.encode(local_time=later).sessions.to_dict()
    assert [e["session"] for e in plan["shown"]] == ["default", "old"]
    early = ctx.encode(local_time="0001-01-01T05:00:00+00:00")  # the window starts before year 1
    assert early.sessions.to_dict()["excluded"] == {}


def test_unknown_view_settings_are_named() -> None:
    with pytest.raises(InputError, match=r"unknown view settings \['preview'\]"):
        View.from_dict({"preview": 10})


def test_the_stored_view_shapes_every_encoding(ctx: morphz.Context) -> None:
    ctx.observe("user_message", LONG)
    assert ctx.view() == View()
    assert not _previewed(ctx.encode(), "@e1")
    ctx.set_view(View(preview_threshold=100, session_count=1))
    assert ctx.view() == View(preview_threshold=100, session_count=1)
    stored = ctx.encode()
    assert _previewed(stored, "@e1") and stored.view.preview_threshold == 100
    assert stored.to_dict(include_text=False)["view"]["preview_threshold"] == 100
    # a compile's own setting wins over the stored one, the others stay the stored ones
    own = ctx.encode(preview_threshold=len(LONG))
    assert not _previewed(own, "@e1")
    assert own.view == View(preview_threshold=len(LONG), session_count=1)


def test_the_stored_session_count_limits_the_directory(ctx: morphz.Context) -> None:
    for session in ("a", "b", "c"):
        ctx.observe("user_message", f"hello from {session}", session=session)
    assert [e["session"] for e in ctx.encode(session="a").sessions.to_dict()["shown"]] == [
        "a",
        "c",
        "b",
    ]
    ctx.set_view(View(session_count=2))
    plan = ctx.encode(session="a").sessions.to_dict()
    assert [e["session"] for e in plan["shown"]] == ["a", "c"]
    assert plan["excluded"] == {"beyond-count": 1}


def test_a_bad_override_is_refused_not_rendered(ctx: morphz.Context) -> None:
    """Was: a negative threshold rendered a preview whose omitted count exceeded the text."""
    ctx.observe("user_message", LONG)
    with pytest.raises(InputError, match="preview_threshold"):
        ctx.encode(preview_threshold=-7)
    with pytest.raises(InputError, match="session_count"):
        ctx.encode(session_count=0)


def test_the_runtime_uses_the_stored_view(ctx: morphz.Context, tmp_path: Path) -> None:
    ctx.observe("tool_result", LONG)
    ctx.set_view(View(preview_threshold=100))
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse("done", ())

    engine = Engine(
        ctx, FunctionModel(answer), build_tools(Settings()), RuntimeConfig(workspace=tmp_path)
    )
    assert asyncio.run(engine.run("hello")).state == "delivered"
    assert "(observation @e1 " in seen[0].encoding
    assert "(preview (total-chars 610)" in seen[0].encoding


def _cli(db: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["context", *args, "--db", str(db)])


def test_context_view_shows_and_changes_the_view(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert _cli(db, "create", "work").exit_code == 0
    shown = _cli(db, "view", "work")
    assert shown.exit_code == 0 and "16,000 characters" in shown.stdout
    changed = _cli(db, "view", "work", "--preview-threshold", "4000", "--session-hours", "2.5")
    assert changed.exit_code == 0, changed.output
    assert "4,000 characters" in changed.stdout and "2.5 hours" in changed.stdout
    as_json = json.loads(_cli(db, "view", "work", "--format", "json").stdout)
    assert as_json == {
        "view": {
            "preview_threshold": 4000,
            "session_hours": 2.5,
            "session_count": 50,
            "session_tokens": 4000,
        }
    }
    encoding = json.loads(_cli(db, "encoding", "work", "--format", "json").stdout)
    assert encoding["view"] == as_json["view"]
    refused = _cli(db, "view", "work", "--session-count", "0", "--session-tokens", "9")
    assert refused.exit_code == 1
    assert "session_count must be a whole number from 1 to 1000000" in refused.stderr
    # nothing was half-written: the valid setting given with the bad one was not stored
    with morphz.open(db) as opened:
        assert opened.context("work").view() == View(preview_threshold=4000, session_hours=2.5)
