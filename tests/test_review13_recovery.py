"""Review 13 (crash durability and recovery with real processes): each test fails on the code it
was written against; its docstring says what is expected.

The processes are real: ``morphz exec`` with a scripted model run as a child and killed with
SIGKILL while its shell tool runs, and a child killed right after starting an activation. (The
review's tests of a deleted ``-wal`` file, a full disk and a killed recall-index rebuild are in
test_review13_store.py.)

Checked and found sound (no test here, since those pass): a child killed inside migration 15's
Python step of a schema-0003 store, and inside the rebuild that follows the upgrade (before and
at its swap), leaves a store that reopens at schema 16, audits clean and rebuilds its index on
the next open; a killed ``exec`` leaves its user message, start and model reply, audits clean,
and the next ``exec`` marks the orphan interrupted (saying so on stderr) and runs; SIGHUP and
SIGTERM during a tool end the activation as interrupted and kill the tool's process group; a
write on a full disk is a ``StoreError`` ("database or disk is full") that writes nothing, and
the store works and audits clean once space is freed; an ``exec`` whose own tool fills the disk
exits 1 with that error and its activation is recovered by the next command that recovers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import morphz
from morphz import events as ev
from morphz import owners
from stores import cli_env, run_cli, user_config

CONTEXT = "context-default"
LINUX_PROC = Path("/proc/self/stat").exists()
WAIT_S = 60.0  # how long a child may take to reach the point where it is killed (not asserted)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until ``path`` exists (the child reached the point to kill it at)."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the child ended by itself ({proc.returncode})")
        if time.monotonic() > deadline:
            raise AssertionError(f"the child did not reach {path.name}")
        time.sleep(0.05)


def _live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies, already dead, left out)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


# ---------------------------------------------------------------- exec killed mid-tool


@pytest.fixture
def killed_exec(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """``morphz exec`` killed with SIGKILL while its scripted model's ``exec`` call runs: the
    command has done its work (``deployed.txt``) and sleeps. Yields the store and the process
    group of the command; the group is killed at the end whatever happened."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "home").mkdir()
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')  # the user's: not a project's
    command = "echo $$ > pgid.txt; echo v2 > deployed.txt; sleep 600; echo done"
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": command, "timeout_s": 600}}]},
        {"reply": "deployed"},
    ]
    (tmp_path / "steps.json").write_text(json.dumps(steps), encoding="utf-8")
    store = tmp_path / "morphz.db"
    args = ["exec", "deploy v2", "--model", "scripted:steps.json", "--workspace", "ws"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "morphz", *args, "--db", str(store)],
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pgid = 0
    try:
        _wait_for(ws / "deployed.txt", proc)
        pgid = int((ws / "pgid.txt").read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        yield store, pgid
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


def test_a_call_whose_process_was_killed_is_told_to_the_next_activation(
    killed_exec: tuple[Path, int], tmp_path: Path
) -> None:
    """``morphz exec`` killed with SIGKILL (the OOM killer, ``kill -9``, a crash, a reboot)
    while its ``exec`` call runs: the command's work is done (it deployed), the model reply
    holding the call is recorded (@e3), and no result is. ``morphz context recover`` (or the
    next ``exec``/``chat``) marks the activation interrupted and nothing else: the next
    activation's inbox shows only the old user message, no trace of the call, so the agent may
    run the deployment again. For Ctrl-C and SIGTERM the runtime records "exec was interrupted
    while it ran: its effect may have happened; check before running it again"
    (``runtime/calls.py:_stopped_while_running``), because "a workspace change is never left out
    of the context" (decisions.md, the runtime loop); the recovery of a killed process
    (``activating.py:interrupt_orphaned``) does not do the same for the external calls of the
    activation's last model reply that have no result. Expected: after recovery, a
    ``tool_result`` answers the unanswered call, and the next encoding shows it."""
    store, _ = killed_exec
    recovered = run_cli(tmp_path, "context", "recover", "--db", str(store))
    assert recovered.returncode == 0, recovered.stderr
    with morphz.open(store, create=False) as db:
        ctx = db.context(CONTEXT)
        assert ctx.audit().ok
        assert ctx.activations(running_only=True) == []
        events = ctx.events()
        reply = next(e for e in events if e.kind == ev.MODEL_REPLY)
        assert reply.payload is not None and reply.payload["tool_calls"], "the call was recorded"
        answers = [e for e in events if e.seq > reply.seq and e.kind == "tool_result"]
        assert answers, (
            "the killed activation's exec call (it ran: deployed.txt exists) has no result: "
            f"after recovery the context holds {[(e.ref, e.kind) for e in events]}"
        )
        assert answers[0].ref in ctx.encode().text


@pytest.mark.skipif(not LINUX_PROC, reason="reads process groups from /proc")
def test_a_command_of_a_killed_exec_does_not_outlive_it(
    killed_exec: tuple[Path, int], tmp_path: Path
) -> None:
    """The ``exec`` tool runs its command in a session of its own (``start_new_session=True``,
    ``runtime/tools/shell.py``) and kills that group only from the running process ("no
    background process outlives the call", its schema says). When ``morphz exec`` is killed
    with SIGKILL, nothing kills the group: the command (``sleep 600`` here; a build, a
    deployment, a server in real runs) goes on, detached from the terminal and out of reach of
    a job control or a CI runner that kills the agent's process group, and neither the next
    ``exec`` nor ``morphz context recover`` ends it. Expected: the command does not outlive the
    agent, at the latest once the orphan is recovered (e.g. the group killed by a parent-death
    signal of a small supervisor, or its pgid and start time recorded with the call and killed
    by the recovery)."""
    store, pgid = killed_exec
    recovered = run_cli(tmp_path, "context", "recover", "--db", str(store))
    assert recovered.returncode == 0, recovered.stderr
    deadline = time.monotonic() + 10  # a kill delivered asynchronously lands within this
    while _live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = _live_members(pgid)
    assert not survivors, (
        f"the killed agent's command still runs after recovery: processes {survivors} of "
        f"group {pgid}"
    )


# ---------------------------------------------------------------- recovery's words


ORPHAN = """
import os, sys
import morphz
db = morphz.open(sys.argv[1])
ctx = db.context("context-default", create=True)
event, act = ctx.begin_activation("default", "deploy v2")
print(event.ref, flush=True)
os.kill(os.getpid(), 9)
"""


def test_retiring_the_request_of_a_dead_activation_says_to_recover(tmp_path: Path) -> None:
    """An activation whose process was killed stays ``running`` until something recovers it,
    and its root request stays causally protected. An operator who then retires that request
    (``morphz context tx``) is told "@e1 is the root request of a running activation: the
    runtime keeps it protected until its reply is delivered; drop this operation" — no reply
    will ever be delivered, its owner is provably gone, and nothing names ``morphz context
    recover``, the command that lifts the protection (``context status`` too says only
    ``running activations 1``). Expected: when the activation's owner is known to be dead, the
    refusal says so and names ``morphz context recover``."""
    (tmp_path / "home").mkdir()
    store = tmp_path / "morphz.db"
    child = subprocess.run(
        [sys.executable, "-c", ORPHAN, str(store)],
        env=cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    root = child.stdout.strip()
    tx = tmp_path / "retire.tx"
    tx.write_text(f'(context-tx (base-version 0) (reason "done") (retire {root}))\n')
    refused = run_cli(tmp_path, "context", "tx", "--file", str(tx), "--db", str(store))
    assert refused.returncode == 1, refused.stderr
    assert "recover" in refused.stderr, (
        f"the root of an activation whose process is gone, and no word of recovery: "
        f"{refused.stderr.strip()}"
    )


def _reply(ctx: morphz.Context, activation: str, *calls: tuple[str, str]) -> ev.Event:
    payload = {
        "activation": activation,
        "tool_calls": [{"id": c, "name": n, "arguments": "{}"} for c, n in calls],
    }
    return ctx.record(ev.MODEL_REPLY, None, payload=payload, session="default")


def test_recovery_answers_only_the_last_replys_calls_that_have_no_result(tmp_path: Path) -> None:
    """The recovery answers each call of the activation's last model reply that no observation
    answers (by ``meta.call``), in the same transaction as the activation's end: not a call an
    earlier reply made, not one whose result landed, and without ticking the clock (whether the
    call ran is unknown). A second recovery finds nothing left to answer."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context(CONTEXT, create=True)
        _, act = ctx.begin_activation("default", "deploy v2")
        _reply(ctx, act, ("c-old", "exec"))
        ctx.observe_batch(
            [morphz.Observation("tool_result", "ok", meta={"tool": "exec", "call": "c-old"})],
            session="default",
        )
        reply = _reply(ctx, act, ("c-1", "exec"), ("c-2", "write_file"), ("c-3", "read_file"))
        ctx.observe_batch(
            [morphz.Observation("tool_result", "done", meta={"tool": "exec", "call": "c-1"})],
            session="default",
        )
        clock = ctx.status().clock
        assert ctx.interrupt_running() == [act]
        events = [e for e in ctx.events() if e.seq > reply.seq]
        answers = [
            e for e in events if e.kind == "tool_result" and e.meta and e.meta["call"] != "c-1"
        ]
        assert [(e.meta or {})["call"] for e in answers] == ["c-2", "c-3"]
        assert all(
            "may have run" in (e.text or "") and reply.ref in (e.text or "") for e in answers
        )
        assert events[-1].kind == "activation_finished"
        assert events[-1].seq == answers[-1].seq + 1, "the answers and the end are one write"
        assert ctx.status().clock == clock, "an answer whose call may not have run does not tick"
        encoded = ctx.encode().text
        assert all(e.ref in encoded for e in answers)
        assert ctx.audit().ok
        assert ctx.interrupt_running() == []


def test_recovery_of_an_activation_that_never_replied_writes_only_its_end(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context(CONTEXT, create=True)
        start, act = ctx.begin_activation("default", "deploy v2")
        assert ctx.interrupt_running() == [act]
        after = [e.kind for e in ctx.events() if e.seq > start.seq]
        assert after == ["activation_started", "activation_finished"]


def test_an_activation_this_process_still_runs_is_not_recovered(tmp_path: Path) -> None:
    """The process that started an activation and has not ended it still runs it: recovery in
    that same process leaves it alone; once its run ended without recording the end (the
    engine's run ended, ``owners.untrack``), recovery marks it."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context(CONTEXT, create=True)
        _, act = ctx.begin_activation("default", "deploy v2")
        assert ctx.interrupt_orphaned() == []
        owners.untrack(act)
        assert ctx.interrupt_orphaned() == [act]
        (finished,) = [e for e in ctx.events() if e.kind == "activation_finished"]
        assert "no longer runs it" in (finished.payload or {})["reason"]
