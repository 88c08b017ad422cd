"""Review 13, the Python library as a program uses it: the public surface of `morphz`, the
Context/Database/Engine classes, resource handling, typed errors for misuse. Each test fails on
the code it was written against and states the expected behaviour in its docstring."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz import errors
from morphz.errors import InputError, MorphzError
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

SRC = str(Path(morphz.__file__).resolve().parent.parent)


def _run(engine: Engine, prompt: Any, **kw: Any) -> Any:
    return asyncio.run(engine.run(prompt, **kw))


def _replying(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="done")


# ------------------------------------------------------------------ resources and threads


RACE = textwrap.dedent(
    """
    import faulthandler, os, sys, tempfile, threading
    faulthandler.enable()
    import morphz
    path = os.path.join(tempfile.mkdtemp(), "race.db")
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        for i in range(20):
            ctx.observe("user_message", f"hello world {i}")
    for trial in range(40):
        db = morphz.open(path)
        ctx = db.context("c")
        ready = [threading.Event() for _ in range(4)]
        def work(k):
            try:
                while True:
                    ctx.recall.search("hello")
                    ctx.encode()
                    ready[k].set()
            except morphz.StoreError:  # "the store is closed": what a reader should meet
                ready[k].set()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for r in ready:
            r.wait()
        db.close()
        for t in threads:
            t.join()
    print("done")
    """
)


@pytest.mark.slow
def test_closing_a_database_while_other_threads_read_it_does_not_crash_the_process(
    tmp_path: Path,
) -> None:
    """A Database is shared by threads (each gets its own reader connection). Closing it while
    other threads are reading must make their next call a StoreError ("the store is closed").
    Today `SqliteStore.close` (src/morphz/store/sqlite.py:540-553) closes every thread's reader
    connection from the closing thread while those threads are inside sqlite3 calls on it
    (`conn.execute("BEGIN")` in `read`, line 475, or a query of the read): the interpreter dies
    with SIGSEGV, within a few trials of this script (every run of it crashed here)."""
    done = subprocess.run(
        [sys.executable, "-c", RACE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "done" in done.stdout


def test_a_database_collected_without_close_leaves_no_open_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that drops a Database without close() (a script, a test) must not leave a
    SQLite connection to be found open by the garbage collector: from Python 3.13 (Morphz
    supports >=3.11) that is `ResourceWarning: unclosed database`, an error under
    filterwarnings=error. Each thread's reader is closed by a finalizer when its thread ends
    (sqlite.py:154-160, 287), but the writer connection (`self._writer`, sqlite.py:191) is
    closed only by close(). Observed here the way 3.13 observes it: a connection that is
    deallocated while still open."""
    leaked: list[str] = []

    class Tracked(sqlite3.Connection):
        def __del__(self) -> None:
            try:
                self.execute("SELECT 1")
            except sqlite3.ProgrammingError:
                return  # closed: fine
            leaked.append("an open connection was garbage-collected")

    real = sqlite3.connect

    def connect(*args: Any, **kw: Any) -> sqlite3.Connection:
        kw.setdefault("factory", Tracked)
        return real(*args, **kw)

    monkeypatch.setattr(sqlite3, "connect", connect)

    def use() -> None:
        db = morphz.open(tmp_path / "gc.db")
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "hello world")
        ctx.recall.search("hello")

    use()
    gc.collect()
    assert leaked == []


# ------------------------------------------------------------------ the engine as a library


def _list_files_then_reply() -> FunctionModel:
    calls: list[int] = []

    def fn(request: ModelRequest) -> ModelResponse:
        calls.append(1)
        if len(calls) == 1:
            return ModelResponse(text=None, tool_calls=(ToolCall("1", "list_files", "{}"),))
        return ModelResponse(text="done")

    return FunctionModel(fn)


def test_runtime_config_with_a_str_workspace_runs_the_workspace_tools(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The README's library example is `Engine(ctx, model, tools, RuntimeConfig(workspace))`;
    a program passing the folder as a str (as every other path of the API accepts:
    `morphz.open`, `import_history`) must get working tools, or an InputError up front. Today
    the RuntimeConfig is not checked (src/morphz/runtime/engine.py:79-92): the activation is
    "delivered" while every workspace tool fails with "AttributeError: 'str' object has no
    attribute 'resolve' (a fault of the tool)", recorded in the log for the agent to read."""
    (workspace / "notes.txt").write_text("x", encoding="utf-8")
    try:
        config = RuntimeConfig(str(workspace))  # type: ignore[arg-type]
        result = _run(Engine(ctx, _list_files_then_reply(), build_tools(Settings()), config), "ls")
    except InputError:
        return  # refused up front: fine
    assert result.state == "delivered"
    results = [e.text or "" for e in ctx.events() if e.kind == "tool_result"]
    assert results, "the model's list_files call left no tool result"
    assert "notes.txt" in results[0], results[0]


@pytest.mark.parametrize("step_limit", [0, -1, None, "24"], ids=["zero", "negative", "none", "str"])
def test_engine_refuses_an_invalid_step_limit_before_anything_is_written(
    ctx: morphz.Context, workspace: Path, step_limit: Any
) -> None:
    """decisions.md ("Counts are whole numbers") lists `step_limit` among the counts checked by
    `checks.check_whole`, and the configuration file's step_limit is (runtime/config.py:187).
    `RuntimeConfig(step_limit=...)` is not: 0 or -1 writes the user message and an activation
    that "failed: the step limit (0) was reached" without asking the model; None or "24"
    writes the message, starts the activation, marks it interrupted ("an unexpected error
    stopped the activation: TypeError") and raises TypeError. Expected: an InputError naming
    step_limit, with nothing appended to the log."""
    before = ctx.status().last_seq
    with pytest.raises(InputError, match="step_limit"):  # refused as the config is made
        config = RuntimeConfig(workspace, step_limit=step_limit)
        _run(Engine(ctx, FunctionModel(_replying), build_tools(Settings()), config), "hi")
    assert ctx.status().last_seq == before


@pytest.mark.parametrize(
    ("prompt", "objective"),
    [(None, None), (5, None), ("hi", 5), ("hi", ["ship it"])],
    ids=["prompt-none", "prompt-int", "objective-int", "objective-list"],
)
def test_engine_run_with_a_prompt_or_objective_that_is_not_text_is_an_input_error(
    ctx: morphz.Context, workspace: Path, prompt: Any, objective: Any
) -> None:
    """`Engine.run(prompt, objective=...)` given a prompt or objective that is not text must be
    an InputError, as `ctx.begin_activation` and `ctx.start_activation` give for the same values
    (review 11). Today `Engine.run` reads `(objective or prompt[:200]).strip()` first
    (src/morphz/runtime/engine.py:201): TypeError "'NoneType' object is not subscriptable" or
    AttributeError "'int' object has no attribute 'strip'"."""
    engine = Engine(
        ctx, FunctionModel(_replying), build_tools(Settings()), RuntimeConfig(workspace)
    )
    before = ctx.status().last_seq
    with pytest.raises(InputError):
        _run(engine, prompt, objective=objective)
    assert ctx.status().last_seq == before


# ------------------------------------------------------------------ typed errors for misuse


def _tx(ctx: morphz.Context, frame: str) -> str:
    return f"(context-tx (base-version {ctx.version}) (create {frame} (step one)))"


@pytest.mark.parametrize(
    "keywords",
    [{"budget": b"x"}, {"budget": 32000}, {"budget_keys": 5}, {"calibration": "gpt-4o"}],
    ids=["budget-bytes", "budget-int", "budget-keys-int", "calibration-str"],
)
def test_commit_with_a_wrong_budget_or_calibration_is_an_input_error(
    ctx: morphz.Context, keywords: dict[str, Any]
) -> None:
    """`ctx.commit(text, budget=, budget_keys=, calibration=)` are public keywords (the runtime
    passes what it measures with). A value of the wrong type must be an InputError, as
    `set_budget` and `encode(budget=)` refuse one. Today it escapes from inside the write as
    AttributeError ("'bytes' object has no attribute 'critical'", committing.py:217; "'str'
    object has no attribute 'samples'", encoding/tokens.py:268) or TypeError ("'int' object is
    not iterable", capacity.py:113)."""
    before = ctx.version
    with pytest.raises(InputError):
        ctx.commit(_tx(ctx, "plan"), **keywords)
    assert ctx.version == before


@pytest.mark.parametrize("calibration", [None, {"samples": []}], ids=["none", "dict"])
def test_save_calibration_of_something_else_is_an_input_error(
    ctx: morphz.Context, calibration: Any
) -> None:
    """`ctx.save_calibration(model, calibration)` given None or a dict must be an InputError;
    today it is AttributeError "'NoneType' object has no attribute 'to_dict'"
    (src/morphz/contextdb.py:222), raised inside the write."""
    with pytest.raises(InputError):
        ctx.save_calibration("gpt-4o", calibration)


def test_open_with_now_none_is_refused_or_means_the_default_clock(tmp_path: Path) -> None:
    """`morphz.open(path, now=None)` (None for "the default", as most optional arguments of the
    API take it) is accepted, and the first write then fails with TypeError "'NoneType' object
    is not callable" (src/morphz/database.py:30, `Database.timestamp`), far from the mistake.
    Expected: an InputError from open() naming `now`, or None meaning the default clock."""
    try:
        db = morphz.open(tmp_path / "now.db", now=None)  # type: ignore[arg-type]
    except InputError:
        return
    try:
        db.context("c", create=True).observe("user_message", "hello")
    except MorphzError:
        pass
    finally:
        db.close()


@pytest.mark.parametrize("value", ["(context-tx (base-version 0))", None], ids=["text", "none"])
def test_print_tx_of_something_other_than_a_tx_is_a_typed_error(value: Any) -> None:
    """`morphz.print_tx` is exported beside `parse_tx` and `read_tx`, which refuse a wrong type
    with a ParseError. Passing it the transaction's text (to canonicalize it, a natural first
    try) raises AttributeError "'str' object has no attribute 'canonical'"
    (src/morphz/txlang/parse.py:501). Expected: a MorphzError (InputError) saying it takes a
    parsed Tx (`morphz.read_tx(text)`)."""
    with pytest.raises(MorphzError):
        morphz.print_tx(value)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.recall.search("hello", kinds=5),
        lambda c: c.recall.search("hello", lifecycle=5),
        lambda c: c.recall.frame("plan", include_events=b"yes"),
        lambda c: c.recall.frame("plan", include_bodies=b"yes"),
    ],
    ids=["kinds-int", "lifecycle-int", "include-events-bytes", "include-bodies-bytes"],
)
def test_recall_arguments_of_the_wrong_type_are_input_errors(
    ctx: morphz.Context, call: Callable[[morphz.Context], object]
) -> None:
    """recall.search refuses kinds="observations" with a clear InputError ("kinds is a list of
    names"), but kinds=5 or lifecycle=5 is TypeError "'int' object is not iterable"
    (src/morphz/recall/search.py:120); recall.frame takes any object as include_events /
    include_bodies and fails with TypeError "Object of type bytes is not JSON serializable"
    while building its cursor. Expected: InputError for each."""
    ctx.observe("user_message", "hello world")
    ctx.commit(_tx(ctx, "plan"))
    with pytest.raises(InputError):
        call(ctx)


@pytest.mark.parametrize("which", ["audit", "rebuild"])
def test_a_progress_that_is_not_callable_is_an_input_error(ctx: morphz.Context, which: str) -> None:
    """`ctx.audit(progress=)` and `ctx.recall_index.rebuild(progress=)` call whatever they are
    given: a non-callable (a count, a bool meaning "show progress") fails with TypeError "'int'
    object is not callable" (audit.py:330, recall/api.py:284) after the work was done (for the
    rebuild, inside its write). Expected: InputError before any work, as `morphz.open` refuses a
    clock that is not one."""
    ctx.observe("user_message", "hello world")
    run = ctx.audit if which == "audit" else ctx.recall_index.rebuild
    with pytest.raises(InputError):
        run(progress=True)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the error tree


def _drawn_tree() -> dict[str, tuple[str | None, str | None]]:
    """errors.py's drawing: {class: (parent, code)}."""
    doc = errors.__doc__ or ""
    out: dict[str, tuple[str | None, str | None]] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        found = re.search(r"(\w+Error)(\s+(\S+))?", line)
        if not found or not re.match(r"^\s*([│ ]*[├└]── )?\w+Error", line):
            continue
        name = found.group(1)
        depth = (line.index(name) - 4) // 4
        stack = stack[:depth]
        out[name] = (stack[-1] if stack else None, found.group(3))
        stack.append(name)
    return out


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_the_drawn_error_tree_has_every_morphz_error_a_library_user_can_meet() -> None:
    """errors.py says "Every error Morphz raises on purpose is a MorphzError" and draws the
    tree. The runtime's errors are MorphzErrors that are not drawn: ProviderError (code
    `provider`) and its AuthError, RateLimitError, ContextTooLongError, BadResponseError
    (src/morphz/runtime/models/base.py:25-48, raised by a model's `request`, which a program
    using `make_model` calls), and ToolError / ArgumentError (code `tool`, an InputError,
    runtime/tools/base.py:39,56). Expected: the drawing names every class, under its parent,
    with its code (or says where the runtime's part is drawn)."""
    drawn = _drawn_tree()
    classes = {cls.__name__: cls for cls in _subclasses(MorphzError)} | {"MorphzError": MorphzError}
    missing = sorted(set(classes) - set(drawn))
    assert missing == [], f"not drawn in errors.py: {missing}"
    for name, (parent, _code) in drawn.items():
        cls = classes[name]
        assert parent is None or cls.__mro__[1].__name__ == parent, name


# ------------------------------------------------------------------ value types


def test_an_event_is_hashable_like_the_frozen_value_it_is(ctx: morphz.Context) -> None:
    """`Event` is a frozen dataclass ("one immutable event of a context") whose equal copies
    compare equal (`ctx.observe(...) == ctx.event("@e1")`), so a program puts events in a set
    or uses them as keys. `hash(event)` raises TypeError "unhashable type: 'dict'" (its meta
    and payload are dicts, src/morphz/events.py:39-52). Expected: equal events hash equal (a
    hash over context, seq and head would do)."""
    event = ctx.observe("user_message", "hello", meta={"a": 1})
    assert hash(event) == hash(ctx.event(event.ref))
    assert {event, ctx.event(event.ref)} == {event}
