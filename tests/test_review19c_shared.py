"""Review 19c: several agents sharing one context at once: rebase, recovery and staging, a busy
store, with real SQLite and real processes (a child process killed at a chosen instant).

Each test fails on the code it was written against because of the defect its docstring names.
No timed assertions: the waits only stop a hung child from hanging the suite."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import morphz
from agents import import_log_lines, make_engine
from morphz.capacity import Budget
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from stores import HANG_GUARD, SRC, run_morphz

# A child that runs one activation (a FunctionModel that answers at once) in session "a" of
# context "c" and is killed with SIGKILL at the instant argv[2] names (a real process dying
# there, as the OOM killer or a power loss would kill it).
_KILLED_CHILD = """
import asyncio, json, os, signal, sys
import morphz
from morphz import staging
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime import ending
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

where = sys.argv[2]
finish, stage = ending.Ending.finish, staging.stage

async def killed_before_the_end(self, state, reason, *more):
    if where == "before-the-end" and state == "delivered":
        os.kill(os.getpid(), signal.SIGKILL)
    return await finish(self, state, reason, *more)

def killed_before_staging(ctx, session, activation, reply_seq, outcome):
    if where == "before-staging" and outcome.observation.kind == "tx_receipt":
        os.kill(os.getpid(), signal.SIGKILL)
    return stage(ctx, session, activation, reply_seq, outcome)

ending.Ending.finish = killed_before_the_end
staging.stage = killed_before_staging
asked = []

def agent(request):
    asked.append(request)
    if where == "before-staging" and len(asked) == 1:
        tx = '(context-tx (base-version 0) (create task/answer (value 42)))'
        return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))
    if where == "awaiting-approval" and len(asked) == 1:
        command = json.dumps({"command": "echo deployed > deployed.txt"})
        return ModelResponse(None, (ToolCall("c1", "exec", command),))
    return ModelResponse("the answer is 42")

async def person_away(tool, args):  # the process dies while the person is asked
    os.kill(os.getpid(), signal.SIGKILL)

with morphz.open(sys.argv[1]) as db:
    ctx = db.context("c", create=True)
    tools = build_tools(Settings())
    config = RuntimeConfig(workspace=sys.argv[3], approver=person_away)
    engine = Engine(ctx, FunctionModel(agent), tools, config)
    asyncio.run(engine.run("what is the answer?", session="a"))
"""


def _killed_child(tmp_path: Path, where: str) -> Path:
    store = tmp_path / "m.db"
    argv = [sys.executable, "-c", _KILLED_CHILD, str(store), where, str(tmp_path)]
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        argv, check=False, env=env, capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return store


# 1. ------------------------------------------------------------- a delivered reply, then a kill


def test_a_reply_delivered_to_the_inbox_is_not_recorded_as_an_interrupted_activation(
    tmp_path: Path,
) -> None:
    """The engine delivers a reply in two writes: the ``agent_reply`` observation
    (engine.py ``_observe_reply``), then the activation's end (``Ending.finish``). A process
    killed between them leaves the reply in the inbox, its root no longer awaited, and
    recovery (run here from another process's point of view: ``interrupt_orphaned``) then
    records the activation ``interrupted`` by a dead process. The log says both that the
    agent answered and that it never finished: the next activation (and ``context requests``)
    sees a delivered answer of an interrupted run, and a user re-runs work already done.
    Either both land or neither: the reply and the end in one write."""
    store = _killed_child(tmp_path, "before-the-end")
    with morphz.open(store) as db:
        ctx = db.context("c")
        (act,) = ctx.activations()
        assert act.state == "running"
        assert ctx.interrupt_orphaned() == [act.activation_id]
        ended = ctx.activation(act.activation_id)
        assert ended is not None
        replies = [
            e
            for e in ctx.events()
            if e.kind == "agent_reply" and (e.meta or {}).get("activation") == act.activation_id
        ]
        assert ctx.audit().differences == []
        # a consistent log: delivered with its reply in the inbox, or interrupted without one
        assert (ended.state == "delivered") == bool(replies), (ended.state, replies)


# 2. ------------------------------------------------- a batch built while another process commits

_BATCH = re.compile(r'\(batch "(\d+) of (\d+) shown, (\d+) left out"\)')
_INBOX_ITEM = re.compile(r"^ \(observation (@e\d+) ", re.M)


class _RetiresMidBatch(morphz.Context):
    """A context whose first batch compile (a maintenance compile showing only some
    observations) is followed by another process's commit retiring ``target``: what a second
    agent on the same context does in the milliseconds between two compiles of a batch."""

    def __init__(self, db: morphz.Database, context_id: str, store: Path, target: str) -> None:
        super().__init__(db, context_id)
        self.store, self.target, self.done = store, target, False

    def encode(self, options: Any = None, **fields: Any) -> Any:
        encoding = super().encode(options, **fields)
        if not self.done and options is not None and options.only_observations is not None:
            self.done = True
            tx = f'(context-tx (base-version 0) (reason "processed") (retire {self.target}))'
            other = run_morphz(
                self.store.parent,
                "context",
                "tx",
                "c",
                "--file",
                "-",
                "--db",
                str(self.store),
                stdin=tx,
            )
            assert other.returncode == 0, other.stderr
        return encoding


def test_a_batch_states_the_observations_it_shows_when_another_process_retired_one_meanwhile(
    tmp_path: Path,
) -> None:
    """A maintenance batch's kernel says how many inbox items it shows and leaves out
    (``(batch "N of T shown, M left out")``, the protocol's capacity entry). The engine counts
    N as the observations it asked for and T as the active ones of the compile it chose them
    from (engine.py ``_scheduling`` with ``_batch``'s ``active_observations``), not what the
    compiled batch shows: when another agent retires one of the chosen observations between
    those compiles, the request shows one item fewer than it says, and T counts an
    observation no longer active. The figures should be those of the snapshot the request
    shows (count the compiled batch's observations, and the active ones in that snapshot)."""
    store = tmp_path / "m.db"
    with morphz.open(store) as db:
        ctx = db.context("c", create=True)
        import_log_lines(ctx, 40)
        ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=6_000, reserve=200))
    seen: list[ModelRequest] = []
    active: list[int] = []  # the active observations as each request is answered

    with morphz.open(store) as db:
        ctx = _RetiresMidBatch(db, "c", store, "@e1")

        def agent(request: ModelRequest) -> ModelResponse:
            seen.append(request)
            active.append(len(ctx.mind().observations))
            return ModelResponse("done")

        engine = make_engine(ctx, FunctionModel(agent), tmp_path)
        result = asyncio.run(engine.run("summarise the log", session="ops"))
        assert result.state == "delivered", result.reason
        assert ctx.done
        fact = _BATCH.search(seen[0].encoding)
        assert fact is not None, "the first request is a batch"
        said_shown, said_active, said_left = map(int, fact.groups())
        inbox = seen[0].encoding.split("(observation-state", 1)[0]
        shown = _INBOX_ITEM.findall(inbox)
        assert "@e1" not in shown  # the batch was compiled after the retire
        now = active[0]
        assert (said_shown, said_active, said_left) == (len(shown), now, now - len(shown))


# 3. ------------------------------------------------------- a commit landed, its receipt did not


def test_recovery_does_not_tell_the_agent_a_landed_transaction_may_have_run_in_part(
    tmp_path: Path,
) -> None:
    """``context_tx`` commits in one write and its receipt is staged in a second
    (calls.py ``Calls.ended`` -> ``staging.stage``). A process killed between them leaves the
    commit in the mind and no trace of it for its call: recovery (activating.py
    ``unanswered``) then tells the agent "context_tx has no result: ... it may have run, in
    whole or in part, or not at all; check before running it again". A transaction never
    runs in part (the protocol: "the whole transaction commits or nothing does"), and this
    one did commit. Recovery should answer the call with what landed (the commit names its
    activation and call, or the receipt is staged in the commit's own write), as it does for
    every other call whose outcome the store holds."""
    store = _killed_child(tmp_path, "before-staging")
    with morphz.open(store) as db:
        ctx = db.context("c")
        assert [f.id for f in ctx.mind().frames] == ["task/answer"]  # the commit landed
        commit = next(e for e in ctx.events() if e.kind == "context_tx_committed")
        (act,) = ctx.activations()
        assert ctx.interrupt_orphaned() == [act.activation_id]
        (answer,) = [
            e
            for e in ctx.events()
            if e.kind in ("tool_result", "tx_receipt") and e.seq > commit.seq
        ]
        text = answer.text or ""
        assert "in part" not in text, text
        assert commit.ref in text, text  # it names what landed
        assert ctx.audit().differences == []


# 4. ---------------------------------------------------- killed while a person was being asked


def test_recovery_does_not_say_a_call_never_approved_may_have_run(tmp_path: Path) -> None:
    """An ``ask`` tool's call records its ``approval_request`` event, then waits for the person
    (calls.py ``_authorised``); the tool runs only after an ``approval_result`` says approved.
    A process killed while the person was being asked (a closed terminal's SIGKILL, the OOM
    killer) leaves the request with no answer, and recovery tells the agent "exec has no
    result: ... it may have run, in whole or in part, or not at all; check before running it
    again", though the log shows it never ran: no approval was given. The agent then spends
    steps checking for a deployment that never happened, or distrusts a workspace that is
    as it was. Recovery should say the call did not run (it was awaiting approval), as the
    log proves, and that it may be asked for again."""
    store = _killed_child(tmp_path, "awaiting-approval")
    assert not (tmp_path / "deployed.txt").exists()
    with morphz.open(store) as db:
        ctx = db.context("c")
        asked = next(e for e in ctx.events() if e.kind == "approval_request")
        assert not [e for e in ctx.events() if e.kind == "approval_result"]
        (act,) = ctx.activations()
        assert ctx.interrupt_orphaned() == [act.activation_id]
        (answer,) = [e for e in ctx.events() if e.kind == "tool_result" and e.seq > asked.seq]
        text = answer.text or ""
        assert "may have run" not in text, text
        assert ctx.audit().differences == []
