"""An event whose stored text is not UTF-8 (a hand edit, a damaged page): the events are read
1,000 at a time, and the error and the audit must name the damaged event itself, not the first
event of its batch, after giving the events before it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import morphz
from morphz.errors import StoreError

CONTEXT = "context-default"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.observe_batch(
            [morphz.Observation("tool_result", f"result {i}") for i in range(2_499)],
            session="s",
        )
        ctx.observe("user_message", "last")
    return path


def _damage(path: Path, seq: int, column: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"UPDATE events SET {column} = CAST(X'68C3' AS TEXT) WHERE seq = ?", (seq,))
    conn.close()


@pytest.mark.parametrize("column", ["text", "meta"])
def test_reading_the_events_names_the_damaged_one_after_those_before_it(
    store: Path, column: str
) -> None:
    _damage(store, 1_500, column)
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        assert [e.seq for e in ctx.events(after=1_000, limit=499)] == list(range(1_001, 1_500))
        with pytest.raises(StoreError) as caught:
            ctx.events(after=1_000)
    message = str(caught.value)
    assert f"the {column} of event @e1500 of context '{CONTEXT}' cannot be read" in message
    assert f"morphz context audit {CONTEXT}" in message


def test_the_audit_names_the_damaged_event_and_replays_those_before_it(store: Path) -> None:
    _damage(store, 1_500, "text")
    with morphz.open(store) as db:
        report = db.context(CONTEXT).audit()
    assert not report.ok
    (stop,) = [d for d in report.differences if "cannot be read" in d]
    assert stop.startswith("@e1500: the event cannot be read ("), stop
