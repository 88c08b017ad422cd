"""Crash safety: a child process committing in a loop is killed with SIGKILL at random moments.

The child (``tests/workers.py crash``) runs rounds of observations and transactions that create,
derive, relate, retire (fast path and organizing window), restore, protect, place, checkpoint,
roll back and drop checkpoints, with a 2-tick window so runtime finalization commits happen too.
After every call returns it prints an acknowledgement line. The parent kills it either a random
few to tens of milliseconds after it is running, or that long after a random number of
acknowledgements (so every step of a round gets interrupted sooner or later), then checks that
the file opens, passes ``PRAGMA integrity_check`` and the audit replay, and holds every commit and
observation the child ever acknowledged. Then it starts the child again on the same file.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import morphz

WORKERS = Path(__file__).with_name("workers.py")
CONTEXT = "context-crash"
SEED = 5318008
KILLS = 40


def _run_and_kill(path: Path, run: int, rng: random.Random) -> list[dict[str, Any]]:
    """Start the child, kill it at a random moment; return the lines it acknowledged."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKERS), "crash", str(path), CONTEXT, str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        ready = proc.stdout.readline()
        lines: list[str] = []
        if ready.startswith('{"ready"'):
            wait_for = rng.randint(1, 30) if run % 2 else 0
            while len(lines) < wait_for:
                line = proc.stdout.readline()
                if not line:
                    break  # the child died on its own: reported below
                lines.append(line)
            time.sleep(rng.uniform(0.002, 0.050))
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert ready.startswith('{"ready"'), f"child {run} did not start: {ready!r}\n{err}"
    assert proc.returncode == -signal.SIGKILL, f"child {run} exited by itself:\n{err}"
    text = "".join(lines) + rest
    # A line cut short by the kill was never acknowledged: only whole lines count.
    complete = text.split("\n")[:-1]
    return [json.loads(line) for line in complete]


def _check_store(path: Path, acked: list[dict[str, Any]]) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with morphz.open(path) as db:
        assert db.store.integrity_check() == []  # type: ignore[attr-defined]
        ctx = db.context(CONTEXT)
        report = ctx.audit()
        assert report.ok, report.differences
        events = {e.seq: e for e in ctx.events()}
        for ack in acked:
            event = events.get(int(ack["event"][2:]))
            assert event is not None, f"acknowledged {ack} is missing"
            if ack["op"] == "tx":
                assert event.kind == "context_tx_committed", ack
                assert event.payload is not None and event.payload["tx_id"] == ack["tx"], ack
            else:
                assert (event.kind, event.text) == (ack["kind"], ack["text"]), ack
        kinds: dict[str, int] = {}
        for e in events.values():
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        assert ctx.version == kinds.get("context_tx_committed", 0) + kinds.get(
            "retirements_finalized", 0
        )
        return kinds


@pytest.mark.slow
def test_sigkill_at_random_moments_keeps_every_acknowledged_commit(tmp_path: Path) -> None:
    print(f"crash test seed: {SEED} ({KILLS} kills)")
    rng = random.Random(SEED)
    path = tmp_path / "crash.db"
    with morphz.open(path) as db:
        db.context(CONTEXT, create=True, window=2)

    acked: list[dict[str, Any]] = []
    kinds: dict[str, int] = {}
    for run in range(KILLS):
        acked.extend(_run_and_kill(path, run, rng))
        kinds = _check_store(path, acked)

    txs = [a for a in acked if a["op"] == "tx"]
    print(f"acknowledged: {len(acked)} ({len(txs)} commits); events by kind: {kinds}")
    # The lifecycle paths were exercised, not just observations.
    assert any("(rollback " in a["ops"] for a in txs)
    assert any("(restore " in a["ops"] for a in txs)
    assert kinds.get("retirements_finalized", 0) > 0
