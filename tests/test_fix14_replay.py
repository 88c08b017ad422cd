"""Fix 14, the audit's replay made cheaper again: each check it makes is still made. A commit's
payload is compared key by key (a fast path for the usual case, then the full comparison that
reports); the settings are read by their types, whose modules load only when the context has
such a setting; the recall index's frame documents are counted against the mind's frames; a
replay records no receipt effects but reaches the same state."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import morphz
from morphz.mind import Env, MindState, apply_tx
from morphz.txlang import read_tx
from stores import hand_connect, revised_store, run_sql


def _audit(path: Path) -> morphz.AuditReport:
    with morphz.open(path) as db:
        return db.context("c").audit()


@pytest.mark.parametrize(
    ("seq", "path", "value"),
    [
        (2, "$.tx_id", "'tx-9'"),
        (3, "$.tx_id", "'tx-1'"),
        (2, "$.base_version", "7"),
        (3, "$.reason", "'forged'"),
        (2, "$.reason", "'none was given'"),
        (3, "$.replaced", "json_object('plan/route', 'forged')"),
        (2, "$.undone", "json_object('plan/route', 'x')"),  # the replay removed nothing
        (3, "$.unrelated", "json_array(json_array('a', 'b', 'c'))"),
    ],
)
def test_the_audit_reports_each_payload_key_that_differs(
    tmp_path: Path, seq: int, path: str, value: str
) -> None:
    store = tmp_path / "s.db"
    revised_store(store)
    run_sql(store, f"UPDATE events SET payload = json_set(payload, '{path}', {value}) "
                   f"WHERE seq = {seq}")  # fmt: skip
    report = _audit(store)
    key = path[2:]
    assert any(f"@e{seq}: the commit's payload has {key}" in d for d in report.differences), (
        report.differences
    )


@pytest.mark.parametrize("key", ["tx_id", "reason", "base_version", "replaced"])
def test_a_payload_that_lacks_a_key_is_no_difference(tmp_path: Path, key: str) -> None:
    """Stores written before a key was recorded have none."""
    store = tmp_path / "s.db"
    revised_store(store)
    run_sql(store, f"UPDATE events SET payload = json_remove(payload, '$.{key}') WHERE seq = 3")
    assert _audit(store).ok


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("budget", '"garbage"'),
        ("view", '{"nope": 1}'),
        ("calibration:old-model", "[1.0, 3]"),
        ("calibration:old-model", '{"nope": 1}'),
        ("a-later-setting", "{not json"),
    ],
)
def test_the_audit_reports_each_damaged_setting(tmp_path: Path, name: str, text: str) -> None:
    store = tmp_path / "s.db"
    revised_store(store)
    conn = hand_connect(store)
    with conn:
        conn.execute("INSERT INTO context_settings VALUES ('c', ?, ?)", (name, text))
    conn.close()
    report = _audit(store)
    assert any(f"'{name}'" in d and "context 'c'" in d for d in report.differences), (
        report.differences
    )


def test_settings_that_read_pass_the_audit(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    revised_store(store)
    with morphz.open(store) as db:
        ctx = db.context("c")
        ctx.set_budget(morphz.capacity.Budget(window=100_000, output_reserve=0))
        ctx.set_view(morphz.encoding.view.View(preview_threshold=300))
    run_sql(store, "INSERT INTO context_settings VALUES ('c', 'a-later-setting', '{\"x\": 1}')")
    assert _audit(store).ok


def _frames_fts(store: Path) -> str:
    conn = sqlite3.connect(store)
    try:
        (table,) = conn.execute(  # the index's FTS5 table (not its shadow tables)
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE recall_fts%'"
        ).fetchone()
    finally:
        conn.close()
    return str(table)


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM {fts} WHERE rowid < 0",  # the frame's document is gone
        "UPDATE recall_frames SET doc_id = 1",  # mapped to an event's document, not its own
        "UPDATE recall_frames SET doc_id = -99",  # mapped to no document
    ],
)
def test_the_audit_reports_frame_documents_the_index_lost(tmp_path: Path, damage: str) -> None:
    store = tmp_path / "s.db"
    revised_store(store)
    fts = _frames_fts(store)
    with morphz.open(store) as db:  # damaged while open: open would rebuild the index
        ctx = db.context("c")
        run_sql(store, damage.format(fts=fts))
        report = ctx.audit()
    assert any("frame documents" in d and "rebuild c" in d for d in report.differences), (
        report.differences
    )


def test_a_replay_records_no_effects_but_reaches_the_same_state() -> None:
    """Effects are the receipt's: the live commit records them, a replay (receipts=False)
    does not, and both make the same changes to the mind."""
    mind = MindState()
    mind.apply(apply_tx(mind, read_tx("(context-tx (base-version 0) (create a (x)))")), commit=True)
    tx = read_tx(
        '(context-tx (base-version 1) (reason "newer") (derive b (from a) (y)) '
        "(relate b supersedes a) (retire a))"
    )
    live, replay = apply_tx(mind, tx, Env("s")), apply_tx(mind, tx, Env("s", receipts=False))
    assert [e.change for e in live.effects] == [
        "created",
        "related",
        "retired at once: superseded by b",
    ]
    assert replay.effects == []
    assert replay.canonical() == live.canonical()
    assert replay.written == live.written
