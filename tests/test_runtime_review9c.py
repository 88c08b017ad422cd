"""Review 9c of the runtime code written in the ninth session (cli_agent's prepare/Agent and chat
loop, the engine's per-call safety net and cancellation paths, the budget keys): each test fails
on the code it was written against and states the behaviour expected once fixed."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from agents import cancel_while_starting
from agents import make_engine as _engine
from agents import script_spec as _script
from morphz import owners
from morphz.capacity import Budget
from morphz.interfaces import cli_agent
from morphz.interfaces.cli import main
from morphz.owners import Owner, host_name
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

_VERSION = re.compile(r"\(mind-version (\d+)\)")
LINUX_PROC = Path("/proc/self/stat").exists() and Path("/proc/sys/kernel/random/boot_id").exists()


# --- 1. the per-call safety net swallows the end of input at an approval prompt ---------------


def test_end_of_input_at_an_approval_prompt_ends_the_chat_not_the_tool(env: Path) -> None:
    """docs/decisions.md ("`morphz chat` and `exec` edges"): end of input at an approval prompt
    ends the chat with exit 0, the turn recorded interrupted; cli_agent._converse catches the
    click.Abort for that. Since the engine's per-call safety net (`except Exception` in
    Engine._run_tool, review 9b) the Abort raised by the approver is caught as "a fault of the
    tool": the call's result says "exec failed: Abort:  (a fault of the tool)", no
    approval_result answers the approval_request, and the activation goes on, asking the
    (gone) user for every later call and spending model requests until the model gives up or
    the step limit. Expected: the first approval prompt that meets the end of input ends the
    turn (interrupted) and the chat; nothing is blamed on the tool and no second approval is
    asked."""
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]},
        {"tool_calls": [{"name": "exec", "arguments": {"command": "echo again"}}]},
        {"reply": "ok"},
    ]
    args = ["chat", "--model", _script(env, steps), "--workspace", str(env / "ws")]
    result = CliRunner().invoke(main, [*args, "--db", str(env / "m.db")], input="run it\n")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    with morphz.open(env / "m.db") as db:
        ctx = db.context("context-default")
        events = ctx.events()
        states = [a.state for a in ctx.activations()]
    blamed = [e.text for e in events if "a fault of the tool" in (e.text or "")]
    assert blamed == [], blamed
    assert [e.kind for e in events].count("approval_request") == 1
    assert "agent> ok" not in result.stdout
    assert states == ["interrupted"], states


# --- 2. the context_tx budget check ignores the engine's budget --------------------------------


def test_a_transaction_past_the_configured_critical_level_is_refused(
    ctx: morphz.Context, workspace: Path
) -> None:
    """docs/decisions.md ("`budget` refusals"): a transaction that adds to the encoding is refused
    with `budget` when the frames in view, with the protocol, would pass the critical level, so
    that a request can always be served. The engine measures requests against its budget
    (RuntimeConfig.budget_keys, a configuration's [budget] table, over the stored budget), and
    the kernel shows that budget's levels, but the context_tx tool commits through ctx.commit,
    whose check reads the stored budget only (here the default: critical 116,000). With
    [budget] window = 12000 (critical 10,000) the agent commits a frame of about 9,000 tokens:
    it is accepted, the next request's minimum no longer fits, and the activation fails with
    "even the minimum maintenance request needs ... tokens" (every later one will too).
    Expected: the transaction is refused with code `budget` against the budget the engine
    uses, and the activation is delivered."""
    body = " ".join(f"word{i}" for i in range(4000))

    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) > 1:  # it read its receipt
            return ModelResponse("done")
        version = _VERSION.findall(request.encoding)[-1]
        create = f'(create notes/big (t "{body}"))'
        tx = f'(context-tx (base-version {version}) (reason "notes") {create})'
        return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))

    keys = {"window": 12_000, "output_reserve": 1_000, "reserve": 1_000}
    engine = _engine(ctx, FunctionModel(model), workspace, budget_keys=keys)
    assert engine.encoding().pressure.level == "normal"
    result = asyncio.run(engine.run("take notes"))
    receipts = [ctx.event(r) for r in result.events if ctx.event(r).kind == "tx_receipt"]
    assert len(receipts) == 1
    receipt = json.loads(receipts[0].text or "{}")
    assert receipt.get("ok") is False and receipt["error"]["code"] == "budget", receipt
    assert result.state == "delivered", result.reason


# --- 3. Ctrl-C during a chat turn -----------------------------------------------------------


def test_cancelling_a_chat_turn_cancels_its_activation(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Ctrl-C during a chat turn: asyncio.Runner cancels the task it runs, cli_agent._follow.
    _follow runs the activation as a task of its own and waits for it with asyncio.wait, which
    does not cancel what it waits for: the turn's task ends at once while the activation goes
    on running. chat_command's `finally` then closes the model's client (close_model) with the
    activation's request still in flight on it, and the activation is cancelled only later, by
    the Runner's shutdown, so what it records (interrupted, or a provider error from the closed
    client, or further tool calls) depends on timing. Expected: cancelling _follow cancels the
    activation and waits for it, so when the turn's cancellation is over the activation is no
    longer running (recorded interrupted)."""
    started = asyncio.Event()

    async def model(_request: ModelRequest) -> ModelResponse:
        started.set()
        await asyncio.Event().wait()  # a request in flight, answered never
        raise AssertionError("unreachable")

    engine = _engine(ctx, FunctionModel(model), workspace)
    running_after_cancel: list[str] = []

    async def scenario() -> None:
        turn = asyncio.ensure_future(cli_agent._follow(ctx, "default", engine.run("hello")))
        await started.wait()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        running_after_cancel.extend(a.activation_id for a in ctx.activations(running_only=True))

    asyncio.run(scenario())
    assert running_after_cancel == [], "the activation was still running after its turn ended"
    assert [a.state for a in ctx.activations()] == ["interrupted"]


class _BlockingStdin(io.RawIOBase):
    """Standard input that gives ``first`` and then blocks (a person who has not typed yet)
    until ``release`` is set, then ends."""

    def __init__(self, first: bytes) -> None:
        self.chunks = [first]
        self.waiting = threading.Event()
        self.release = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if len(buffer) == 0:
            return 0
        if self.chunks:
            data = self.chunks.pop(0)
            buffer[: len(data)] = data
            return len(data)
        self.waiting.set()
        self.release.wait()
        return 0


def test_ctrl_c_at_an_approval_prompt_ends_the_chat_without_another_line(env: Path) -> None:
    """A person presses Ctrl-C at "allow exec(...)? [y/N]". The approver (cli_agent._ask) reads
    the answer with click.confirm in a thread of the event loop's default executor; Ctrl-C
    cancels the turn, but the Runner's shutdown (shutdown_default_executor) waits for that
    thread, which is blocked reading standard input: the chat does not end until another line
    is typed (checked by hand: still running 5 s after SIGINT, exits 1 once Enter is pressed).
    Expected: Ctrl-C at an approval prompt ends the chat promptly, the turn recorded
    interrupted, with no further input. (Here the input is released after 10 s so the test
    ends either way; the release must not have been needed.)"""
    steps = [{"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]}]
    stdin = _BlockingStdin(b"run it\n")
    done = threading.Event()
    released_by_timeout: list[bool] = []
    main_thread = threading.main_thread().ident
    assert main_thread is not None

    def press_ctrl_c() -> None:
        if not stdin.waiting.wait(30):  # the approval prompt is waiting for an answer
            stdin.release.set()
            return
        signal.pthread_kill(main_thread, signal.SIGINT)
        if not done.wait(10):
            released_by_timeout.append(True)
            stdin.release.set()

    helper = threading.Thread(target=press_ctrl_c, daemon=True)
    helper.start()
    args = ["chat", "--model", _script(env, steps), "--workspace", str(env / "ws")]
    try:
        result = CliRunner().invoke(
            main, [*args, "--db", str(env / "m.db")], input=io.BufferedReader(stdin)
        )
    finally:
        done.set()
        stdin.release.set()
        helper.join(30)
    assert stdin.waiting.is_set(), (result.stdout, result.stderr, result.exception)
    assert not released_by_timeout, "the chat waited for another line after Ctrl-C"
    with morphz.open(env / "m.db") as db:
        assert [a.state for a in db.context("context-default").activations()] == ["interrupted"]


# --- 4. cancelled twice while the activation starts --------------------------------------------


def test_a_second_cancellation_while_the_start_is_written_leaves_no_activation_running(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Engine.run shields the start's write and, when cancelled during it, waits for it with a
    plain `await start` to record the end (docs/decisions.md: "no activation stays running
    under a live owner"). A second cancellation during that wait (asyncio.run's shutdown after
    a second Ctrl-C, a timeout around a cancelled host task) cancels the `start` future itself:
    the thread still records the start, but nothing records the end, and the activation stays
    running under its live owner (interrupt_orphaned cannot mark it; its root request stays
    causally protected). Expected: whatever the number of cancellations, once the start is
    written the end is recorded too (interrupted)."""
    engine = _engine(ctx, FunctionModel(lambda _r: ModelResponse("done")), workspace)
    cancel_while_starting(ctx, engine, "default", cancels=2)
    assert ctx.activations(running_only=True) == []


# --- 5. a refused exec/chat that writes to the store anyway ------------------------------------


def test_budget_keys_refused_for_a_new_context_create_no_store(env: Path) -> None:
    """docs/decisions.md ("`morphz chat` and `exec`, ninth review"): a refused command creates
    neither a store nor a context; "a [budget] table that makes no budget over the one a new
    context would get is refused before that context is created". The store is not spared:
    morphz.open creates the --db file (and its folder) before Agent.open_context checks the
    keys, so `exec hi --db fresh/m.db` with [budget] window = 9000 exits 1 and leaves a new,
    empty store behind. Expected: exit 1 and no file at the --db path."""
    (env / "morphz.toml").write_text("[budget]\nwindow = 9000\n", encoding="utf-8")
    fresh = env / "fresh" / "m.db"
    model = _script(env, [{"reply": "ok"}])
    for command in (["exec", "hi"], ["chat"]):
        args = [*command, "--model", model, "--workspace", str(env / "ws"), "--db", str(fresh)]
        result = CliRunner().invoke(main, args, input="/quit\n")
        assert result.exit_code == 1, (command, result.stdout, result.stderr)
        assert "[budget] window = 9000" in result.stderr
        assert not fresh.exists(), f"{command[0]} refused for its [budget] created the store"


@pytest.mark.skipif(not LINUX_PROC, reason="orphans are told by /proc")
def test_budget_keys_refused_over_an_existing_context_leave_it_unchanged(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: exit 1 leaves the store unchanged. exec on an existing context whose budget
    the [budget] keys cannot be set over is refused (Agent.engine calls Engine.budget()), but
    only after Agent.open_context marked the context's orphaned activations interrupted: the
    refused command writes an activation_finished event per orphan (and says so on stderr).
    Expected: the keys are checked against the context's budget before anything is written;
    the orphan stays as it was, for the next command that runs."""
    db_path = env / "m.db"
    with morphz.open(db_path) as db:
        ctx = db.context("small", create=True)
        ctx.set_budget(Budget(window=8_000, output_reserve=0))
        root = ctx.observe("user_message", "left behind")
        with monkeypatch.context() as m:  # started by a process that has since died
            m.setattr(owners, "current_owner", lambda: Owner(host_name(), os.getpid(), "gone:1"))
            orphan = ctx.start_activation("default", root.ref)
        before = ctx.status().last_seq
    (env / "morphz.toml").write_text("[budget]\nreserve = 9000\n", encoding="utf-8")
    model = _script(env, [{"reply": "ok"}])
    args = ["exec", "small", "hi", "--model", model, "--workspace", str(env / "ws")]
    result = CliRunner().invoke(main, [*args, "--db", str(db_path)])
    assert result.exit_code == 1 and "must exceed the maintenance reserve" in result.stderr
    with morphz.open(db_path) as db:
        ctx = db.context("small")
        assert ctx.status().last_seq == before, "the refused exec wrote events"
        assert [(a.activation_id, a.state) for a in ctx.activations()] == [(orphan, "running")]
