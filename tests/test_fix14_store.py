"""Session 14's store fixes: the tables killed recall rebuilds leave are reported (by
``recall-index inspect`` and the audit) and cleaned without a rebuild; concurrent engines of one
model teach one stored calibration, each sample applied to what the store holds."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from agents import make_engine
from morphz.encoding.tokens import Calibration
from morphz.interfaces.cli import main
from morphz.owners import current_owner
from morphz.runtime.engine import Engine
from morphz.runtime.models.base import ModelRequest, ModelResponse, Usage
from morphz.runtime.models.scripted import FunctionModel
from stores import rebuild_tables

SRC = Path(morphz.__file__).resolve().parent.parent
CONTEXT = "context-default"

# A process that starts a rebuild (its building table and owner, in one write) and dies before
# filling or swapping it, as a SIGKILL or the OOM killer leaves one.
KILLED_REBUILD = """
import os, sys
import morphz
db = morphz.open(sys.argv[1])
with db.store.write("context-default") as w:
    print(w.recall.begin_rebuild(), flush=True)
os._exit(0)
"""


def _killed_rebuild(store: Path) -> str:
    """The building table a rebuild whose process died left in ``store``."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_REBUILD, str(store)],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT, create=True)
        for i in range(3):
            ctx.observe("tool_result", f"deploy log line {i}")
    return path


# ================================================================ leftover rebuild tables


def test_inspect_reports_a_dead_rebuilds_table_with_its_owner(store: Path) -> None:
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        with db.store.write(CONTEXT) as w:  # a rebuild of this process, still running
            running = w.recall.begin_rebuild()
        dead = _killed_rebuild(store)  # (a rebuild first drops the dead ones' tables)
        report = ctx.recall_index.inspect()
    assert report.current  # the live index is fine: leftovers are not staleness
    by_table = {b.table: b for b in report.building}
    assert set(by_table) == {dead, running}
    assert by_table[dead].owner_alive is False
    assert by_table[running].owner_alive is True
    assert by_table[running].owner == current_owner()
    data = report.to_dict()
    shown = {b["table"]: b for b in data["building"]}
    assert shown[dead]["owner_alive"] is False
    assert shown[dead]["owner"]["pid"] == by_table[dead].owner.pid
    assert shown[running]["owner_alive"] is True


def test_inspect_on_the_command_line_shows_the_leftover_and_the_command_that_cleans_it(
    store: Path,
) -> None:
    dead = _killed_rebuild(store)
    runner = CliRunner()
    text = runner.invoke(main, ["context", "recall-index", "inspect", "--db", str(store)])
    assert text.exit_code == 0, text.output
    assert dead in text.output
    assert "morphz context recall-index clean" in text.output
    out = runner.invoke(
        main, ["context", "recall-index", "inspect", "--db", str(store), "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    building = json.loads(out.output)["building"]
    assert [b["table"] for b in building] == [dead]
    assert building[0]["owner_alive"] is False


def test_inspect_without_leftovers_reports_none(store: Path) -> None:
    with morphz.open(store) as db:
        report = db.context(CONTEXT).recall_index.inspect()
    assert report.building == ()
    assert report.to_dict()["building"] == []


def test_the_audit_reports_a_leftover_as_a_warning_not_a_difference(store: Path) -> None:
    dead = _killed_rebuild(store)
    with morphz.open(store) as db:
        report = db.context(CONTEXT).audit()
    assert report.ok, report.differences
    assert report.differences == []
    assert len(report.warnings) == 1
    assert dead in report.warnings[0]
    assert f"morphz context recall-index clean {CONTEXT}" in report.warnings[0]
    assert report.to_dict()["warnings"] == report.warnings
    cli = CliRunner().invoke(main, ["context", "audit", "--db", str(store)])
    assert cli.exit_code == 0, cli.output  # a warning does not fail the audit
    assert "audit: ok" in cli.output and dead in cli.output


def test_the_audit_does_not_warn_of_a_rebuild_that_still_runs(store: Path) -> None:
    with morphz.open(store) as db:
        with db.store.write(CONTEXT) as w:
            w.recall.begin_rebuild()
        report = db.context(CONTEXT).audit()
    assert report.ok and report.warnings == []


def test_clean_drops_only_the_tables_of_dead_rebuilds(store: Path) -> None:
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        with db.store.write(CONTEXT) as w:
            running = w.recall.begin_rebuild()
        dead = _killed_rebuild(store)
        elsewhere = f"{dead[: dead.index('_rebuild_')]}_rebuild_0e1e0e1e"
        _foreign_rebuild(store, elsewhere)  # on another host: cannot be told dead
        cleaned = ctx.recall_index.clean()
        assert cleaned.dropped == (dead,)
        assert {b.table for b in cleaned.kept} == {running, elsewhere}
        assert {b.table for b in ctx.recall_index.inspect().building} == {running, elsewhere}
        assert ctx.audit().ok
    assert rebuild_tables(store) == sorted([running, elsewhere])


def _foreign_rebuild(store: Path, table: str) -> None:
    """Record ``table`` as a building table of a rebuild running on another host."""
    conn = sqlite3.connect(store)
    try:
        with conn:
            conn.execute(
                f"CREATE VIRTUAL TABLE {table} USING fts5(body, near, tokenize = 'unicode61')"
            )
            conn.execute(
                "INSERT INTO recall_builders VALUES (?, ?, 'another-host', 1, NULL)",
                (table, CONTEXT),
            )
    finally:
        conn.close()


def test_clean_on_the_command_line(store: Path) -> None:
    dead = _killed_rebuild(store)
    runner = CliRunner()
    out = runner.invoke(
        main, ["context", "recall-index", "clean", "--db", str(store), "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["dropped"] == [dead] and data["kept"] == []
    assert rebuild_tables(store) == []
    again = runner.invoke(main, ["context", "recall-index", "clean", "--db", str(store)])
    assert again.exit_code == 0, again.output
    assert "no" in again.output  # nothing left to drop, and it says so


def test_clean_of_another_context_leaves_this_ones_leftover(store: Path) -> None:
    dead = _killed_rebuild(store)
    with morphz.open(store) as db:
        other = db.context("other", create=True)
        other.observe("user_message", "hello")
        assert other.recall_index.clean().dropped == ()
        assert other.recall_index.inspect().building == ()
    assert rebuild_tables(store) == [dead]


# ================================================================ calibration of concurrent engines


def _engine(ctx: morphz.Context, workspace: Path, reported: int) -> Engine:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse("ok", (), Usage(input_tokens=reported, output_tokens=1))

    return make_engine(ctx, FunctionModel(answer, "openai:m"), workspace, exact_tokens=False)


def test_two_engines_of_one_model_keep_each_others_samples(tmp_path: Path) -> None:
    """Two engines (two store connections, as two processes have) each learn from one reply:
    the stored calibration holds both samples, and each engine's copy is what the store holds
    after its own sample."""
    path = tmp_path / "morphz.db"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with morphz.open(path) as first_db, morphz.open(path) as second_db:
        first_db.context(CONTEXT, create=True)
        first = _engine(first_db.context(CONTEXT), workspace, 4000)
        second = _engine(second_db.context(CONTEXT), workspace, 8000)
        assert first.calibration.samples == second.calibration.samples == 0
        assert asyncio.run(first.run("one")).state == "delivered"
        after_first = Calibration(first.calibration.factor, first.calibration.samples)
        assert asyncio.run(second.run("two")).state == "delivered"
        stored = second_db.context(CONTEXT).calibration("openai:m")
    assert stored.samples == 2, "the second engine's save replaced the first engine's sample"
    assert after_first.samples == 1
    assert second.calibration.to_dict() == stored.to_dict()  # the engine's copy in step
    assert stored.factor != after_first.factor  # the second sample moved the first's factor


def test_calibrate_applies_the_sample_to_what_the_store_holds(tmp_path: Path) -> None:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as a, morphz.open(path) as b:
        ctx_a = a.context(CONTEXT, create=True)
        ctx_b = b.context(CONTEXT)
        one = ctx_a.calibrate("openai:m", 1000, 2000)
        two = ctx_b.calibrate("openai:m", 1000, 1000)
        assert (one.samples, two.samples) == (1, 2)
        expected = Calibration()
        expected.update(1000, 2000)
        expected.update(1000, 1000)
        assert two.to_dict() == expected.to_dict()
        assert ctx_a.calibration("openai:m").to_dict() == expected.to_dict()


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_calibrate_checks_its_figures(tmp_path: Path, bad: Any) -> None:
    with morphz.open(tmp_path / "morphz.db") as db:
        ctx = db.context(CONTEXT, create=True)
        with pytest.raises(morphz.InputError):
            ctx.calibrate("openai:m", bad, 100)
        with pytest.raises(morphz.InputError):
            ctx.calibrate("openai:m", 100, bad)
        assert ctx.calibration("openai:m").samples == 0


def test_calibrate_without_a_sample_changes_nothing(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "morphz.db") as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.calibrate("openai:m", 1000, 2000)
        kept = ctx.calibrate("openai:m", 0, 500)  # no estimate: nothing to learn
        assert kept.samples == 1
        assert ctx.calibration("openai:m").to_dict() == kept.to_dict()
