"""Review 9 (conc): the Context Encoding's consistency and its CLI/API surface.

Each test fails on the code it was written against and states, in its docstring, what should
happen instead.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz.capacity import Budget
from morphz.contextdb import Context
from morphz.encoding import EncodeOptions
from morphz.interfaces.cli import main
from morphz.txlang import read_one


def _cli(db: Path, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--db", str(db)])


# ------------------------------------------------------------------ ctx.encode(...) arguments


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", 5),
        ("local_time", 5),
        ("objectives", [1]),
        ("extra_parts", [1]),
        ("profile", 5),
        ("capabilities", 5),
        ("budget", 5),
        ("budget", {"configured": 10_000}),
        ("calibration", 1.5),
        ("counter", 5),
        ("bindings", 5),
        ("only_observations", 5),
    ],
)
def test_encode_options_of_the_wrong_type_are_an_input_error(
    ctx: morphz.Context, field: str, value: Any
) -> None:
    """An EncodeOptions field of the wrong type (a model that is not a string, a budget that is
    not a Budget, a counter that is not callable, ...) is refused with an InputError naming the
    field, as the session, activation, authority and view fields already are -- not a bare
    TypeError or AttributeError from deep inside the compiler (docs/decisions.md: API inputs are
    InputErrors, not bare TypeErrors)."""
    ctx.observe("user_message", "hello")
    with pytest.raises(morphz.InputError, match=field.rstrip("s")):
        ctx.encode(**{field: value})


@pytest.mark.parametrize("field", ["model", "local_time", "bindings"])
def test_encode_options_given_none_are_the_default_or_an_input_error(
    ctx: morphz.Context, field: str
) -> None:
    """None for a field whose default is not None (model "none", local_time "unknown", bindings
    {}) is taken as the default or refused with an InputError; not a bare TypeError ("argument
    of type 'NoneType' is not iterable")."""
    with contextlib.suppress(morphz.InputError):
        ctx.encode(**{field: None})


def test_encode_now_as_a_datetime_is_accepted_or_refused_not_a_type_error(
    ctx: morphz.Context,
) -> None:
    """``now`` (the time the session window is measured from) given as a datetime -- what every
    other time argument of the API accepts (observe's ``time``) -- is used, or refused with an
    InputError; not a bare TypeError from datetime.fromisoformat."""
    ctx.observe("user_message", "hello")
    with contextlib.suppress(morphz.InputError):
        ctx.encode(now=datetime(2026, 8, 4, 9, 0, tzinfo=UTC))


def test_a_string_given_as_objectives_is_not_split_into_characters(ctx: morphz.Context) -> None:
    """``objectives="ship it"`` (a string where a tuple of strings is expected) is refused with
    an InputError, or taken as one objective. Today the kernel silently shows seven objectives,
    one per character: (objectives "s" "h" "i" "p" " " "i" "t")."""
    try:
        kernel = ctx.encode(objectives="ship it").region("kernel")
    except morphz.InputError:
        return
    assert '(objectives "ship it")' in kernel


def test_a_string_given_as_extra_parts_is_counted_as_one_part(ctx: morphz.Context) -> None:
    """``extra_parts="..."`` (a string where a tuple of parts is expected) is refused with an
    InputError, or counted as the one part it is. Today every character is counted as a part of
    its own (at least one token each), so the pressure over-states the request ~4x."""
    schema = "x" * 400  # 100 tokens as one part
    try:
        as_string = ctx.encode(extra_parts=schema)
    except morphz.InputError:
        return
    assert as_string.tokens == ctx.encode(extra_parts=(schema,)).tokens


def test_equal_options_give_the_same_bytes_whatever_the_order_of_nested_values(
    ctx: morphz.Context,
) -> None:
    """Same state and equal options give the same bytes (test_encoding checks it for the order
    of binding names). A binding or scheduling value that is itself a mapping is rendered with
    ``str()``, so two equal option sets ({"b": 1, "a": 2} == {"a": 2, "b": 1}) give different
    encodings (and a set value differs between processes with PYTHONHASHSEED). Expected: values
    rendered canonically (e.g. sorted JSON), or non-scalar values refused with an InputError."""
    ctx.observe("user_message", "hello")
    first = EncodeOptions(bindings={"env": {"b": "1", "a": "2"}})
    second = EncodeOptions(bindings={"env": {"a": "2", "b": "1"}})
    assert first == second
    try:
        one = ctx.encode(first).text
    except morphz.InputError:
        with pytest.raises(morphz.InputError):
            ctx.encode(second)
        return
    assert ctx.encode(second).text == one


# ------------------------------------------------------------------ snapshot consistency


def test_cli_encoding_pressure_uses_the_budget_of_the_snapshot_it_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`morphz context encoding` (without --budget) describes one version of the context: the
    kernel's pressure figures use the budget stored in the same read snapshot as the inbox, the
    mind and the view. Today the command reads the budget (and the calibration) in read
    transactions of their own before the compile, so a `context budget --limit` committed in
    between gives an encoding mixing the old budget with the newer state. (The budget change is
    injected right before the compile's read, where another process could commit it.)"""
    db = tmp_path / "m.db"
    assert _cli(db, "context", "create").exit_code == 0
    real_encode = Context.encode

    def encode_after_a_budget_change(self: Context, *args: Any, **kwargs: Any) -> Any:
        self.set_budget(Budget(configured=50_000))  # another process commits it now
        return real_encode(self, *args, **kwargs)

    monkeypatch.setattr(Context, "encode", encode_after_a_budget_change)
    result = _cli(db, "context", "encoding", "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["pressure"]["hard"] == 50_000  # the budget the compiled snapshot holds


# ------------------------------------------------------------------ the store the CLI opens


def test_a_read_command_leaves_a_database_that_is_not_a_morphz_store_untouched(
    tmp_path: Path,
) -> None:
    """`morphz context encoding --db FILE` on an existing SQLite file of another application (a
    typo in --db) is refused as not being a Morphz store, and the file is left as it was. Today
    the command, which writes nothing, switches the file to WAL and adds Morphz's 36 tables to
    it (the migrations run on open even with create=False), then reports 'no context'."""
    other = tmp_path / "notes.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    result = _cli(other, "context", "encoding")
    assert result.exit_code == 1
    conn = sqlite3.connect(other)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert tables == ["notes"]
    assert mode == "delete"


# ------------------------------------------------------------------ previews


def _preview(ctx: morphz.Context, text: str) -> tuple[str, str]:
    ctx.observe("tool_result", text)
    encoding = ctx.encode()
    obs = encoding.state.observations[-1]
    assert len(obs.text) > encoding.view.preview_threshold
    form = read_one(encoding.region("inbox"))
    item = form.items[-1]  # (observation @eN ... (preview ...))
    preview = item.items[-1]
    parts = {p.items[0].text: p for p in preview.items[1:] if hasattr(p, "items")}
    return parts["head"].items[1].value, parts["tail"].items[1].value


@pytest.mark.parametrize(
    "text",
    [
        "e\u0301" * 9000 + "z",  # the tail's first character is a combining acute accent
        "x" + "\U0001f468\u200d\U0001f469\u200d\U0001f467" * 3600,  # head ends inside a ZWJ emoji
    ],
    ids=["combining-mark", "zwj-emoji"],
)
def test_a_preview_does_not_cut_inside_a_grapheme_cluster(ctx: morphz.Context, text: str) -> None:
    """The head and tail of a preview end and begin at user-perceived character boundaries: the
    tail does not begin with a combining mark or a zero-width joiner, and the head does not end
    with a zero-width joiner or just before a mark that belongs to its last character. Today
    the cut is at a fixed code point count (2,000 / 1,000), so a tail can start with a bare
    U+0301 (shown on the quote before it) and a head can end with a dangling U+200D."""
    head, tail = _preview(ctx, text)
    cut = text[len(head)]  # the first character the head left out
    assert not unicodedata.combining(cut) and cut != "\u200d" and not head.endswith("\u200d")
    assert not unicodedata.combining(tail[0]) and tail[0] != "\u200d"


def test_an_unknown_encoding_option_is_an_input_error_naming_the_options(
    ctx: morphz.Context,
) -> None:
    """ctx.encode(sesion="x") (a typo) is an InputError that lists the options, not a bare
    TypeError from the dataclass constructor."""
    with pytest.raises(morphz.InputError, match=r"unknown encoding option.*sesion.*session"):
        ctx.encode(sesion="x")


def test_times_given_as_datetimes_are_shown_as_iso_text(ctx: morphz.Context) -> None:
    """local_time and now may be datetimes with an offset (shown as ISO 8601); a naive one is
    an InputError that says to add an offset."""
    moment = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
    encoding = ctx.encode(local_time=moment, now=moment)
    assert '(local-time "2026-08-04T09:00:00+00:00")' in encoding.text
    assert encoding.options.now == "2026-08-04T09:00:00+00:00"
    with pytest.raises(morphz.InputError, match="offset"):
        ctx.encode(local_time=datetime(2026, 8, 4, 9, 0))


def test_binding_values_are_canonical_json_and_non_json_values_are_refused(
    ctx: morphz.Context,
) -> None:
    """A binding value that is not a string is shown as canonical JSON; a set (no canonical
    order, not JSON) or NaN is an InputError naming the binding."""
    text = ctx.encode(bindings={"limits": {"b": [1, 2], "a": True}}).text
    assert '(limits "{\\"a\\": true, \\"b\\": [1, 2]}")' in text
    for bad in ({1, 2}, float("nan")):
        with pytest.raises(morphz.InputError, match="binding limits"):
            ctx.encode(bindings={"limits": bad})


def test_creating_a_context_in_another_applications_database_changes_nothing(
    tmp_path: Path,
) -> None:
    """`morphz context create --db notes.db` on another application's SQLite file is refused
    too (a typo in --db must not add Morphz's tables to it); an empty file is a store yet to
    be created for create, and 'not a Morphz store yet' for a read."""
    other = tmp_path / "notes.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    result = _cli(other, "context", "create")
    assert result.exit_code == 1 and "not a Morphz store" in result.stderr
    conn = sqlite3.connect(other)
    try:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    finally:
        conn.close()
    empty = tmp_path / "empty.db"
    empty.touch()
    read = _cli(empty, "context", "status")
    assert read.exit_code == 1 and "empty file" in read.stderr
    assert empty.stat().st_size == 0
    assert _cli(empty, "context", "create").exit_code == 0
