"""Review 14, upgrades: stores written by earlier versions of Morphz, opened with this one.

The old stores are written by the old code itself: each test extracts ``src/morphz`` of a
historical commit from this repository (``git archive``, into a temporary folder, so no worktree
is registered) and runs it in a subprocess with that folder first on the path. A test is skipped
when git or the commit is not available (a shallow clone, a source tarball).

Checked and sound (no test here): stores from 7cba7ce, 6925176, a5f863c, d1e3522, 18ac27c,
180a706, 6761d10, 8aaa0cb, 513a693 and 7f3b94f (observations in Latin, Cyrillic, CJK and emoji;
frames created, derived, revised, protected, related, rolled back, retiring with non-ASCII
reasons; sessions, one retired; an activation left running by SIGKILL; recall built; budget,
view and calibrations) open, record all 22 migrations, audit clean, keep every event, find old
content by recall, encode, commit, hold the same kept total and observation units as a fresh
store of the same history, drop the calibrations and keep budget and view; SIGKILL during the
migration of a 200,000-observation store leaves it at its old schema (the old code opens it),
and older code refuses an upgraded store with a SchemaError naming both schemas.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import morphz
from oldcode import old_morphz, run_on

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"


_UPGRADE = "import morphz, sys; morphz.open(sys.argv[1]).close()"


def test_an_older_morphz_running_through_the_upgrade_leaves_the_store_auditing_clean(
    tmp_path: Path,
) -> None:
    """A user upgrades Morphz while an agent of the previous release (here 6761d10, before
    writes checked the schema) still runs on the store; the new CLI opens the store and migrates
    it to 22. The old process then commits with its old rules: its kept total counts Cyrillic
    at a quarter of a token a character, so ``frame_tokens`` ends below what 0020 and the replay
    count, and the store fails its audit for good (every later commit moves the stored total by
    a delta; nothing recounts it). The calibration it saves after the upgrade is one 0021 was
    meant to drop. Expected: the old process's write is refused once the store is upgraded (or
    the store otherwise stays consistent)."""
    old = old_morphz("6761d10", tmp_path)
    store = tmp_path / "store.db"
    script = """
import os, subprocess, sys
import morphz
from morphz.encoding.tokens import Calibration
store, new_src = sys.argv[1], sys.argv[2]
db = morphz.open(store)
ctx = db.context("ctx-a", create=True)
e = ctx.observe("user_message", "Развёртывание в регионе москва-1")
subprocess.run(  # the new Morphz opens (and upgrades) the store meanwhile
    [sys.executable, "-c", "import morphz, sys; morphz.open(sys.argv[1]).close()", store],
    env={**os.environ, "PYTHONPATH": new_src}, check=True)
try:
    ctx.commit(f'(context-tx (base-version {ctx.version}) (derive deploy/region (from {e.ref}) '
               '(fact (регион "москва-1, основной центр обработки данных"))))')
    ctx.save_calibration("gpt-test", Calibration(1.7, 5))
    print("old process wrote")
except morphz.MorphzError as exc:
    print("old process refused:", exc)
"""
    print(run_on(old, script, str(store), str(SRC)))
    with morphz.open(store) as db:
        ctx = db.context("ctx-a")
        report = ctx.audit()
        assert report.ok, report.differences
        assert ctx.calibration("gpt-test").samples == 0


def test_a_store_that_recorded_the_first_0017_still_gets_the_landed_schema_repairs(
    tmp_path: Path,
) -> None:
    """A store made by the first version (7cba7ce: ``frames_order`` on (context_id, pos)) and
    opened by 8aaa0cb, a main commit whose migration 17 was ``0017_recall_replies_and_pins``
    (renumbered to 0019 seven minutes later). The current code knows migrations by number only
    (store/sqlite.py:327-331), so it takes 17 as done and never runs
    ``0017_landed_schema_repairs``: ``frames_order`` stays the first one, the store ends with
    19 under two names, and the audit says nothing. Expected: a recorded migration whose name
    is not the bundled one is run (the repairs inspect what they find)."""
    first = old_morphz("7cba7ce", tmp_path)
    renumbered = old_morphz("8aaa0cb", tmp_path)
    store = tmp_path / "store.db"
    run_on(
        first,
        "import morphz, sys\n"
        "db = morphz.open(sys.argv[1]); ctx = db.context('ctx-a', create=True)\n"
        "e = ctx.observe('user_message', 'первый')\n"
        "ctx.commit(f'(context-tx (base-version 0) (derive a/b (from {e.ref}) (note x)))')\n"
        "db.close()\n",
        str(store),
    )
    run_on(renumbered, _UPGRADE, str(store))
    with morphz.open(store) as db:
        assert db.context("ctx-a").audit().ok
    conn = sqlite3.connect(store)
    try:
        order = [r[2] for r in conn.execute("PRAGMA index_info(frames_order)")]
    finally:
        conn.close()
    assert order == ["context_id", "pos", "frame_id"]
