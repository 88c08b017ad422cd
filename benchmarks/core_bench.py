"""Morphz core benchmarks: commit latency and throughput, commit cost against mind size, and
audit replay throughput and memory, each beside a raw-SQLite baseline measured in the same run.

    .venv/bin/python benchmarks/core_bench.py [--quick] [--out FILE]

Prints one JSON document to stdout (progress goes to stderr). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import morphz
from _bench_common import finish, machine, pct, result
from morphz.capacity import Budget

FULL = {
    "samples": 5000,
    "warmup": 500,
    "size_samples": 1000,
    "size_warmup": 200,
    "sizes": [100, 10_000, 100_000],
    "audit_commits": 100_000,
    "build_batch": 500,
}
QUICK = {**FULL, "samples": 500, "warmup": 100, "size_samples": 200, "size_warmup": 50}
QUICK.update(sizes=[100, 1_000, 10_000], audit_commits=10_000)

# Rows one 3-op commit writes (src/morphz/store/sqlite_txn.py), used when the trace count fails:
# 1 event insert, 2 frame writes (new frame insert, old frame update as INSERT OR REPLACE),
# 1 relation insert, 4 boundary_versions upserts (content:new, life:new, life:old, the edge),
# 1 contexts row update, 1 sessions row update (touch). The 6 SELECTs it also runs are not counted.
ROWS_PER_COMMIT = 10
RAW_PAYLOAD = "x" * 100  # about 1 KB per transaction, like the rows of one commit
CONTEXT = "bench"
ROUNDS = 10  # alternating blocks per measurement (see interleave)
AUDIT_RUNS = 3  # fresh child processes; the median run is reported, the largest peak RSS


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def rate_of(samples_ns: list[int]) -> float:
    """Operations per second when the timed calls run back to back."""
    return len(samples_ns) * 1e9 / sum(samples_ns)


def block_rate(blocks: list[list[int]]) -> float:
    """The median over blocks of each block's rate: robust to a burst of load from elsewhere."""
    return statistics.median(rate_of(block) for block in blocks)


def flat(blocks: list[list[int]]) -> list[int]:
    return [sample for block in blocks for sample in block]


# ------------------------------------------------------------ Morphz side


def build_mind(ctx: morphz.Context, frames: int, batch: int) -> int:
    """Create ``frames`` frames through public commits of ``batch`` creates each."""
    version = ctx.version
    for start in range(0, frames, batch):
        ops = " ".join(
            f"(create m/{i} (note {i} (seed frame)))"
            for i in range(start, min(frames, start + batch))
        )
        version = ctx.commit(f"(context-tx (base-version {version}) {ops})").after_version
    return version


class Chain:
    """The benchmarked 3-op tx, in a chain: derive c/N from a fresh observation and the previous
    frame, relate c/N supersedes it, retire it (the supersede fast path retires it at once)."""

    def __init__(self, ctx: morphz.Context, version: int, prev: str) -> None:
        self.ctx, self.version, self.prev, self.n = ctx, version, prev, 0
        self.append_ns: list[int] = []  # the observation appends, timed apart from the commits
        self.cpu_ns: list[int] = []  # CPU time of each commit call (this thread only)

    def prepare(self) -> str:
        """Append the observation the next tx cites (timed apart); return the tx text."""
        start = time.perf_counter_ns()
        event = self.ctx.observe("tool_result", f"probe {self.n}: region cn-shanghai, replicas 3")
        self.append_ns.append(time.perf_counter_ns() - start)
        new, old = f"c/{self.n}", self.prev
        return (
            f'(context-tx (base-version {self.version}) (reason "newer evidence from {event.ref}") '
            f"(derive {new} (from {event.ref} {old}) (fact (region cn-shanghai) (replicas 3))) "
            f"(relate {new} supersedes {old}) (retire {old}))"
        )

    def commit(self, text: str) -> int:
        """Commit ``text``; return the time of the commit call alone, in ns."""
        cpu, start = time.thread_time_ns(), time.perf_counter_ns()
        receipt = self.ctx.commit(text)
        elapsed = time.perf_counter_ns() - start
        self.cpu_ns.append(time.thread_time_ns() - cpu)
        self.version, self.prev, self.n = receipt.after_version, f"c/{self.n}", self.n + 1
        return elapsed

    def step(self) -> int:
        return self.commit(self.prepare())


def open_mind(path: Path, frames: int, batch: int) -> tuple[morphz.Database, Chain, float]:
    """A store with one context holding ``frames`` frames; returns (db, chain, build seconds)."""
    start = time.perf_counter()
    db = morphz.open(path, synchronous="NORMAL")
    ctx = db.context(CONTEXT, create=True)
    # minds of up to 100,000 frames, which no model window holds: a budget that never refuses
    # (the core is measured here, not what a model could be shown)
    ctx.set_budget(Budget(window=1_000_000_000, output_reserve=0))
    version = build_mind(ctx, frames, batch)
    return db, Chain(ctx, version, f"m/{frames - 1}"), time.perf_counter() - start


def count_writes(db: morphz.Database, chain: Chain) -> int:
    """Row-writing statements of one commit, counted with a SQLite trace on the writer."""
    conn = getattr(db.store, "_writer", None)
    if not isinstance(conn, sqlite3.Connection):
        return ROWS_PER_COMMIT
    text = chain.prepare()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        chain.commit(text)
    finally:
        conn.set_trace_callback(None)
    verbs = ("INSERT", "UPDATE", "DELETE", "REPLACE")
    return sum(1 for s in statements if s.lstrip().upper().startswith(verbs))


# ------------------------------------------------------------ raw SQLite baseline


class RawBaseline:
    """BEGIN IMMEDIATE; ``rows`` single-row INSERTs; COMMIT, on a file DB with our pragmas."""

    def __init__(self, path: Path, rows: int, prefill: int = 0) -> None:
        self.conn = conn = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
            conn.execute(f"PRAGMA {pragma}")
        self.rows, self.n, self.cpu_ns = rows, 0, []
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT)")
        conn.execute("BEGIN")
        filler = ((f"p/{i}", RAW_PAYLOAD) for i in range(prefill))
        conn.executemany("INSERT INTO t (k, v) VALUES (?, ?)", filler)
        conn.execute("COMMIT")

    def tx(self) -> int:
        conn, self.n = self.conn, self.n + 1
        cpu, start = time.thread_time_ns(), time.perf_counter_ns()
        conn.execute("BEGIN IMMEDIATE")
        for j in range(self.rows):
            conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"r/{self.n}/{j}", RAW_PAYLOAD))
        conn.execute("COMMIT")
        elapsed = time.perf_counter_ns() - start
        self.cpu_ns.append(time.thread_time_ns() - cpu)
        return elapsed


def interleave(
    runs: dict[str, Callable[[], int]], warmup: int, samples: int
) -> dict[str, list[list[int]]]:
    """Warm every run up, then time ``samples`` calls of each in ROUNDS alternating blocks, so
    that drift in machine load hits the measurement and its baseline alike."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    out: dict[str, list[list[int]]] = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            out[name].append([run() for _ in range(samples // ROUNDS)])
    return out


# ------------------------------------------------------------ the three benchmarks


def bench_commit(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    warmup, samples = cfg["warmup"], cfg["samples"]
    log(f"1/3 commit: {samples} samples after {warmup} warm-up, mind of 100 frames")
    db, chain, _ = open_mind(tmp / "commit.db", 100, cfg["build_batch"])
    rows = count_writes(db, chain)
    raw = RawBaseline(tmp / "raw.db", rows)
    timed = interleave({"commit": chain.step, "raw": raw.tx}, warmup, samples)
    db.close()
    raw.conn.close()
    commits, base, appends = flat(timed["commit"]), flat(timed["raw"]), chain.append_ns[-samples:]
    p50, base50 = pct(commits, 0.5), pct(base, 0.5)
    rate, base_rate = block_rate(timed["commit"]), block_rate(timed["raw"])
    cpu_rates = {  # commits per CPU-second of the committing thread: blind to time waiting
        "cpu_rate": round(rate_of(chain.cpu_ns[-samples:]), 1),
        "baseline_cpu_rate": round(rate_of(raw.cpu_ns[-samples:]), 1),
    }
    results = [
        result("commit_p50_latency", p50, "ms", base50, target="ratio <= 3", met=p50 <= 3 * base50)
        | {"p95": pct(commits, 0.95), "baseline_p95": pct(base, 0.95), "n": samples},
        result("commit_throughput", rate, "tx/s", base_rate, target=">= 2000", met=rate >= 2000)
        | {"n": samples, "blocks": ROUNDS, "mean_rate": round(rate_of(commits), 1)}
        | cpu_rates,
    ]
    details = {
        "rows_written_per_commit": rows,
        "observe_p50_ms": pct(appends, 0.5),
        "observe_p95_ms": pct(appends, 0.95),
        "commit_mean_ms": round(statistics.fmean(commits) / 1e6, 4),
        "commit_max_ms": pct(commits, 1.0),
        "baseline_mean_ms": round(statistics.fmean(base) / 1e6, 4),
        "observe_plus_commit_per_s": round(len(commits) * 1e9 / (sum(commits) + sum(appends)), 1),
    }
    return results, details


def bench_sizes(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sizes, warmup, samples = cfg["sizes"], cfg["size_warmup"], cfg["size_samples"]
    runs: dict[str, Callable[[], int]] = {}
    closers, details = [], {}
    for size in sizes:
        log(f"2/3 building a mind of {size} frames")
        db, chain, build_s = open_mind(tmp / f"size-{size}.db", size, cfg["build_batch"])
        rows = count_writes(db, chain)
        raw = RawBaseline(tmp / f"raw-{size}.db", rows, prefill=size)
        runs[f"commit@{size}"], runs[f"raw@{size}"] = chain.step, raw.tx
        closers += [db.close, raw.conn.close]
        details[f"frames_{size}"] = {
            "build_seconds": round(build_s, 2),
            "rows_written_per_commit": rows,
            "frames_at_end": size + 1 + warmup + samples,
        }
    log(f"2/3 timing {samples} commits at each size, interleaved")
    timed = {name: flat(blocks) for name, blocks in interleave(runs, warmup, samples).items()}
    for close in closers:
        close()
    p50 = {size: pct(timed[f"commit@{size}"], 0.5) for size in sizes}
    raw50 = {size: pct(timed[f"raw@{size}"], 0.5) for size in sizes}
    for size in sizes:
        details[f"frames_{size}"]["p95_ms"] = pct(timed[f"commit@{size}"], 0.95)
        details[f"frames_{size}"]["baseline_p95_ms"] = pct(timed[f"raw@{size}"], 0.95)
    small, large = sizes[0], sizes[-1]
    limit = f"<= 1.3 x p50 at {small} frames"
    results = []
    for n in sizes:
        met = p50[n] <= 1.3 * p50[small]
        metric = f"commit_p50_latency_{n}_frames"
        results.append(
            result(metric, p50[n], "ms", raw50[n], target=limit, met=met) | {"n": samples}
        )
    growth, raw_growth = p50[large] / p50[small], raw50[large] / raw50[small]
    metric = f"commit_p50_growth_{large}_vs_{small}_frames"
    results.append(
        result(metric, growth, "x", raw_growth, target="<= 1.3", met=growth <= 1.3) | {"n": samples}
    )
    return results, details


AUDIT_CHILD = """
import json, resource, sys, time
import morphz
def rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
db = morphz.open(sys.argv[1])
ctx = db.context(sys.argv[2])
baseline_kb = rss_kb()
start, cpu = time.perf_counter_ns(), time.process_time()
report = ctx.audit()
seconds, cpu = (time.perf_counter_ns() - start) / 1e9, time.process_time() - cpu
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "commits": report.commits,
                  "events": report.events, "audit_ok": report.ok,
                  "baseline_kb": baseline_kb, "peak_kb": rss_kb()}))
"""


def build_history(path: Path, commits: int) -> float:
    """A context of ``commits`` commits: one seed create, then 3-op chain commits, each citing
    the observation appended just before it. Returns build seconds."""
    start = time.perf_counter()
    db, chain, _ = open_mind(path, 1, 1)
    for i in range(commits - 1):
        chain.step()
        if (i + 1) % 10_000 == 0:
            log(f"    {i + 1} commits")
    db.close()
    return time.perf_counter() - start


def raw_scan_seconds(path: Path) -> float:
    """Seconds for raw sqlite3 to read every event row of the context, in seq order."""
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    cursor = conn.execute("SELECT * FROM events WHERE context_id = ? ORDER BY seq", (CONTEXT,))
    while cursor.fetchmany(1000):
        pass
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def bench_audit(tmp: Path, cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    path, commits = tmp / "audit.db", cfg["audit_commits"]
    log(f"3/3 audit: building a context of {commits} commits")
    build_s = build_history(path, commits)
    runs = []
    for run in range(AUDIT_RUNS):
        log(f"    replay {run + 1}/{AUDIT_RUNS} in a fresh child process")
        command = [sys.executable, "-c", AUDIT_CHILD, str(path), CONTEXT]
        child = subprocess.run(command, capture_output=True, text=True, check=True)
        runs.append(json.loads(child.stdout))
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]  # the median run
    rate = out["commits"] / out["seconds"]
    raw_rate = out["commits"] / statistics.median(raw_scan_seconds(path) for _ in runs)
    peak_mb = max(r["peak_kb"] for r in runs) / 1024
    base_mb = max(r["baseline_kb"] for r in runs) / 1024
    results = [
        result(
            "audit_replay_throughput", rate, "tx/s", raw_rate, target=">= 20000", met=rate >= 2e4
        )
        | {key: out[key] for key in ("commits", "events", "seconds", "cpu_seconds", "audit_ok")}
        | {"runs": len(runs), "all_rates": [round(r["commits"] / r["seconds"]) for r in runs]},
        result("audit_peak_rss", peak_mb, "MB", base_mb, target="< 300", met=peak_mb < 300)
        | {"commits": out["commits"], "runs": len(runs)},
    ]
    details = {
        "build_seconds": round(build_s, 1),
        "events_per_second": round(out["events"] / out["seconds"], 1),
        "db_file_mb": round(path.stat().st_size / 2**20, 1),
        "rusage_children_maxrss_mb": round(children_kb / 1024, 1),
    }
    return results, details


# ------------------------------------------------------------ driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    started = time.perf_counter()
    doc: dict[str, Any] = {
        "benchmark": "morphz-core",
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "config": {**cfg, "synchronous": "NORMAL", "journal_mode": "WAL"},
        "results": [],
        "details": {},
    }
    with tempfile.TemporaryDirectory(prefix="morphz-bench-") as folder:
        tmp = Path(folder)
        benches = {"commit": bench_commit, "sizes": bench_sizes, "audit": bench_audit}
        for name, bench in benches.items():
            results, details = bench(tmp, cfg)
            doc["results"].extend(results)
            doc["details"][name] = details
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
