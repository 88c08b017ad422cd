"""What the benchmark scripts share: nearest-rank percentiles, the description of the machine a
run happened on, and the end of a run (timing, load, verdict, the JSON document on stdout and in
``--out``). The scripts run as ``python benchmarks/NAME.py``, so this module is importable beside
them."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def pct(samples_ns: list[int], q: float, digits: int = 4) -> float:
    """The q-quantile (nearest rank) of nanosecond samples, in milliseconds."""
    ordered = sorted(samples_ns)
    return round(ordered[round(q * (len(ordered) - 1))] / 1e6, digits)


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    info = cpuinfo.read_text() if cpuinfo.exists() else ""
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line]
    return names[0] if names else platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The host, the versions and the sources a run measured, and the load when it started."""
    git = ["git", "-C", str(Path(__file__).resolve().parents[1]), "describe", "--always", "--dirty"]
    commit = subprocess.run(git, capture_output=True, text=True, check=False).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu": _cpu_name(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "commit": commit or "unknown",
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def finish(
    doc: dict[str, Any], started: float, out: Path | None, log: Callable[[str], None]
) -> int:
    """Close a run's document (duration, load at the end, whether every target was met: an
    entry without ``met``, or with None, has none), print it, write it to ``out`` when given.
    Returns the exit status (0)."""
    doc["seconds"] = round(time.perf_counter() - started, 1)
    doc["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if "results" in doc:
        judged = [r["met"] for r in doc["results"] if r.get("met") is not None]
        doc["all_met"] = all(judged) if judged else None
    text = json.dumps(doc, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    verdict = f"; all targets met: {doc['all_met']}" if doc.get("all_met") is not None else ""
    log(f"done in {doc['seconds']} s{verdict}")
    return 0


def result(
    metric: str,
    value: float,
    unit: str,
    baseline: float | None,
    *,
    target: str,
    met: bool,
    digits: int = 4,
) -> dict[str, Any]:
    """One measurement beside its same-run baseline; ``ratio`` is value / baseline."""
    ratio = value / baseline if baseline else None
    return {
        "metric": metric,
        "value": round(value, digits),
        "unit": unit,
        "baseline": round(baseline, digits) if baseline is not None else None,
        "ratio": round(ratio, 3) if ratio is not None else None,
        "target": target,
        "met": bool(met),
    }
