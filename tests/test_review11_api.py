"""Review 11, the public Python API: exports, the error hierarchy, argument checks at the
library's entry points, close() semantics. Each test fails on the code it was written against
and states the expected behaviour in its docstring."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz import errors
from morphz.errors import InputError, MorphzError, RecordNotFoundError, StoreError

SRC = str(Path(morphz.__file__).resolve().parent.parent)


def _strict_json(value: Any) -> str:
    return json.dumps(value, allow_nan=False)


# ------------------------------------------------------------------ activations


@pytest.mark.parametrize("reason", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_finish_activation_refuses_a_reason_that_is_not_json(
    ctx: morphz.Context, reason: float
) -> None:
    """finish_activation(reason=NaN or Infinity) must be an InputError that writes nothing: the
    reason goes into the immutable log, whose payloads are strict JSON everywhere else (meta
    refuses NaN). Today it is stored as-is, and `morphz context events --format json` then
    prints `Infinity` / `NaN`, which is not JSON."""
    activation = ctx.start_activation("default")
    before = ctx.status().last_seq
    with pytest.raises(InputError):
        ctx.finish_activation(activation, reason=reason)
    assert ctx.status().last_seq == before
    assert [a.activation_id for a in ctx.activations(running_only=True)] == [activation]
    for event in ctx.events():
        _strict_json(event.to_dict())


def test_finish_activation_refuses_a_reason_that_is_bytes(ctx: morphz.Context) -> None:
    """A reason that is not text (bytes) is an InputError naming it, not a bare TypeError from
    json.dumps inside the write."""
    activation = ctx.start_activation("default")
    with pytest.raises(InputError):
        ctx.finish_activation(activation, reason=b"crashed")  # type: ignore[arg-type]
    assert [a.activation_id for a in ctx.activations(running_only=True)] == [activation]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.start_activation("default", objective=5),
        lambda c: c.start_activation("default", objective=["ship it"]),
        lambda c: c.begin_activation("default", "do it", b"ship it"),
    ],
    ids=["start-int", "start-list", "begin-bytes"],
)
def test_an_objective_that_is_not_text_is_an_input_error(
    ctx: morphz.Context, call: Callable[[morphz.Context], object]
) -> None:
    """An activation objective that is not a string is an InputError (as a blank one is), and
    nothing is written; today an int or a list escapes as AttributeError ('.strip') and bytes
    as a TypeError raised from json.dumps inside the write."""
    before = ctx.status()
    with pytest.raises(InputError):
        call(ctx)
    after = ctx.status()
    assert (after.last_seq, after.running_activations) == (
        before.last_seq,
        before.running_activations,
    )


# ------------------------------------------------------------------ recall


@pytest.mark.parametrize(
    ("op", "params"),
    [("search", {"q": "deploy"}), ("read", {}), ("frame", {"id": "plan"})],
    ids=["search-typo", "read-without-ref", "frame-typo"],
)
def test_recall_deliver_with_a_wrong_parameter_is_an_input_error(
    ctx: morphz.Context, op: Any, params: dict[str, Any]
) -> None:
    """ctx.recall.deliver(op, **params) with a misspelt or missing parameter is an InputError
    naming the parameters the operation takes, and appends nothing; today Python's TypeError
    ("got an unexpected keyword argument 'q'", "missing 1 required positional argument")
    escapes."""
    ctx.observe("user_message", "deploy to cn-shanghai")
    before = ctx.status().last_seq
    with pytest.raises(InputError):
        ctx.recall.deliver(op, **params)
    assert ctx.status().last_seq == before


# ------------------------------------------------------------------ exports and error codes


def test_morphz_encoding_is_reachable_after_import_morphz() -> None:
    """The README's Python API writes `ctx.set_view(morphz.encoding.View())` after only
    `import morphz`: the attribute must exist whatever was called before. Today
    `morphz.encoding` exists only once some call (encode, status) has imported it lazily, so
    a program that sets the view first gets AttributeError."""
    code = "import morphz; morphz.encoding.View(); morphz.capacity.Budget()"
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr


def test_every_error_of_the_tree_is_exported_from_morphz() -> None:
    """errors.py draws RecordNotFoundError, CursorError and HistoryImportError in the tree that
    public calls raise (recall.read, recall.search, import_history); a user catches them as
    `morphz.X` like every other error. Today they are missing from `morphz` and `__all__`."""
    tree = [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, MorphzError)
    ]
    missing = [name for name in tree if not hasattr(morphz, name) or name not in morphz.__all__]
    assert missing == []


def test_event_of_a_missing_ref_is_not_found(ctx: morphz.Context) -> None:
    """ctx.event('@e99') on a context with one event is RecordNotFoundError (code not-found),
    as the error tree says ("an event ref or frame a read asked for") and as
    ctx.recall.read('@e99') raises for the same ref; today it is an InputError, code input."""
    ctx.observe("user_message", "one")
    with pytest.raises(RecordNotFoundError) as read:
        ctx.recall.read("@e99")
    with pytest.raises(MorphzError) as got:
        ctx.event("@e99")
    assert got.value.code == read.value.code == "not-found"
    assert isinstance(got.value, RecordNotFoundError)


# ------------------------------------------------------------------ opening


@pytest.mark.parametrize("window", [-5, "banana", 10**30], ids=["negative", "str", "huge"])
def test_context_refuses_an_invalid_window_for_an_existing_context(
    db: morphz.Database, window: Any
) -> None:
    """db.context(name, create=True, window=W) checks W (InputError) whether or not the
    context exists, as create_context does; today an existing context ignores the argument
    entirely, so a bad window passes silently (and a valid one different from the stored
    window is silently dropped too)."""
    db.context("c", create=True, window=3)
    with pytest.raises(InputError):
        db.context("c", create=True, window=window)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"busy_timeout": float("nan")},
        {"busy_timeout": -1.0},
        {"synchronous": None},
        {"name": "bad\x00name.db"},
    ],
    ids=["busy-nan", "busy-negative", "synchronous-none", "nul-in-path"],
)
def test_open_refuses_bad_arguments_with_a_typed_error(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    """morphz.open refuses a NaN or negative busy_timeout, a synchronous that is not a string
    and a path holding NUL with a MorphzError (InputError/StoreError), and leaves no store
    open. Today NaN escapes as ValueError ('cannot convert float NaN to integer'), None as
    AttributeError ('.upper'), the NUL path as ValueError ('embedded null byte'), and a
    negative timeout is accepted (every contended write then fails at once)."""
    name = kwargs.pop("name", "m.db")
    with pytest.raises(MorphzError):
        db = morphz.open(tmp_path / name, **kwargs)
        db.close()


# ------------------------------------------------------------------ results


def test_encoding_region_of_an_unknown_name_is_a_typed_error(ctx: morphz.Context) -> None:
    """Encoding.region('nope') raises a MorphzError (InputError naming the region names), as
    every other public lookup does; today it is a bare KeyError('nope')."""
    encoding = ctx.encode()
    with pytest.raises(MorphzError) as got:
        encoding.region("nope")
    assert "inbox" in str(got.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.observe_batch(5),
        lambda c: c.import_history(None),
        lambda c: c.set_view(None),
        lambda c: c.set_budget(None),
        lambda c: c.encode(options=5),
    ],
    ids=[
        "observe_batch-int",
        "import_history-none",
        "set_view-none",
        "set_budget-none",
        "encode-options-int",
    ],
)
def test_a_public_call_given_the_wrong_type_is_an_input_error(
    ctx: morphz.Context, call: Callable[[morphz.Context], object]
) -> None:
    """Every error a public call raises is a MorphzError (README: "Every error is a
    morphz.MorphzError with a code"): an argument of the wrong type (None for a view or budget,
    an int for a batch, an options object or a history source) is an InputError naming it.
    Today TypeError ('int' object is not iterable) or AttributeError ('.to_dict', '.session')
    escapes."""
    with pytest.raises(InputError):
        call(ctx)


# ------------------------------------------------------------------ close


def test_close_inside_a_write_callback_is_a_store_error(
    open_db: Callable[[], morphz.Database],
) -> None:
    """db.close() called from inside a write on the same thread (import_history's progress)
    ends as a StoreError (the store module's docstring: every driver error becomes a
    StoreError at one boundary), with nothing of the import written. Today the rollback path
    touches the closed writer and a bare sqlite3.ProgrammingError ('Cannot operate on a closed
    database') escapes."""
    db = open_db()
    ctx = db.context("c", create=True)
    lines = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(6000))
    with pytest.raises(StoreError):
        ctx.import_history(io.StringIO(lines), progress=lambda done, total: db.close())
    again = open_db().context("c")
    assert again.status().last_seq == 0
