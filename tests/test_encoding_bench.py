"""benchmarks/encoding_bench.py --prefix-only runs to the end and prints one JSON document whose
verdict judges only the entries that have a target (the seeded trajectories take a few seconds;
the compile part, with a 1,000,000-event history, is not run here)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "encoding_bench.py"


@functools.cache
def _run(*args: str, only: str = "--prefix-only", script: Path = SCRIPT) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(script), *([only] if only else []), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("variant", [False, True])
def test_the_prefix_trajectories_report_every_entry(variant: bool) -> None:
    doc = _run("--no-revisions") if variant else _run()
    results = doc["results"]
    assert isinstance(results, list)
    names = {r["metric"] for r in results}
    suffix = "_no_revisions" if variant else ""
    for kind in ("prefix_reuse", "block_cache_reuse"):
        for mode in ("without", "with"):
            assert f"{kind}_{mode}_delta{suffix}" in names
    assert f"message_cache_reuse_with_delta{suffix}" in names
    judged = [r["met"] for r in results if r.get("met") is not None]
    if variant:  # a variant has no target: nothing to judge
        assert judged == [] and doc["all_met"] is None
    else:
        assert judged and doc["all_met"] == all(judged)


def test_the_sessions_cell_reports_its_entries() -> None:
    """The compile among 10 and 2,000 other sessions (``--quick``): both cells and their growth,
    with the directory's note of the sessions it left out. Times are reported, not judged here."""
    doc = _run("--quick", only="--sessions-only")
    results = doc["results"]
    assert isinstance(results, list)
    names = [r["metric"] for r in results]
    assert names == [
        "compile_p50_50_active_10_sessions",
        "compile_p50_50_active_2000_sessions",
        "compile_p50_growth_50_active_2000_vs_10_sessions",
    ]
    details = doc["details"]
    assert isinstance(details, dict)
    many = details["compile"]["sessions"]["sessions_2000"]
    assert many["excluded"] == {"inactive-beyond-window": 1_990}


def test_the_committed_example_encoding_is_current(tmp_path: Path) -> None:
    """docs/example-encoding.txt is what the demo context's encoding is now (regenerate it with
    ``benchmarks/encoding_bench.py --example docs/example-encoding.txt``)."""
    out = tmp_path / "example.txt"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--example", str(out)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    committed = SCRIPT.parent.parent / "docs" / "example-encoding.txt"
    assert out.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8")


def test_the_counting_benchmark_counts_every_request_exactly() -> None:
    # the script stops with an error when counting piece by piece and counting whole disagree
    # on any of the 300 steps' texts (encodings, ContextDelta requests, tool schemas), or the
    # estimate and the per-character loop it replaced
    script = SCRIPT.with_name("counting_bench.py")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=300
    )
    results = json.loads(done.stdout)["results"]
    assert [r["metric"] for r in results] == [
        "exact_count_ms_per_step_p50",
        "estimate_ms_per_step_p50_non_ascii",  # never below the plain per-line count
    ]
    assert all(r["n"] == 300 for r in results)


def test_the_variants_script_measures_the_benchmark_trajectory_in_its_first_row() -> None:
    """benchmarks/prefix_variants.py: its first row is the benchmark's trajectory and its third the
    ``--no-revisions`` variant, with the very figures encoding_bench.py reports for them; no row
    is judged against the issue's targets."""
    doc = _run("--first", "3", only="", script=BENCHMARKS / "prefix_variants.py")
    rows = doc["results"]
    assert isinstance(rows, list) and rows[0]["variant"] == "benchmark"
    assert doc["all_met"] is None
    for row, args in ((rows[0], ()), (rows[2], ("--no-revisions",))):
        bench = _run(*args)["results"]
        assert isinstance(bench, list)
        figures = {r["metric"]: r["value"] for r in bench}
        suffix = "_no_revisions" if args else ""
        for mode in ("without", "with"):
            metric = f"prefix_reuse_{mode}_delta"
            assert row[metric] == figures[metric + suffix]
        assert row["over_critical"] is False and row["both_targets_reached"] is False
