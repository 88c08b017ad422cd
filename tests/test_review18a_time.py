"""Review 18a: time and clocks (wall-clock steps, time zones, the injected clock, boundaries).
Each test fails on the code as reviewed because of the defect its docstring names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import morphz
from agents import make_engine
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel


class SteppedClock:
    """A store clock a test moves by hand (an NTP step, a VM restore)."""

    def __init__(self, start: datetime) -> None:
        self.moment = start

    def __call__(self) -> datetime:
        return self.moment


def test_engine_reads_the_store_clock_not_the_machine_clock(
    tmp_path: Path, workspace: Path
) -> None:
    """morphz.open(now=...) is the store's clock, yet an Engine compiles every request with
    the machine's wall clock (engine.py `_now`, `self.clock = _now`): the kernel's local-time
    and the session working set's 24-hour window are measured from a different clock than the
    events' times. A host that injects a clock (a replay, a simulation, a test harness) sees
    every other session dropped as inactive-beyond-window although, by the store's own clock,
    it was active a minute ago."""
    clock = SteppedClock(datetime(2020, 3, 15, 12, 0, tzinfo=UTC))
    db = morphz.open(tmp_path / "m.db", now=clock)
    try:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "the deploy plan", session="planning")
        clock.moment += timedelta(minutes=1)
        seen: list[ModelRequest] = []

        def answer(request: ModelRequest) -> ModelResponse:
            seen.append(request)
            return ModelResponse("ok", ())

        engine = make_engine(ctx, FunctionModel(answer), workspace)
        result = asyncio.run(engine.run("hi", session="ops"))
        assert result.state == "delivered", result.reason
        text = seen[0].encoding
        assert "(session planning " in text, "a session active a minute ago was left out"
        assert "inactive-beyond-window" not in text
        assert '(local-time "2020-03-1' in text  # the store's day, in any time zone
    finally:
        db.close()


def _directory(encoding: morphz.Encoding) -> str:
    text = encoding.text
    return text[text.index("(session-directory") : text.index("(kernel")]


def test_clockless_window_is_not_anchored_on_a_future_glitch(tmp_path: Path) -> None:
    """A compile without a clock (``ctx.encode()``, ``ctx.status()``) measures the session
    window from the context's last activity, read as ``max(last_time)`` over active sessions
    (store/sqlite_active.py `last_active`). One write made while the wall clock was days
    ahead (a VM restored with a wrong clock, a bad NTP server, then stepped back) becomes that
    anchor for as long as its session stays untouched: the session active a minute before the
    current one, by sequence the most recent other session, is left out as
    inactive-beyond-window while the stale session is shown in full. The last activity is the
    time of the latest write by sequence, which a single clock glitch cannot move days ahead."""
    clock = SteppedClock(datetime(2026, 8, 4, 9, 0, tzinfo=UTC))
    with morphz.open(tmp_path / "m.db", now=clock) as db:
        ctx = db.context("c", create=True)
        clock.moment += timedelta(days=3)  # the clock runs ahead ...
        ctx.observe("user_message", "written while the clock ran ahead", session="stale")
        clock.moment -= timedelta(days=3)  # ... and NTP steps it back
        ctx.observe("user_message", "the real work", session="work")
        clock.moment += timedelta(minutes=1)
        ctx.observe("user_message", "next step", session="ops")
        directory = _directory(ctx.encode(session="ops"))
        assert "(session work " in directory, directory
        assert "inactive-beyond-window" not in directory, directory


def test_retired_sessions_named_latest_by_activity_order(tmp_path: Path) -> None:
    """The directory names "the most recently active" retired sessions (a model restores them
    by id). The other sessions are ranked by activity in sequence order (`ORDER BY last_seq`),
    but the retired ones by wall-clock time (store/sqlite_active.py `session_window`,
    `ORDER BY last_time DESC`): after a clock step, a session last active days ago by the log
    is named first and the one retired most recently is not named at all."""
    clock = SteppedClock(datetime(2026, 8, 4, 9, 0, tzinfo=UTC))
    with morphz.open(tmp_path / "m.db", now=clock) as db:
        ctx = db.context("c", create=True)
        clock.moment += timedelta(days=2)
        ctx.observe("user_message", "early", session="s1")
        clock.moment -= timedelta(days=2)
        for n in range(2, 7):
            clock.moment += timedelta(minutes=1)
            ctx.observe("user_message", f"work {n}", session=f"s{n}")
        ctx.commit(
            f'(context-tx (base-version {ctx.version}) (reason "done") '
            "(retire-session s1 s2 s3 s4 s5 s6))",
            session="ops",
        )
        directory = _directory(ctx.encode(session="ops", local_time=clock()))
        assert "(retired 6 (latest s6 s5 s4 s3 s2))" in directory, directory


def test_store_clock_past_year_9999_in_utc_is_a_typed_error(tmp_path: Path) -> None:
    """The store's clock is converted to UTC (database.py `Database.timestamp`,
    ``reading.astimezone(UTC)``); a reading whose UTC instant is past year 9999 (here
    9999-12-31T23:00-05:00, which ``observe(time=...)`` accepts as an event time) escapes as
    a bare OverflowError from every write, where every other bad clock reading is an
    InputError saying what the clock must return."""
    late = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))
    with (
        morphz.open(tmp_path / "m.db", now=lambda: late) as db,
        pytest.raises(morphz.InputError, match="clock"),
    ):
        db.context("c", create=True)


def test_naive_iso_local_time_is_not_silently_dropped_as_window_anchor(tmp_path: Path) -> None:
    """``local_time`` anchors the session window when ``now`` is not given. A naive ISO time
    there (``datetime.now().isoformat()``, the obvious thing to pass) is accepted as free text
    and then silently ignored as the anchor (encoding/sessions.py `_parse` returns None for a
    time without an offset), so the window falls back to the context's last activity: a
    session idle for a week stays in the directory. A naive ``now``, a naive datetime
    ``local_time`` and a naive store clock are all refused; this one should be too (or at
    least not change which sessions are shown)."""
    clock = SteppedClock(datetime(2026, 8, 4, 9, 0, tzinfo=UTC))
    with morphz.open(tmp_path / "m.db", now=clock) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "a week ago", session="old")
        with pytest.raises(morphz.InputError, match="local_time"):
            ctx.encode(session="ops", local_time="2026-08-11T09:00:00")


# Added with the fixes: the orders these tests ask for are read in bounded steps, and an older
# store gains what they need at its first open and audits clean.


def test_the_latest_activity_and_retired_sessions_are_index_steps(tmp_path: Path) -> None:
    """The last activity (one step down the events' index) and the retired sessions named
    (migration 0027's partial index) are read without a scan or a sort of the sessions."""
    clock = SteppedClock(datetime(2026, 8, 4, 9, 0, tzinfo=UTC))
    with morphz.open(tmp_path / "m.db", now=clock) as db:
        ctx = db.context("c", create=True)
        for n in range(8):
            ctx.observe("user_message", f"work {n}", session=f"s{n}")
        ctx.commit(
            f'(context-tx (base-version {ctx.version}) (reason "done") (retire-session s0 s1))',
            session="ops",
        )
        statements: list[str] = []
        conn = db.store._reader()  # type: ignore[attr-defined]
        conn.set_trace_callback(statements.append)
        try:
            ctx.encode(session="ops")
        finally:
            conn.set_trace_callback(None)
        marks = ("recorded_at FROM events", "attention = 'retired' AND session_id")
        timed = [s for s in statements if any(mark in s for mark in marks)]
        assert len(timed) == 2, statements
        for statement in timed:
            plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
            assert "SEARCH" in plan and "SCAN" not in plan and "TEMP B-TREE" not in plan, plan


def test_a_store_from_before_0027_gains_its_index_and_audits_clean(tmp_path: Path) -> None:
    from stores import run_sql

    path = tmp_path / "m.db"
    clock = SteppedClock(datetime(2026, 8, 4, 9, 0, tzinfo=UTC))
    with morphz.open(path, now=clock) as db:
        ctx = db.context("c", create=True)
        for n in range(3):
            clock.moment += timedelta(minutes=1)
            ctx.observe("user_message", f"work {n}", session=f"s{n}")
        ctx.commit(
            f'(context-tx (base-version {ctx.version}) (reason "done") (retire-session s0 s1))',
            session="ops",
        )
    run_sql(
        path,
        "DROP INDEX sessions_retired_latest",
        "DELETE FROM schema_migrations WHERE number = 27",
    )
    with morphz.open(path, now=clock) as db:
        ctx = db.context("c")
        report = ctx.audit()
        assert report.ok, report.differences
        text = ctx.encode(session="ops").text
        assert "(retired 2 (latest s1 s0))" in text
        names = db.store._reader().execute(  # type: ignore[attr-defined]
            "SELECT name FROM sqlite_master WHERE name = 'sessions_retired_latest'"
        )
        assert names.fetchall() == [("sessions_retired_latest",)]


def test_the_engine_states_the_store_clock_in_this_machine_time_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Database.local_time`` (the engine's default clock): the store's reading in the
    machine's zone, or in UTC when that zone cannot state it (past year 9999 there)."""
    import time

    readings = [
        datetime(2026, 8, 4, 9, 0, 30, 123, tzinfo=UTC),
        datetime(9999, 12, 31, 12, tzinfo=UTC),
    ]
    monkeypatch.setenv("TZ", "Etc/GMT-14")  # UTC+14
    time.tzset()
    try:
        with morphz.open(tmp_path / "m.db", now=lambda: readings[0]) as db:
            assert db.local_time() == "2026-08-04T23:00:30+14:00"
            readings.pop(0)
            assert db.local_time() == "9999-12-31T12:00:00+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()
