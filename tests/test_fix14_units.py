"""Fix 14, token units: migration 0021 drops the calibrations learnt against the estimate before
0020; each observation keeps its text's token units (migration 0022 fills them in upgraded
stores), and receipts state what retiring or restoring it changes by them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import morphz
from morphz.capacity import Budget
from morphz.encoding.tokens import Calibration
from morphz.mind.lifecycle import obs_tokens
from morphz.mind.lines import Entry, observation_units
from morphz.mind.state import ObsState
from morphz.token_estimate import pieces, text_units

TEXTS = {
    "ascii": "deploy ok, see the server log and restart the service. " * 3,
    "chinese": "部署成功，请检查服务器日志并重新启动服务。" * 3,
    "russian": "Развертывание прошло успешно, проверьте журнал. " * 3,
}


def _units(db: morphz.Database, context: str) -> dict[int, tuple[int, int]]:
    with db.store.read(context) as r:
        return {o.seq: (o.chars, o.units) for o in r.observations()}


def _as_schema_21(path: Path) -> None:
    """The store as migration 21 left it: observations without their units (0029, which
    counts them by today's rule, runs again after 0022)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("ALTER TABLE observations DROP COLUMN units")
        conn.execute("DELETE FROM schema_migrations WHERE number IN (22, 29)")
        conn.commit()
    finally:
        conn.close()


def test_observations_keep_their_token_units_and_the_upgrade_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        refs = {
            name: ctx.observe("tool_result", text, session="s").ref for name, text in TEXTS.items()
        }
        ctx.commit(f'(context-tx (base-version 0) (reason "r") (retire {refs["russian"]}))')
        expected = _units(db, "c")
        assert [chars for chars, _ in expected.values()] == [len(t) for t in TEXTS.values()]
        # each counts its inbox entry (the last closes the region: ")" costs what a "\n" does)
        entries = list(pieces(ctx.encode().region("inbox")))[1:]
        shown = [units for seq, (_, units) in expected.items() if seq != int(refs["russian"][2:])]
        assert shown == [text_units(entry) for entry in entries]
    _as_schema_21(path)
    with morphz.open(path) as db:
        assert _units(db, "c") == expected  # counted from the events' text
        report = db.context("c").audit()
        assert report.ok, report


def test_the_audit_reports_an_observations_units_that_its_text_does_not_give(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ref = db.context("c", create=True).observe("user_message", TEXTS["russian"]).ref
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE observations SET units = 1")
        conn.commit()
    finally:
        conn.close()
    with morphz.open(path) as db:
        report = db.context("c").audit()
    assert not report.ok
    assert any(f"observation {ref}" in line for line in report.differences), report


def test_an_upgrade_drops_calibrations_and_keeps_the_other_settings(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    budget = Budget(window=32_000, output_reserve=2_000, configured=20_000, reserve=500)
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.set_budget(budget)
        ctx.save_calibration("openai:gpt-4o", Calibration(1.6, 20))
    conn = sqlite3.connect(path)
    try:
        conn.execute("DELETE FROM schema_migrations WHERE number = 21")
        conn.commit()
    finally:
        conn.close()
    with morphz.open(path) as db:
        with db.store.read("c") as r:
            names = set(r.active.settings())
        assert not any(name.startswith("calibration:") for name in names), names
        assert db.context("c").budget() == budget


def test_a_previewed_observation_counts_its_shown_part_by_its_units_per_character(
    tmp_path: Path,
) -> None:
    text = "部署成功，请检查服务器日志并重新启动服务。" * 1000  # previewed: above 16,000 chars
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        ref = ctx.observe("tool_result", text, session="s").ref
        before = ctx.encode().pressure.tokens
        retired = ctx.commit(f'(context-tx (base-version 0) (reason "r") (retire {ref}))')
        freed = before - ctx.encode().pressure.tokens
    stated = retired.effects[0].immediate
    assert 0.9 * freed <= stated <= 1.1 * freed, (stated, freed)


def test_ascii_prose_counts_four_characters_a_token_with_its_entry() -> None:
    """Prose has fewer chunks than its characters cost, so its entry (text and framing) counts
    four characters a token (fix 21b: chunks count only where they are more)."""
    for repeat in (40, 280):  # 2,240 and 15,680 characters: shown whole
        text = "deploy ok, see the server log and restart the service. " * repeat
        time = "2026-12-01T10:00:00+00:00"
        units = observation_units(Entry(7, "tool_result", "s", time, 3), text)
        obs = ObsState(7, "tool_result", "active", False, len(text), units)
        entry = f' (observation @e7 (kind tool_result) (session s) (time "{time}") (tick 3) '
        entry += f'(text "{text}"))\n'
        assert obs_tokens(obs) == -(-len(entry) // 4)
