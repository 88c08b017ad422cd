"""Review 14 (concurrency of the session's write paths): the give-up logic, calibration learnt in
the store, events read in batches, recall-index clean, the writer guard. Real processes on one
real SQLite file; the failing test is synchronised on /proc state, never on sleeping for an
outcome (timeouts are safety nets).

Checked and found sound (no test, since those pass): three processes each calibrating one model
150 times while committing observations on one context keep all 450 samples, and the audit is
clean; a reader calling ``Context.events()`` 30 times over 2,500+ events (three batches) while
those processes append always gets seqs 1..N with no gap or repeat (one read transaction); a
write whose caller gave up (``GIVE_UP`` set) while another process holds the lock fails with
StoreBusyError, the writer's ``PRAGMA busy_timeout`` is back at its configured value after it,
and a later write of a caller that does not give up waits for the lock and lands once it is
released; ``recall-index clean`` cannot drop a starting rebuild's table (the table and its owner
are written in one transaction, and a live owner is kept).
"""

from __future__ import annotations

import contextlib
import json
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import WATCHED
from stores import cli_env

MORPHZ = [sys.executable, "-m", "morphz"]


def _wait_for_a_sleeping_thread(pid: int) -> None:
    """Return once a thread of ``pid`` sleeps (nanosleep or clock_nanosleep, x86-64 numbers):
    the busy handler or ``_retry`` waiting for a lock another process holds. Polls a state;
    120 s is a safety net."""
    for _ in range(12000):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                if (task / "syscall").read_text().split()[0] in ("35", "230"):
                    return
        time.sleep(0.01)
    raise AssertionError("no write of morphz waited for the lock")


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="reads /proc/PID/task/*/syscall with x86-64 numbers (Linux)",
)
def test_ctrl_c_twice_stops_an_exec_waiting_for_the_store_to_start(tmp_path: Path) -> None:
    """Another process holds the store's write lock (a long import, a rebuild's batch, a
    sqlite3 shell left in a transaction) when ``morphz exec`` starts: exec waits to write the
    activation's start (``Context.begin_activation``), up to ``busy_timeout``. A person who
    sees nothing happen presses Ctrl-C, then again, and again: nothing happens until the lock
    is released or the timeout runs out (minutes, with MORPHZ_BUSY_TIMEOUT raised).

    The start is written in a thread (engine.py:206) and, once cancelled, awaited with
    ``despite_cancellation(start)`` with no give-up callback (engine.py:209); ``GIVE_UP`` is set
    only after the start landed (engine.py:216), so ``_retry`` never gives up; after the second
    Ctrl-C the main thread blocks in ``SqliteStore.close`` on ``_write_lock`` (sqlite.py:577),
    which the waiting thread holds.

    Expected: as for an interruption being recorded, a second Ctrl-C gives up waiting for the
    store (the start is not written, or the activation is left for orphan recovery) and exec
    ends while the other process still holds the lock."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    (tmp_path / "script.json").write_text(json.dumps([{"reply": "done"}] * 2))
    store = tmp_path / "m.db"
    args = [*MORPHZ, "exec", "hi", "--model", f"scripted:{tmp_path / 'script.json'}"]
    args += ["--workspace", str(ws), "--db", str(store)]
    env = {**cli_env(home), "MORPHZ_BUSY_TIMEOUT": "600", **WATCHED}
    first = subprocess.run(
        args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert first.returncode == 0, first.stderr

    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing, for the whole test
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_a_sleeping_thread(proc.pid)  # exec waits for the lock
        ended = False
        for _ in range(3):  # Ctrl-C, Ctrl-C, Ctrl-C, each given time to be handled
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
            ended = True
            break
        assert ended, "three Ctrl-C did not stop exec while another process held the store"
        _out, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        holder.execute("ROLLBACK")
        holder.close()
