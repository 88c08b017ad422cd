"""Review 11 (dtools): the workspace tools as changed by commit 11aa683 (a regex search in a
child process, non-backtracking globs, creations by hard link, Tool.check before approval).
Each test fails on the code it was written against; its docstring says what should happen."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import make_engine
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall, ToolSchema
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools import linesearch, scanlines
from morphz.runtime.tools.base import Tool, ToolContext, ToolError, ToolOutcome
from morphz.runtime.tools.workspace import search_files_tool
from toolruns import run

SETTLE_S = 5.0  # far more than killing a child takes; far less than the child's own 30 s


@pytest.fixture
def tc(ctx: morphz.Context, ws: Path) -> ToolContext:
    return ToolContext(ctx, "s", "a", ws)


# --- the child's clock ---------------------------------------------------------------------


def test_waiting_for_the_next_file_after_a_binary_one_is_not_a_slow_regex(tmp_path: Path) -> None:
    """While the child waits for the agent's process to find the next file, no line is being
    matched, so the one-line limit must not run (scan sets ``clock.busy = False`` after each
    text file for that reason). After a BINARY file it does not: the `continue` skips that
    line, so the clock still shows (binary file, line 0) as being matched, and once the walk
    takes over LINE_TIMEOUT_S (1 s) to reach the next file (a big folder, files over 2 MB,
    a rarely matching glob) the search is refused as "the regex 'hel+o' took over 1 s to
    compile: it backtracks too much" - for any regex, however simple. Seen end to end with a
    walk that pauses 1.5 s after each file: a.bin then b.txt -> that refusal; without a.bin
    -> the match. Here the ticks that come during the wait are delivered by hand."""
    (tmp_path / "a.bin").write_bytes(b"\0binary")
    (tmp_path / "b.txt").write_text("hello\n", encoding="utf-8")
    clock = scanlines.Clock(line_s=0.0, total_s=3600.0)  # any line seen on two ticks is slow

    def files() -> Any:
        yield "a.bin", str(tmp_path / "a.bin")
        clock.tick(signal.SIGALRM, None)  # the agent's process is still walking: ticks come
        clock.tick(signal.SIGALRM, None)
        yield "b.txt", str(tmp_path / "b.txt")

    found = scanlines.Found()
    try:
        scanlines.scan(
            files(),
            lambda line: (0, 3) if "hel" in line else None,
            limit=10,
            line_chars=100,
            shown_chars=300,
            found=found,
            clock=clock,
        )
    except scanlines.SlowLine as slow:
        pytest.fail(f"refused as a slow line at {slow.rel}:{slow.number} while waiting for a file")
    assert found.matches == [["b.txt", 1, "hello", 1]]
    assert found.binary == 1


# --- the child's start: memory cap, interpreter --------------------------------------------


def test_a_regex_search_works_where_the_memory_cap_cannot_be_set(
    tc: ToolContext, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 2 GiB RLIMIT_AS cap is a safeguard; where the system refuses it, the search must
    still run (without the cap). On macOS, setrlimit(RLIMIT_AS, (limit, RLIM_INFINITY))
    raises ValueError "current limit exceeds maximum limit" (CPython issues #78783, #84698;
    projects such as FLAML and libjs-test262 skip the cap there). scanlines.main calls
    _cap_memory unguarded, so the child dies with a traceback and EVERY regex search fails:
    "the regex search failed (exit status 1: ValueError: ...)". Simulated here by a child
    whose resource.setrlimit raises as macOS's does, then runs scanlines.py unchanged."""
    (ws / "a.txt").write_text("needle\n", encoding="utf-8")
    child = tmp_path / "mac_like_child.py"
    child.write_text(
        "import resource, runpy\n"
        "def refuse(*args):\n"
        "    raise ValueError('current limit exceeds maximum limit')\n"
        "resource.setrlimit = refuse\n"
        f"runpy.run_path({str(linesearch._CHILD)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(linesearch, "_CHILD", child)
    out = run(search_files_tool(), tc, query="ne+dle", regex=True)
    assert [(m["path"], m["line"]) for m in out.data["matches"]] == [("a.txt", 1)]


def test_a_regex_search_whose_interpreter_answers_nothing_is_a_tool_error(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sys.executable is not always a Python that runs scanlines.py (an embedding host, a
    frozen application, a wrapper): linesearch already turns a missing one, one that cannot
    start and one that exits non-zero into a ToolError saying to pass regex=false. One that
    exits 0 without the JSON answer (here /bin/true) raises json.JSONDecodeError out of
    regex_search: the engine reports "search_files failed: JSONDecodeError ... (a fault of
    the tool)". Any answer that is not the child's JSON must be the same ToolError."""
    true = shutil.which("true")
    assert true is not None
    (ws / "a.txt").write_text("x\n", encoding="utf-8")
    monkeypatch.setattr(sys, "executable", true)
    try:
        run(search_files_tool(), tc, query="x", regex=True)
    except ToolError as exc:
        assert "regex=false" in exc.message
    except Exception as exc:
        pytest.fail(f"not a ToolError: {type(exc).__name__}: {exc}", pytrace=False)
    else:
        pytest.fail("a search whose child answered nothing reported success")


# --- cancellation ----------------------------------------------------------------------------


_BUSY_CHILD = """\
import sys, time
sys.stdin.readline()  # the request; then it works (a large workspace, up to 30 s)
time.sleep(600)
"""


def test_a_cancelled_regex_search_kills_its_child(
    ctx: morphz.Context, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An activation cancelled during a regex search (SIGTERM from kill/CI/a supervisor, which
    the CLI turns into a cancellation; a host's task.cancel() or wait_for) must end promptly:
    the search's child process is killed, as exec kills its command's group. Today nothing
    reaches the child: the engine's settle() waits for the tool's thread, which waits for the
    child to answer on its own - up to REGEX_SEARCH_S (30 s), or the parent's kill at 40 s -
    and only then is the activation recorded interrupted. (A terminal's Ctrl-C reaches the
    child only because it shares the process group.) The child here stands for one still
    working through a large workspace."""
    busy = tmp_path / "busy_child.py"
    busy.write_text(_BUSY_CHILD, encoding="utf-8")
    monkeypatch.setattr(linesearch, "_CHILD", busy)
    (workspace / "a.txt").write_text("x\n", encoding="utf-8")
    started = threading.Event()
    children: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)
        children.append(child)
        started.set()
        return child

    monkeypatch.setattr(linesearch.subprocess, "Popen", popen)
    call = ToolCall("c1", "search_files", json.dumps({"query": "x", "regex": True}))

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse(None, (call,))

    engine = make_engine(ctx, FunctionModel(model), workspace)

    async def scenario() -> bool:
        task = asyncio.ensure_future(engine.run("search", session="ops"))
        assert await asyncio.to_thread(started.wait, 30), "the search's child never started"
        task.cancel()
        ended, _ = await asyncio.wait({task}, timeout=SETTLE_S)
        if not ended:  # clean up: end the child ourselves, then let the run record its end
            for child in children:
                child.kill()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return bool(ended)

    try:
        ended = asyncio.run(scenario())
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert ended, f"the cancelled run had not ended {SETTLE_S:g} s later: its child still ran"


# --- Tool.check before approval --------------------------------------------------------------


def test_a_tool_check_that_fails_unexpectedly_is_that_calls_fault(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Tool.check (new: run before approval) is a host's hook like Tool.run. An exception of
    a tool's run that is no MorphzError is contained by run_guarded: that call's error result
    ("... failed: ValueError: ... (a fault of the tool)"), and the activation goes on. The same
    exception from the tool's check escapes _run_tool unguarded and stops the whole activation
    ("an unexpected error stopped the activation: ValueError: ..."), so a host tool with a
    buggy check (or one validating with a library that raises its own errors) ends every
    activation that calls it. It must be contained like the run's."""

    def check(args: dict[str, Any]) -> None:
        raise ValueError("the host's validator broke")

    async def never(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
        return ToolOutcome("ran")

    schema = ToolSchema("probe", "A host's tool.", {"type": "object", "properties": {}})
    calls = (ToolCall("c1", "probe", "{}"),)
    asked: list[int] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(1)
        return ModelResponse(None, calls) if len(asked) == 1 else ModelResponse("done", ())

    engine = make_engine(ctx, FunctionModel(model), workspace)
    engine.tools.add(Tool(schema, never, "allow", check=check))
    try:
        result = asyncio.run(engine.run("hi", session="ops"))
    except ValueError as exc:
        pytest.fail(f"the check's error stopped the activation: {exc}", pytrace=False)
    assert result.state == "delivered", result.reason
