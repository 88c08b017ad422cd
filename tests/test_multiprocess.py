"""Concurrency across processes: several processes commit to one SQLite file at once.

Each worker (``tests/workers.py multi``) makes a mix of attempts — derives of its own new frames,
revises of one frame every worker hammers, stale-based revises of its own frames, observations —
and prints one JSON line per attempt. The parent then checks that every attempt is accounted for
and that the store holds exactly the committed ones, nothing lost and nothing extra.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import morphz

WORKERS = Path(__file__).with_name("workers.py")
CONTEXT = "context-multi"
SHARED = "shared/plan"
PROCESSES = 4
ATTEMPTS = 50
SEED = 20260804
OBS_KINDS = ("tool_result", "recall_result", "user_message", "external_event")
TOKEN = re.compile(r"\(attempt w(\d+)-a(\d+)\)")
HANG_GUARD = 300  # seconds; only stops a hung worker from hanging the suite


def _start(path: Path, worker: int) -> subprocess.Popen[str]:
    argv = [sys.executable, str(WORKERS), "multi", str(path), CONTEXT]
    argv += [str(worker), str(ATTEMPTS), str(SEED)]
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_workers(path: Path) -> list[dict[str, Any]]:
    procs = [_start(path, w) for w in range(PROCESSES)]
    try:
        for proc in procs:  # every worker has opened the store
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith('{"ready"'), f"worker did not start: {line!r}"
        for proc in procs:  # ... then all start committing at once
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        records: list[dict[str, Any]] = []
        for worker, proc in enumerate(procs):
            out, err = proc.communicate(timeout=HANG_GUARD)
            assert proc.returncode == 0, f"worker {worker} exited {proc.returncode}:\n{err}"
            assert err == "", f"worker {worker} wrote to stderr:\n{err}"
            records.extend(json.loads(line) for line in out.splitlines())
        return records
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_processes_commit_concurrently_and_every_attempt_is_accounted(tmp_path: Path) -> None:
    print(f"multi-process workload seed: {SEED}")
    path = tmp_path / "multi.db"
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.commit(f"(context-tx (base-version 0) (create {SHARED} (plan (attempt init))))")

    records = _run_workers(path)

    # Every attempt of every worker is accounted for exactly once, with no other outcome.
    assert sorted((r["worker"], r["attempt"]) for r in records) == [
        (w, a) for w in range(PROCESSES) for a in range(ATTEMPTS)
    ]
    errors = [r for r in records if r["status"] not in ("committed", "refused", "observed")]
    assert errors == [], "attempts ended in something else than a commit or a refusal"
    committed = [r for r in records if r["status"] == "committed"]
    refused = [r for r in records if r["status"] == "refused"]
    observed = [r for r in records if r["status"] == "observed"]
    by_type = Counter((r["type"], r["status"]) for r in records)
    rebased = Counter(r["type"] for r in committed if r["rebased"])
    print(f"outcomes: {dict(sorted(by_type.items()))}; rebased: {dict(rebased)}")

    # Only revises of the shared frame may be refused, and only as conflicts naming it.
    for r in refused:
        assert r["type"] == "revise-shared", r
        assert r["code"] == "conflict", r
        assert f"content:{SHARED}" in r["boundaries"], r
    # Own frames are touched by one worker only: a stale base there is always rebased.
    own = [r for r in records if r["type"] == "revise-own"]
    assert own and all(r["status"] == "committed" and r["rebased"] for r in own), own
    assert all(r["status"] == "committed" for r in records if r["type"] == "derive")
    # Both outcomes of a stale base really happened.
    assert any(r["rebased"] for r in committed)
    assert any(r["code"] == "conflict" for r in refused)

    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        assert db.store.integrity_check() == []  # type: ignore[attr-defined]
        events = ctx.events()
        kinds = Counter(e.kind for e in events)
        tx_events = [e for e in events if e.kind == "context_tx_committed"]
        finalized = kinds["retirements_finalized"]
        # The setup commit plus one per committed attempt, nothing more.
        assert len(tx_events) == 1 + len(committed)
        assert ctx.version == 1 + len(committed) + finalized

        # Receipts: distinct, each pointing at its own commit event.
        assert len({r["tx_id"] for r in committed}) == len(committed)
        assert sorted(r["after_version"] for r in committed) == list(range(2, 2 + len(committed)))
        by_seq = {e.seq: e for e in events}
        for r in committed:
            event = by_seq[r["seq"]]
            assert event.ref == r["event"]
            assert event.kind == "context_tx_committed"
            assert event.payload is not None
            assert event.payload["tx_id"] == r["tx_id"]
            assert event.payload["rebased"] == r["rebased"]
            assert event.version == r["after_version"]
            assert r["before_version"] == r["after_version"] - 1
            assert r["rebased"] == (r["base_version"] < r["before_version"])

        # Refused attempts left no trace; committed ones appear exactly once.
        tokens = Counter(
            (int(w), int(a)) for e in tx_events for w, a in TOKEN.findall(e.text or "")
        )
        for r in committed:
            assert tokens[(r["worker"], r["attempt"])] == 1, r
        for r in refused:
            assert tokens[(r["worker"], r["attempt"])] == 0, r

        # Observations: each is there, once, with its text.
        assert kinds.keys() <= {"context_tx_committed", "retirements_finalized", *OBS_KINDS}
        for r in observed:
            event = ctx.event(r["event"])
            assert (event.kind, event.text) == (r["kind"], r["text"])
        obs_events = [e for e in events if e.is_observation]
        assert len(obs_events) == len(observed)

        # Nothing lost: the shared frame holds the last committed revise, one revision each.
        mind = ctx.mind()
        shared = mind.frame(SHARED)
        assert shared is not None
        revises = [r for r in committed if r["type"] == "revise-shared"]
        last = max(revises, key=lambda r: r["after_version"])
        assert shared.body == last["body"]
        assert shared.revision == 1 + len(revises)
        # ... and every worker's frames hold their latest committed body.
        latest: dict[str, dict[str, Any]] = {}
        for r in sorted(committed, key=lambda r: r["after_version"]):
            if r["type"] in ("derive", "revise-own"):
                latest[r["frame"]] = r
        for fid, r in latest.items():
            frame = mind.frame(fid)
            assert frame is not None and frame.body == r["body"], fid
        assert len(mind.frames) == 1 + sum(1 for r in committed if r["type"] == "derive")

        report = ctx.audit()
        assert report.ok, report.differences
        assert report.commits == len(tx_events)
