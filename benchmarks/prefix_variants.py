"""Prefix reuse on variants of encoding_bench.py's 300-step trajectory: what the two reuse figures
depend on, measured on the current code, each variant seeded like the benchmark's trajectory and
changed in one or two parameters (encoding_bench.Shape, or the maintenance policy).

    .venv/bin/python benchmarks/prefix_variants.py [--first N] [--out FILE]

Prints one JSON document to stdout (progress goes to stderr). The first row is the benchmark's own
trajectory, which is what the issue's targets are checked on (encoding_bench.py); the others are
variants: they are measured, they neither meet nor miss the targets. A variant whose encoding
reached critical pressure says so (``over_critical``): a runtime would have made its agent
maintain there, so its figures describe a run that could not happen. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _bench_common import finish, machine
from encoding_bench import BENCHMARK, Shape, bench_prefix, log
from morphz.capacity import Budget

# (name, policy, shape): the benchmark's trajectory first, then one or two changes each
VARIANTS: list[tuple[str, str, Shape]] = [
    ("benchmark", "pressure", BENCHMARK),
    ("benchmark, eager maintenance", "eager", BENCHMARK),
    ("no revisions of task/plan", "pressure", Shape(revisions=False)),
    ("tool results of median 600 characters", "pressure", Shape(result_chars=600)),
    ("tool results of median 2,400 characters", "pressure", Shape(result_chars=2_400)),
    ("tool results of median 4,000 characters", "pressure", Shape(result_chars=4_000)),
    ("retirement keeps the last 15 steps", "pressure", Shape(keep=15)),
    ("maintain from warning pressure on", "warning", BENCHMARK),
    ("maintain from warning, no revisions", "warning", Shape(revisions=False)),
    ("median 600 characters, no revisions", "pressure", Shape(revisions=False, result_chars=600)),
    (
        "median 600 characters, keeps 15 steps, no revisions",
        "pressure",
        Shape(revisions=False, result_chars=600, keep=15),
    ),
    ("median 600 characters, maintain from warning", "warning", Shape(result_chars=600)),
    ("never retire observations", "never", BENCHMARK),
    ("tool results with the runtime's meta", "pressure", Shape(meta=True)),
    ("tool results with the runtime's meta, eager maintenance", "eager", Shape(meta=True)),
]


def row(name: str, policy: str, shape: Shape, folder: Path) -> dict[str, Any]:
    log(f"variant: {name}")
    results, details = bench_prefix(folder, policy, shape)
    by = {r["metric"].split("_delta")[0] + "_delta": r for r in results if "prefix" in r["metric"]}
    plain, delta = by["prefix_reuse_without_delta"], by["prefix_reuse_with_delta"]
    critical = Budget().critical  # the trajectory's context keeps the default budget
    return {
        "variant": name,
        "policy": policy,
        "shape": asdict(shape),
        "prefix_reuse_without_delta": plain["value"],
        "prefix_reuse_with_delta": delta["value"],
        "rebuilds": delta["rebuilds"],
        "delta_seeds_by_reason": details["delta_seeds_by_reason"],
        "new_content_share": details["new_content_share"],
        "mind_share_without_delta": details["mind_share_without_delta"],
        "mean_request_bytes": details["mean_request_bytes"],
        "retirement_batches": details["retirement_batches"],
        "peak_tokens": details["peak_tokens"],
        "over_critical": details["peak_tokens"] >= critical,
        "both_targets_reached": plain["value"] >= 0.90 and delta["value"] >= 0.97,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    parser.add_argument("--first", type=int, default=len(VARIANTS), help="only the first N rows")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    doc: dict[str, Any] = {"benchmark": "morphz-prefix-variants", "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="morphz-prefix-variants-") as folder:
        rows = []
        for index, (name, policy, shape) in enumerate(VARIANTS[: args.first]):
            (place := Path(folder) / str(index)).mkdir()  # a store of its own
            rows.append(row(name, policy, shape, place))
    doc["note"] = "variants of the benchmark's trajectory; only the first row is the benchmark"
    doc["results"] = rows
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
