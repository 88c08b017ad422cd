"""Review 16f (sessions, activations and concurrency across processes): real ``morphz``
processes on one SQLite store. Each test fails on the code it was written against; its
docstring states what is expected. Ordering comes from files a child writes, never from sleeps.

Checked and found sound (no test, since those pass): stale transactions of two writers whose
boundaries differ or meet (revise/revise, revise/retire and retire/revise, protect/retire,
relate/unrelate, duplicate relate, place/place, checkpoint/checkpoint, retire/restore,
derive-from/revise, a relation to a frame retired and finalized meanwhile) get the documented
outcome, each rebased or refused with a typed `conflict` naming the boundary, and a stale
`retire-session` a `stale-version` naming the version to use; `morphz context recover` and a
second `exec`'s start-up recovery leave an activation another live process runs alone; a
`retire-session` of a session whose activation runs in another process is refused
(`validation`, "has running work"); two `exec` on one session at once both deliver and the
audit is clean; a child killed with SIGKILL 40 times at random moments while it starts
activations, records replies and results, commits and finishes leaves a store that passes
`integrity_check` and the audit, every killed activation is recovered (with a result for its
unanswered call) and the audit stays clean; three processes observing while two others
retire and revise frames with stale bases (window 3) keep the clock equal to the ticking
batches and audit clean; with another process holding the write lock and
``MORPHZ_BUSY_TIMEOUT=0.3``, `context tx|observe|create|import|budget|view`, `recall-index
rebuild|clean` and `exec` exit 1 with code `busy`, while `status`, `audit` and `recover` read.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import morphz
import processes
from stores import cli_env, user_config

MORPHZ = [sys.executable, "-m", "morphz"]
HANG_GUARD = 120  # seconds: only stops a hung child from hanging the suite


def _cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MORPHZ, *args],
        cwd=cwd,
        env=env or cli_env(cwd / "home"),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until ``path`` exists (the child got there); fails if the child ended first."""
    deadline = time.monotonic() + HANG_GUARD
    while not path.exists():
        assert proc.poll() is None, f"the child ended by itself ({proc.returncode})"
        assert time.monotonic() < deadline, f"the child did not reach {path.name}"
        time.sleep(0.05)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "ws").mkdir()
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')  # the user's: not a project's
    return tmp_path


@contextlib.contextmanager
def _running_exec(
    cwd: Path, mark: str, session: str, command: str, started: Path
) -> Iterator[subprocess.Popen[str]]:
    """``morphz exec`` on ``session`` whose scripted model's first step runs ``command`` with the
    exec tool; yields once ``started`` exists (the command runs). Killed at the end."""
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": command, "timeout_s": 600}}]},
        {"reply": "deployed"},
    ]
    (cwd / "a.json").write_text(json.dumps(steps), encoding="utf-8")
    env = {**cli_env(cwd / "home"), processes.MARK: mark}
    args = ["exec", "deploy v2", "--model", "scripted:a.json", "--workspace", "ws"]
    proc = subprocess.Popen(
        [*MORPHZ, *args, "--session", session, "--db", str(cwd / "m.db")],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        _wait_for(started, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        processes.survivors(mark)  # the warden kills the command's group once exec is gone


def test_recovery_answers_a_killed_activations_call_when_another_activation_shares_its_session(
    agent_dir: Path, mark: str
) -> None:
    """Two ``morphz exec`` on one session at once (a cron job and a person, two terminals:
    nothing refuses it and both deliver). A's model asks for an ``exec`` call (it deploys) and A
    is killed with SIGKILL while it runs; meanwhile B, in the same session, made a call and got
    its result. ``morphz context recover`` then records A's end, but no "exec has no result ...
    check before running it again" result for A's call: the next activation sees the request
    and nothing of the deployment that ran (the guarantee of review 13's recovery).

    Cause: ``activating.unanswered`` (activating.py:165-176) takes any observation of the same
    session carrying ``meta.call`` after A's reply as an answer, matching by call id only; ids
    are unique per reply, not per context: the scripted model numbers them
    ``call_<step>_<n>`` (scripted.py:114) and an OpenAI-compatible server that sends none gets
    ``call_<index>`` (openai_compat.py:247), so B's ``call_0_0`` answers A's ``call_0_0``.
    (Recall results, matched by count in the session, are open to the same mix-up.)

    Expected: A's unanswered call gets its "has no result" result."""
    ws = agent_dir / "ws"
    command = "echo v2 > deployed.txt; touch started; sleep 600"
    with _running_exec(agent_dir, mark, "ops", command, ws / "started") as proc_a:
        steps = [{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"reply": "listed"}]
        (agent_dir / "b.json").write_text(json.dumps(steps), encoding="utf-8")
        args = ["exec", "list the files", "--model", "scripted:b.json", "--workspace", "ws"]
        b = _cli(agent_dir, *args, "--session", "ops", "--db", "m.db")
        assert b.returncode == 0, b.stderr
        proc_a.send_signal(signal.SIGKILL)
        proc_a.wait(timeout=HANG_GUARD)
    assert (ws / "deployed.txt").exists()  # A's call did its work

    recovered = _cli(agent_dir, "context", "recover", "--db", "m.db")
    assert recovered.returncode == 0, recovered.stderr
    with morphz.open(agent_dir / "m.db") as db:
        events = db.context("context-default").events()
    a_reply = next(e for e in events if e.kind == "model_reply" and e.payload and "exec" in str(
        e.payload.get("tool_calls")))  # fmt: skip
    (call,) = a_reply.payload["tool_calls"]  # type: ignore[index]
    told = [
        e
        for e in events
        if e.kind == "tool_result"
        and (e.meta or {}).get("tool") == "exec"
        and "has no result" in (e.text or "")
    ]
    assert told, (
        f"A's exec call {call['id']} ran (deployed.txt exists) but recovery recorded no result "
        "for it: B's result of its own call of the same id in the same session was taken as "
        "its answer"
    )


def test_an_activation_started_in_a_retired_session_does_not_leave_it_retired(
    agent_dir: Path,
) -> None:
    """An agent retires session ``ops`` (``retire-session``: "a retired session leaves the
    working set; not ... one with running work"). Later a person runs ``morphz exec --session
    ops`` (or a chat on it). The activation starts and runs in a session still marked retired:
    its own encoding shows ``(session ops ... (attention retired) (running 1))``, and every other
    session's encoding leaves ``ops`` out of its directory as retired (``(excluded (retired 1
    ...))``) although it holds a new request and running work: the state retire-session is
    refused for, reached by another path. Once it delivers, ``ops`` stays retired.

    Cause: an event in an existing session never changes its attention
    (``mind/lifecycle.py:140-143`` ``ensure_session`` only creates missing sessions), and
    ``activating.start`` (activating.py:48) does not look at the session's attention.

    Expected: new work in a retired session brings it back (as ``restore-session`` would), or is
    refused with a typed error saying to restore it first; never running work in a session the
    directory calls retired."""
    with morphz.open(agent_dir / "m.db") as db:
        ctx = db.context("context-default", create=True)
        ctx.observe("user_message", "first task", session="ops")
        ctx.commit(
            f'(context-tx (base-version {ctx.version}) (reason "done with ops") '
            "(retire-session ops))",
            session="main",
        )
    (agent_dir / "c.json").write_text(json.dumps([{"reply": "done"}]), encoding="utf-8")
    args = ["exec", "a new task", "--model", "scripted:c.json", "--workspace", "ws"]
    run = _cli(agent_dir, *args, "--session", "ops", "--db", "m.db")
    with morphz.open(agent_dir / "m.db") as db:
        sessions = dict(db.context("context-default").mind().sessions)
    if run.returncode != 0:  # refused: fine, if typed and it says what to do
        assert "restore" in run.stderr and "Traceback" not in run.stderr, run.stderr
        return
    assert sessions["ops"] == "active", (
        "an activation ran in session 'ops' and left it retired: other sessions' directories "
        "exclude it although it had new work"
    )


def test_opening_a_store_another_process_holds_exclusively_is_a_busy_error(
    tmp_path: Path,
) -> None:
    """Another process holds the store so that readers must wait too (a ``sqlite3`` shell with
    ``PRAGMA locking_mode=EXCLUSIVE``, or a connection running WAL recovery after a crash). A
    command run with ``MORPHZ_BUSY_TIMEOUT=0.3`` waits 5 s whatever the timeout, then exits
    with code ``store`` ("cannot open the store ...: database is locked"), not the documented
    ``busy`` (docs/cli.md, "Waiting for a busy store") that names ``--busy-timeout``; with a
    longer timeout it still gives up after 5 s.

    Cause: ``SqliteStore._check_foreign`` (store/sqlite.py:172-174) reads ``sqlite_master`` on a
    read-only connection made with the driver's default 5 s timeout and no retry; its
    ``OperationalError`` is mapped to a plain StoreError at sqlite.py:150-153.

    Expected: code ``busy``, after the configured timeout."""
    (tmp_path / "home").mkdir()
    with morphz.open(tmp_path / "m.db") as db:
        db.context("context-default", create=True).observe("user_message", "hello")
    holder = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("SELECT count(*) FROM events").fetchall()
        env = {**cli_env(tmp_path / "home"), "MORPHZ_BUSY_TIMEOUT": "0.3"}
        status = _cli(tmp_path, "context", "status", "--db", "m.db", "--format", "json", env=env)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status.returncode == 1, status.stdout + status.stderr
    error = json.loads(status.stdout)["error"]
    assert error["code"] == "busy", error
