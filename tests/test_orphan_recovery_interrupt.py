"""Ctrl-C during the orphan recovery ``morphz exec`` makes before it starts, while another
process holds the store's write lock: the recovery's write waits for the lock, and Ctrl-C must
end that wait at SQLite's next try (at most 5 s), not after the whole busy timeout.

Real processes and a real signal; the run is held by the store lock, and the test sends the
signal only once a thread of morphz sleeps in SQLite's busy handler. Timeouts are safety nets.
"""

from __future__ import annotations

import json
import platform
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from processes import WATCHED, wait_for_sqlite_busy_sleep
from stores import cli_env

CONTEXT = "context-default"

# Starts one activation, says so, then waits to be killed (leaving it an orphan).
STARTER = """
import sys
import morphz
db = morphz.open(sys.argv[1])
ctx = db.context(sys.argv[2])
root = ctx.observe("user_message", "request")
print(ctx.start_activation("s0", root.ref), flush=True)
sys.stdin.readline()
"""


def _orphan(store: Path) -> str:
    """An activation left running by a process killed with SIGKILL."""
    with subprocess.Popen(
        [sys.executable, "-c", STARTER, str(store), CONTEXT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        activation = proc.stdout.readline().strip()
        proc.kill()
        proc.wait(timeout=60)
    assert activation.startswith("act-"), activation
    return activation


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not Path("/proc/self/task").exists(),
    reason="needs /proc/PID/task/*/syscall with x86-64 numbers (Linux)",
)
def test_ctrl_c_ends_the_wait_of_the_orphan_recovery_before_exec_starts(tmp_path: Path) -> None:
    """The store's busy timeout is 600 s; Ctrl-C while exec's orphan recovery waits for the lock
    ends exec by SIGINT (status 130, "Aborted!", no traceback) well before it, and nothing was
    written: the orphan is still running and the store has no new activation."""
    store, home = tmp_path / "morphz.db", tmp_path / "home"
    home.mkdir()
    with morphz.open(store) as db:
        db.create_context(CONTEXT)
    orphan = _orphan(store)
    (tmp_path / "script.json").write_text(json.dumps([{"reply": "done"}]), encoding="utf-8")
    args = [sys.executable, "-m", "morphz", "exec", "hello", "--db", str(store)]
    args += ["--model", f"scripted:{tmp_path / 'script.json'}", "--workspace", str(tmp_path)]
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing, for as long as it likes
    try:
        proc = subprocess.Popen(
            args,
            cwd=tmp_path,
            env={**cli_env(home), "MORPHZ_BUSY_TIMEOUT": "600", **WATCHED},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_sqlite_busy_sleep(proc.pid)
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=120)  # a safety net: far below 600 s
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert "Traceback" not in err, err
    assert "Aborted!" in err
    with morphz.open(store) as db:
        running = [a.activation_id for a in db.context(CONTEXT).activations(running_only=True)]
    assert running == [orphan]
