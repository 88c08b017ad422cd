"""Fix 21b: `context status` counts the pressure under the calibration the context learnt most
recently, names its model, and passes over a calibration that cannot be read."""

from __future__ import annotations

from pathlib import Path

import morphz
from morphz.encoding.tokens import Calibration
from morphz.interfaces import render
from stores import hand_connect


def test_status_counts_under_the_latest_calibration_and_names_its_model(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "prepare the deployment")
    plain = ctx.status().pressure
    assert (plain["kind"], plain["model"]) == ("estimated", None)
    ctx.save_calibration("openai:older", Calibration(factor=3.0, samples=4))
    ctx.observe("user_message", "and roll it out")  # a later event: the next one is newer
    ctx.calibrate("openai:newer", 1_000, 2_000)
    pressure = ctx.status().pressure
    estimated = ctx.encode().tokens
    assert (pressure["kind"], pressure["model"]) == ("calibrated", "openai:newer")
    assert pressure["tokens"] == ctx.encode(calibration=ctx.calibration("openai:newer")).tokens
    assert pressure["tokens"] > estimated
    assert "tokens (calibrated for openai:newer) of" in render.status(ctx.status())


def test_a_calibration_saved_later_is_the_latest(ctx: morphz.Context) -> None:
    ctx.calibrate("openai:first", 1_000, 2_000)
    ctx.observe("user_message", "hello")
    ctx.save_calibration("openai:second", Calibration(factor=1.5, samples=1))
    assert ctx.status().pressure["model"] == "openai:second"


def test_a_damaged_calibration_is_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "hello")
        ctx.calibrate("openai:good", 1_000, 1_500)
    conn = hand_connect(path)
    with conn:
        conn.execute("INSERT INTO context_settings VALUES ('c', 'calibration:bad', '[1.0, 3]')")
    conn.close()
    with morphz.open(path) as db:
        assert db.context("c").status().pressure["model"] == "openai:good"
