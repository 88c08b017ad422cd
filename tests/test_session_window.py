"""The session directory's working set, read from an index range and counts kept by triggers
(migration 0006), against a reference that reads every session of the context."""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import morphz
from histories import tx

SESSION_IDS = ("default", "ops", "research", "s4", "s5", "s6")
OFFSETS = ("+00:00", "+08:00", "-05:00")

# (kind, session, hours the clock moves first)
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(("observe", "observe", "observe", "retire-session", "restore-session")),
        st.sampled_from(SESSION_IDS),
        st.sampled_from((0.0, 0.5, 3.0, 13.0, 30.0)),
    ),
    max_size=25,
)


class HourClock:
    def __init__(self) -> None:
        self.current = datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.current += timedelta(microseconds=250_000)  # some times with fractions, some not
        return self.current


def _play(ctx: morphz.Context, clock: HourClock, actions: list[tuple[str, str, float]]) -> None:
    for kind, session, hours in actions:
        clock.current += timedelta(hours=hours)
        if kind == "observe":
            ctx.observe("user_message", f"in {session}", session=session)
            continue
        exists = _attention(ctx).get(session)
        wanted = "active" if kind == "retire-session" else "retired"
        if exists == wanted and session != "default":
            tx(ctx, f"({kind} {session})", reason="the test")


def _rows(ctx: morphz.Context) -> list[tuple[str, str, int, str]]:
    # closing(): a connection's own `with` ends its transaction but leaves it open, and
    # Python 3.13 warns (ResourceWarning) when an open connection is collected
    with closing(sqlite3.connect(ctx.db.store.path)) as conn:
        return conn.execute(
            "SELECT session_id, attention, last_seq, last_time FROM sessions WHERE context_id = ?",
            (ctx.id,),
        ).fetchall()


def _attention(ctx: morphz.Context) -> dict[str, str]:
    return {sid: attention for sid, attention, _, _ in _rows(ctx)}


def _expected(
    ctx: morphz.Context, current: str, now: datetime, hours: float, count: int
) -> tuple[list[str], dict[str, int]]:
    """Which sessions the directory shows, and what it leaves out, from every session."""
    rows = _rows(ctx)
    horizon = now - timedelta(hours=hours)
    mine = [sid for sid, _, _, _ in rows if sid == current]
    others = [r for r in rows if r[0] != current]
    inside = [r for r in others if r[1] == "active" and datetime.fromisoformat(r[3]) >= horizon]
    inside.sort(key=lambda r: (-r[2], r[0]))
    shown = mine + [sid for sid, _, _, _ in inside[: max(0, count - len(mine))]]
    excluded = {
        "retired": sum(1 for r in others if r[1] == "retired"),
        "inactive-beyond-window": sum(1 for r in others if r[1] == "active") - len(inside),
        "beyond-count": len(inside) - (len(shown) - len(mine)),
    }
    return shown, {reason: n for reason, n in excluded.items() if n}


@settings(max_examples=60, deadline=None)
@given(
    ACTIONS,
    st.sampled_from((*SESSION_IDS, "new")),
    st.sampled_from((1.0, 12.0, 24.0, 100.0)),
    st.integers(1, 7),
    st.sampled_from(OFFSETS),
)
def test_the_working_set_matches_a_reading_of_every_session(
    actions: list[tuple[str, str, float]], current: str, hours: float, count: int, offset: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        clock = HourClock()
        db = morphz.open(Path(folder) / "morphz.db", now=clock)
        try:
            other = db.context("other", create=True)  # its sessions must not count here
            for sid in ("ops", "s5", "elsewhere"):
                other.observe("user_message", "in another context", session=sid)
            tx(other, "(retire-session s5)", reason="the test")
            ctx = db.context("c", create=True)
            _play(ctx, clock, actions)
            sign = 1 if offset[0] == "+" else -1
            shift = timedelta(hours=sign * int(offset[1:3]))
            now = clock.current + timedelta(seconds=1)
            local = now.astimezone(UTC).replace(tzinfo=None) + shift
            enc = ctx.encode(
                session=current,
                now=f"{local.isoformat()}{offset}",  # the same moment, in another zone
                session_hours=hours,
                session_count=count,
                session_tokens=1_000_000,
            )
            shown, excluded = _expected(ctx, current, now, hours, count)
            assert [entry["session"] for entry in enc.sessions.to_dict()["shown"]] == shown
            assert enc.sessions.to_dict()["excluded"] == excluded
            assert _counts(ctx) == _grouped(ctx)
        finally:
            db.close()


def _counts(ctx: morphz.Context) -> dict[str, int]:
    # closing(): a connection's own `with` ends its transaction but leaves it open, and
    # Python 3.13 warns (ResourceWarning) when an open connection is collected
    with closing(sqlite3.connect(ctx.db.store.path)) as conn:
        rows = conn.execute(
            "SELECT attention, n FROM session_counts WHERE context_id = ? AND n > 0", (ctx.id,)
        ).fetchall()
    return dict(rows)


def _grouped(ctx: morphz.Context) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, attention, _, _ in _rows(ctx):
        counts[attention] = counts.get(attention, 0) + 1
    return counts


def test_counts_follow_retire_and_restore_and_ignore_a_refused_transaction(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "hi", session="ops")
    before = _counts(ctx)
    try:
        tx(ctx, "(retire-session ops) (retire missing/frame)", reason="half of it is wrong")
    except morphz.MorphzError:
        pass
    else:
        raise AssertionError("the transaction should have been refused")
    assert _counts(ctx) == before == {"active": 1}
    tx(ctx, "(retire-session ops)", reason="done")  # committed in session default
    assert _counts(ctx) == {"active": 1, "retired": 1}
    assert "(excluded (retired 1 (latest ops)))" in ctx.encode().region("session-directory")
    tx(ctx, "(restore-session ops)", reason="back to it")
    assert _counts(ctx) == {"active": 2} == _grouped(ctx)


def test_without_a_clock_the_window_ends_at_the_last_activity(ctx: morphz.Context) -> None:
    """A compile given no time (no ``now``, local time "unknown") measures the window from the
    context's last activity: the same state gives the same directory, and old sessions stay
    out of it as they do for the runtime, which always passes its local time."""
    clock = ctx.db.now
    ctx.observe("user_message", "long ago", session="old")
    clock.current += timedelta(hours=30)  # type: ignore[attr-defined]
    for sid in ("a", "b", "c"):
        ctx.observe("user_message", f"hello {sid}", session=sid)
    clock.current += timedelta(days=400)  # type: ignore[attr-defined]  # the wall clock: unused
    enc = ctx.encode(session="a", session_count=2)
    assert [e["session"] for e in enc.sessions.to_dict()["shown"]] == ["a", "c"]
    assert enc.sessions.to_dict()["excluded"] == {"beyond-count": 1, "inactive-beyond-window": 1}
    wide = ctx.encode(session="a", session_count=9, session_hours=31).sessions.to_dict()
    assert [e["session"] for e in wide["shown"]] == ["a", "c", "b", "old"]
    clock.current += timedelta(days=1)  # type: ignore[attr-defined]
    assert ctx.encode(session="a", session_count=2).text == enc.text


def test_a_session_last_active_exactly_at_the_window_start_is_inside(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "at the edge", session="edge")
    ctx.observe("user_message", "mine")
    (last,) = [t for sid, _, _, t in _rows(ctx) if sid == "edge"]
    start = datetime.fromisoformat(last)
    for now, shown in ((start, True), (start + timedelta(microseconds=1), False)):
        local = (now + timedelta(hours=24)).astimezone(timezone(timedelta(hours=8)))
        enc = ctx.encode(now=local.isoformat(), session_hours=24)
        assert (enc.sessions.level("edge") != "omitted") is shown
