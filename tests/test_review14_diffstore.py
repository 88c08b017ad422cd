"""Review 14, this session's store and accounting changes (diff 7f3b94f..HEAD): the writer
guard (0023), the observation units (0022), the calibration learnt in the store, leftover
rebuild tables, the batched event reads.

Old stores and old processes are made by the old code itself (``git archive`` of a commit of
this repository into a temporary folder, run in a subprocess), as tests/test_review14_upgrade.py
does; such a test is skipped when git or the commit is not available.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import morphz
from oldcode import old_morphz, run_on

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


# ------------------------------------------------------------------ the writer guard (0023)


def test_an_older_engine_cannot_save_its_calibration_into_a_store_upgraded_beside_it(
    tmp_path: Path,
) -> None:
    """An engine of 6761d10 (before writes checked the schema) saves its calibration after
    each provider report and only then records the reply (engine.py of 6761d10, ``_calibrate``
    before ``_handle``). A user upgrades while its request is in flight: the new Morphz
    migrates the store, 0021 drops the calibrations learnt against the old estimate, and the
    reply then arrives. The old engine's ``save_calibration`` is a settings write with no event
    in it, so 0023's trigger (``BEFORE INSERT ON events`` only) never runs and the write
    commits: the new Morphz reads a ratio learnt against the quarter-token estimate of
    Cyrillic and scales the new estimate by it a second time, the very case 0021 exists to
    prevent (decisions.md, "Calibrations learnt before 0020 are dropped"; the 0023 entry says
    the guard stops such saves). Expected: the old process's write is refused once the store is
    upgraded (a guard on ``context_settings`` too), and the store keeps no calibration."""
    old = old_morphz("6761d10", tmp_path)
    store = tmp_path / "store.db"
    script = """
import os, subprocess, sys
import morphz
from morphz.encoding.tokens import Calibration
store, new_src = sys.argv[1], sys.argv[2]
db = morphz.open(store)
ctx = db.context("ctx-a", create=True)
ctx.observe("user_message", "Развёртывание в регионе москва-1")
subprocess.run(  # the new Morphz opens (and upgrades) the store while the request is out
    [sys.executable, "-c", "import morphz, sys; morphz.open(sys.argv[1]).close()", store],
    env={**os.environ, "PYTHONPATH": new_src}, check=True)
try:
    ctx.save_calibration("gpt-test", Calibration(1.6, 5))  # the reply's report arrives
    print("old process wrote")
except morphz.MorphzError as exc:
    print("old process refused:", exc)
"""
    said = run_on(old, script, str(store), str(SRC))
    with morphz.open(store) as db:
        calibration = db.context("ctx-a").calibration("gpt-test")
    assert calibration.samples == 0, (said, calibration)


# ------------------------------------------------------------------ observation units (0022)


def test_a_store_with_an_undecodable_event_text_still_opens_after_the_upgrade_to_0022(
    tmp_path: Path,
) -> None:
    """A store of 7f3b94f (schema 19) where one observation's stored text is not UTF-8 (a hand
    edit, a damaged page quick_check does not see): the project treats this as damage the audit
    reports ("the event cannot be read", tests/test_review11_last.py), and 7f3b94f opens such a
    store and audits it. Migration 0022 fills ``observations.units`` with one UPDATE that calls
    the Python function ``morphz_token_units`` on every observation's text
    (store/sqlite_migrations.py, _count_observation_units): sqlite3 cannot hand the function
    the undecodable text, the UPDATE fails ("user-defined function raised exception"), the
    whole upgrade rolls back, and the store cannot be opened at all any more: no audit, no
    export, no recall, nothing to find the damage with. Expected: the store opens (such an
    observation counted as before, a quarter of a token a character, as one whose event is
    missing is) and the audit reports the damaged event."""
    old = old_morphz("7f3b94f", tmp_path)
    store = tmp_path / "store.db"
    run_on(
        old,
        "import morphz, sys\n"
        "db = morphz.open(sys.argv[1]); ctx = db.context('ctx-a', create=True)\n"
        "ctx.observe('user_message', 'hello')\n"
        "ctx.observe('user_message', 'world')\n"
        "db.close()\n",
        str(store),
    )
    conn = sqlite3.connect(store)
    try:
        conn.execute("UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE seq = 2")
        conn.commit()
    finally:
        conn.close()
    with morphz.open(store) as db:
        report = db.context("ctx-a").audit()
    assert not report.ok
    assert any("cannot be read" in d for d in report.differences), report.differences


# ------------------------------------------------------------------ leftover rebuild tables


def test_the_audit_and_inspect_report_a_leftover_whose_table_was_dropped_by_hand(
    tmp_path: Path,
) -> None:
    """A rebuild killed before its swap leaves its building table and its ``recall_builders``
    row. Before this session Morphz only said "the unfinished index table X stays", and a user
    who drops X by hand (``DROP TABLE`` in the sqlite3 shell) leaves the row behind. The mind
    and the live index are sound, but ``building_tables`` (store/sqlite_builders.py) counts
    the documents of every recorded table with ``SELECT count(*) FROM <table>``, so the audit
    and ``recall-index inspect`` now fail outright ("read from ... failed: no such table"):
    the audit, whose job is to report, reports nothing, and `morphz context audit` exits 1
    with a store error. (``recall-index clean`` copes: it uses DROP TABLE IF EXISTS.)
    Expected: the audit returns its report (ok: the row is at most a warning) and inspect
    lists the indexed documents."""
    store = tmp_path / "store.db"
    made = subprocess.run(  # a rebuild killed between its first write and its swap
        [
            sys.executable,
            "-c",
            "import morphz, os, sys\n"
            "db = morphz.open(sys.argv[1]); ctx = db.context('c', create=True)\n"
            "ctx.observe('user_message', 'deploy the checkout service')\n"
            "with db.store.write('c') as w:\n"
            "    name = w.recall.begin_rebuild()\n"
            "print(name, flush=True)\n"
            "os._exit(0)\n",
            str(store),
        ],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    table = made.stdout.strip()
    conn = sqlite3.connect(store)
    try:
        conn.execute(f"DROP TABLE {table}")  # the user drops the leftover by hand
        conn.commit()
    finally:
        conn.close()
    with morphz.open(store) as db:
        ctx = db.context("c")
        report = ctx.audit()
        index = ctx.recall_index.inspect()
    assert report.ok, report.differences
    assert index.last_event == 1
