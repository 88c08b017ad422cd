"""Review 14 (interrupting Morphz from a terminal): Ctrl-C, SIGTERM, SIGHUP, a broken pipe and
a closed standard input, at each stage of the commands a person runs. Each test fails on the
code it was written against; its docstring says what is expected.

The processes are real (``python -m morphz`` with this worktree's sources) and the signals are
real; a run is held at a known point by a FIFO its exec tool command writes to, never by
sleeping. Timeouts are only safety nets.

Checked and found sound (no test here, since those pass): SIGINT, SIGTERM and SIGHUP to
``morphz exec`` while its exec tool command runs, and while it waits on a stalled model
(a loopback server that never answers), record the activation interrupted (with the "may have
happened" result for the running call), kill the command's process group, print one line
("Aborted!", after a blank line) with no traceback; the store audits clean and
``PRAGMA integrity_check`` is ok, and the next exec runs. Two SIGINTs in a row with a free
store do the same (a second one during the interpreter's shutdown ends it by the signal).
Ctrl-C during ``context audit``, ``context import`` (all or nothing: nothing lands),
``context encoding`` and ``context tx --file -`` waiting on stdin prints "Aborted!" and leaves
the store as it was; SIGTERM kills them (status -15) with the store consistent. A killed
``recall-index rebuild`` leaves its building table, which ``inspect`` names with the command
that drops it and the next rebuild drops. A broken pipe (``| head -1``) exits quietly.
``demo`` removes its temporary folders when it ends or gets Ctrl-C.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.owners import process_start
from morphz.store import sqlite_txn
from processes import WATCHED, wait_for_sqlite_busy_sleep
from stores import cli_env, user_config

CONTEXT = "context-default"
MORPHZ = [sys.executable, "-m", "morphz"]


@contextmanager
def exec_held_in_its_tool(
    tmp_path: Path, shell: bool = False, busy_timeout: str | None = None
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``morphz exec`` with a scripted model whose one call runs the exec tool's command
    ``echo $$ > FIFO; exec sleep 300``; yields (the process, the command's pid) once the command
    runs. With ``shell``, exec is run from ``bash -c 'morphz exec ...; echo after > AFTER'`` in
    a process group of its own, as a terminal's foreground job is."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir(exist_ok=True)
    ws.mkdir(exist_ok=True)
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')  # the user's: not a project's
    command = f"echo $$ > {fifo}; exec sleep 300"
    steps = [{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}]
    (tmp_path / "script.json").write_text(json.dumps([*steps, {"reply": "done"}]))
    args = [*MORPHZ, "exec", "run it", "--model", f"scripted:{tmp_path / 'script.json'}"]
    args += ["--workspace", str(ws), "--db", str(tmp_path / "morphz.db")]
    if shell:
        script = " ".join(f"'{a}'" for a in args) + f"; echo after > '{tmp_path / 'AFTER'}'"
        args = ["bash", "-c", script]
    reader = os.open(fifo, os.O_RDWR)  # never blocks; the command's write does not either
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env={
            **cli_env(home),
            **({"MORPHZ_BUSY_TIMEOUT": busy_timeout} if busy_timeout else {}),
            **WATCHED,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=shell,
    )
    pid = None
    try:
        ready, _, _ = select.select([reader], [], [], 120)  # a safety net, not a timing
        if not ready:
            proc.kill()
            raise AssertionError(f"the command never started:\n{proc.communicate()[1]}")
        pid = int(os.read(reader, 64).decode().strip())
        yield proc, pid
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if pid is not None and process_start(pid) is not None:
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- exit status


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and bash")
def test_ctrl_c_in_exec_stops_the_shell_script_that_ran_it(tmp_path: Path) -> None:
    """Ctrl-C at a terminal sends SIGINT to the foreground job: the shell running a script
    (``for t in tasks; do morphz exec "$t"; done``) and morphz. A shell decides whether the
    person meant to stop the script by how its child ended: a child that died of SIGINT
    stops the script too; a child that exited normally is taken to have handled the key itself,
    and the script goes on with its next command. ``morphz exec`` records the activation
    interrupted and then exits with status 1 ("Aborted!": click's Abort, raised from the
    KeyboardInterrupt, in click's ``main``; docs/cli.md says exit 1), the same status as an
    activation that failed, so the script runs its next command (the next paid activation) and
    the person has to press Ctrl-C once per remaining command. Python's own rule for an
    uncaught KeyboardInterrupt is to end by SIGINT for exactly this reason.

    Expected: after recording the interruption, ``morphz exec`` ends as a process killed by
    SIGINT (restore SIG_DFL and ``os.kill(os.getpid(), SIGINT)``, or at least exit 130), so
    the shell stops the script: the command after it does not run."""
    with exec_held_in_its_tool(tmp_path, shell=True) as (proc, _pid):
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        _out, err = proc.communicate(timeout=120)
    assert not (tmp_path / "AFTER").exists(), (
        "Ctrl-C stopped morphz exec, but the shell script that ran it went on to its next "
        f"command (morphz exited normally, with status 1 instead of by SIGINT); stderr: {err!r}"
    )


def test_sigterm_to_exec_exits_with_the_conventional_status(tmp_path: Path) -> None:
    """SIGTERM (``kill``, ``timeout``, a CI runner, a service manager) stops ``morphz exec``
    as Ctrl-C does (cli_agent.py ``_stopped_like_ctrl_c`` passes it to SIGINT's handler), and
    then the process exits with status 1, the status of an activation that failed. ``timeout
    600 morphz exec ...`` and supervisors read 143 (or death by SIGTERM) as "stopped by a
    signal"; status 1 tells them the agent failed, and a retry policy keyed on it retries a
    run the operator meant to stop.

    Expected: after recording the interruption, exit 143 (128 + SIGTERM) or end by SIGTERM."""
    with exec_held_in_its_tool(tmp_path) as (proc, _pid):
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode in (143, -signal.SIGTERM), (
        f"morphz exec stopped by SIGTERM exited with status {proc.returncode} ({err.strip()!r})"
    )


# ---------------------------------------------------------------- a second Ctrl-C


@pytest.mark.skipif(
    not hasattr(os, "pidfd_open") or platform.machine() != "x86_64",
    reason="needs pidfd_open and /proc/PID/task/*/syscall with x86-64 numbers (Linux)",
)
def test_a_second_ctrl_c_while_the_store_is_busy_prints_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C while the exec tool runs and another process holds the store's write lock (a
    long ``context import``, a chat recording its step): the interruption's records (the
    running call's result, the activation's end) wait for the lock. A person who sees nothing
    happen presses Ctrl-C again; asyncio's runner then raises KeyboardInterrupt, cancels the
    engine's ``_Run._interrupted`` task (engine.py:543) and, when its write fails with
    StoreBusyError, logs "Exception in callback / unhandled exception during asyncio.run()
    shutdown" with a full Python traceback (sqlite.py ``_retry`` ... ``finish_activation``),
    then "Aborted!".

    (The run is held by the store: the second SIGINT is sent once the command's group was
    killed and a thread of morphz sleeps in SQLite's busy handler.)

    Expected: one clear line (the activation could not be recorded as interrupted because
    the store was busy; the next exec or ``morphz context recover`` marks it), no traceback."""
    with exec_held_in_its_tool(tmp_path, busy_timeout="3") as (proc, pid):
        holder = sqlite3.connect(tmp_path / "morphz.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # another process writing
            command = os.pidfd_open(pid)
            proc.send_signal(signal.SIGINT)
            # the first Ctrl-C was handled once the command's group is killed; morphz then
            # waits for the lock to record the interruption
            ready, _, _ = select.select([command], [], [], 120)  # a safety net
            os.close(command)
            assert ready, "the first Ctrl-C did not stop the command"
            wait_for_sqlite_busy_sleep(proc.pid)  # the interruption's write waits for the lock
            proc.send_signal(signal.SIGINT)  # nothing seems to happen: Ctrl-C again
            _out, err = proc.communicate(timeout=120)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    assert "Traceback" not in err and "Task was destroyed" not in err, err


# ---------------------------------------------------------------- recall-index rebuild


def test_ctrl_c_while_a_rebuild_reads_events_drops_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/decisions.md: "A rebuild that is interrupted (an exception, Ctrl-C) drops the table
    it was building", and RecallIndex.rebuild (recall/api.py:296) drops it in ``except
    BaseException``. But a Ctrl-C that lands while ``_fill`` reads a batch of events
    (``w.events``, a generator over a cursor fetched 1,000 rows at a time,
    store/sqlite_txn.py:269) leaves that cursor's statement open: the traceback keeps the
    generator alive, so the cleanup's DROP TABLE fails with "database table is locked" and the
    table stays (the failure only goes in a note click never prints). With
    ``morphz context recall-index rebuild`` on a 200,000-event history, about one Ctrl-C in
    three left its table (125,000 documents) until a ``clean`` or the next rebuild.

    Expected: the interrupted rebuild leaves no building table (close the events cursor when the
    generator is abandoned, e.g. fetch each batch into a list, or reset the connection's
    statements before the drop)."""
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT, create=True)
        lines = [json.dumps({"text": f"note {i} about the deployment"}) for i in range(1500)]
        (tmp_path / "history.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        ctx.import_history(tmp_path / "history.jsonl")
        real = sqlite_txn._event
        seen = 0

        def event(row: tuple[Any, ...]) -> Any:
            nonlocal seen
            seen += 1
            if seen == 10:  # Ctrl-C while the first 1,000 rows are being turned into events
                raise KeyboardInterrupt
            return real(row)

        monkeypatch.setattr(sqlite_txn, "_event", event)
        with pytest.raises(KeyboardInterrupt) as info:
            ctx.recall_index.rebuild()
        monkeypatch.setattr(sqlite_txn, "_event", real)
        left = [table.table for table in ctx.recall_index.inspect().building]
    assert left == [], (
        f"the interrupted rebuild left {left}: {getattr(info.value, '__notes__', None)}"
    )


# ---------------------------------------------------------------- standard input closed


@pytest.mark.parametrize(
    "args",
    [
        ("context", "tx", "--file", "-"),
        ("context", "import", "-"),
        ("chat", "--model", "scripted:script.json"),
    ],
    ids=["tx", "import", "chat"],
)
def test_a_closed_stdin_is_said_in_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A command started with its standard input closed (``morphz ... <&-``, some cron and
    service setups, a parent that closed fd 0) has ``sys.stdin`` None. ``context tx --file -``
    fails inside click's File type (AttributeError: 'NoneType' object has no attribute
    'flush'), ``context import -`` with click's RuntimeError "Was not able to determine binary
    stream for sys.stdin", and ``chat`` in ``_lenient_stdio`` (cli_agent.py:477,
    ``sys.stdin.isatty()`` on None): each prints a Python traceback and exits 1.

    Expected: one line on stderr and no traceback: for ``tx``/``import`` a usage error (exit
    2, a ``--file`` that cannot be read) or an empty input refused as such; for ``chat`` the
    end of input (exit 0, as docs/cli.md says)."""
    (tmp_path / "home").mkdir()
    (tmp_path / "script.json").write_text('[{"reply": "hi"}]', encoding="utf-8")
    db = str(tmp_path / "morphz.db")
    subprocess.run(
        [*MORPHZ, "context", "create", "--db", db],
        env=cli_env(tmp_path / "home"),
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    proc = subprocess.run(
        [*MORPHZ, *args, "--db", db],
        check=False,
        env=cli_env(tmp_path / "home"),
        cwd=tmp_path,
        stdin=None,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(0),  # the child's own stdin, closed
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1, 2)
