"""Review 10 (store and integrity): each test fails on the code it was written against; its
docstring says what is expected.

Areas: re-entrant use of the store on one thread (a write inside a write, a read inside a read),
the upgrade of event times by migration 0007, and what the audit checks of the derived data the
recall index reads (``events.time_us``, the FTS documents)."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import morphz
from morphz import observe as appending
from morphz.recall.documents import time_us

# ---------------------------------------------------------------- re-entrant writes


def test_a_write_inside_an_import_keeps_the_import_all_or_nothing(
    open_db: Callable[[], morphz.Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import_history`` promises "all of them are appended in one database transaction ... all
    or nothing", and calls ``progress(done, total)`` inside that transaction. A host that logs
    the progress into the same store (here: ``record`` into another context, a plausible ops log)
    starts a second write on the same thread. ``SqliteStore._begin`` then finds the writer
    connection in a transaction and *rolls it back* (the rule meant for a transaction an
    interrupt left open), so the import's first chunk is silently discarded; the later chunks
    are written in autocommit mode (no transaction is open any more) and the final COMMIT fails
    with ``cannot commit - no transaction is active``. The context is left with @e3..@e5 and no
    @e1/@e2: events missing from the log, a head chain the audit rejects.

    Expected: the imported context is never half-written. Either the nested write is refused
    with a typed error (and the import rolled back whole, or completed whole), or it runs
    without touching the import's transaction. In every case the context holds either none or
    all of the lines, with contiguous seqs, and audits clean."""
    monkeypatch.setattr(appending, "IMPORT_CHUNK", 2)  # three chunks for five lines
    db = open_db()
    ctx = db.context("imported", create=True)
    log = db.context("ops-log", create=True)
    lines = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(5))

    def progress(done: int, total: int) -> None:
        log.record("model_reply", f"imported {done}/{total}")

    # refusing the nested write is acceptable; a half-written context is not
    with contextlib.suppress(morphz.MorphzError):
        ctx.import_history(io.StringIO(lines), progress=progress)
    seqs = [e.seq for e in ctx.events()]
    assert seqs in ([], [1, 2, 3, 4, 5]), f"the import was half-written: events {seqs}"
    report = ctx.audit()
    assert report.ok, report.differences[:3]


# ---------------------------------------------------------------- re-entrant reads


def test_an_audit_progress_callback_may_read_the_context(ctx: morphz.Context) -> None:
    """``Context.audit(progress=...)`` calls ``progress`` inside its read transaction (at least
    once, at the end). A callback that reads anything of the store on the same thread (here
    ``ctx.version``, as a host showing "audited N of M at version V" would) opens a second read
    on the thread's reader connection, whose ``BEGIN`` fails: the whole audit ends with
    ``StoreError: read from ... failed: cannot start a transaction within a transaction``, a
    message that says nothing of the cause.

    Expected: the audit completes (a read inside a read on one thread reads, e.g. within the
    outer snapshot, or the callback is called outside the transaction), and the callback sees
    the version."""
    for i in range(3):
        ctx.observe("user_message", f"note {i}")
    seen: list[int] = []
    report = ctx.audit(progress=lambda done, total: seen.append(ctx.version))
    assert report.ok
    assert seen and seen[-1] == 0


# ---------------------------------------------------------------- migration 0007


def _as_schema_0006(path: Path) -> None:
    """Make a store written by this Morphz look as it did at schema 0006: 0006 is this schema
    without ``frame_tokens`` (0009), and 0007/0008/0010 change rows only."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("DELETE FROM schema_migrations WHERE number >= 7")
        conn.execute("DROP TABLE frame_tokens")
        conn.commit()
    finally:
        conn.close()


def test_migration_0007_keeps_the_time_of_an_event_with_a_seconds_offset(tmp_path: Path) -> None:
    """Python writes a UTC offset with seconds for historical times (``zoneinfo`` gives
    Europe/Amsterdam before 1937 as ``+00:19:32``), and ``observe``/``import`` accept such
    times; the live path stores their exact ``time_us``. Migration 0007 recomputes ``time_us``
    of every event whose time has a fraction and whose ``time_us`` is a whole millisecond, with
    ``strftime('%s', substr(time, 1, 19) || substr(time, 27))``: SQLite's date functions do not
    read an offset with seconds, so the correct value becomes NULL (0002's ``julianday`` does the
    same for a store upgraded from 0001). The event then drops out of every time-range search
    (NULL is in no window), for good: a recall rebuild does not recompute ``time_us`` and the
    audit does not compare it.

    Expected: after the upgrade every event's ``time_us`` is the UTC microseconds of its time
    (as ``recall.documents.time_us`` computes it), and a time-range search that holds the event
    finds it."""
    path = tmp_path / "old.db"
    when = "1900-01-01T09:00:00.500000+00:19:32"
    with morphz.open(path) as db:
        db.context("context-default", create=True).observe(
            "user_message", "the lighthouse keeper's log", time=when
        )
    _as_schema_0006(path)
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        page = ctx.recall.search(
            "lighthouse", since="1900-01-01T00:00:00+00:00", until="1900-01-02T00:00:00+00:00"
        )
        found = [hit.ref for hit in page.hits]
    conn = sqlite3.connect(path)
    try:
        (stored,) = conn.execute("SELECT time_us FROM events WHERE seq = 1").fetchone()
    finally:
        conn.close()
    assert stored == time_us(when), f"time_us after the upgrade: {stored}"
    assert found == ["@e1"]


# ---------------------------------------------------------------- what the audit checks


def _tamper(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


def test_the_audit_reports_an_event_time_us_that_disagrees_with_its_time(tmp_path: Path) -> None:
    """``events.time_us`` is derived from ``events.time`` (UTC microseconds) and is what every
    time-range recall search filters and orders on. Nothing checks it: the audit replays and
    compares the projection, frame sources, the kept frame-token total and the session counts,
    but a ``time_us`` a day off (a hand edit, or a migration's conversion: see the 0007 test
    above) audits clean, and ``recall-index rebuild`` does not recompute it either, so a wrong
    value is invisible and permanent.

    Expected: the audit reports an event whose ``time_us`` is not its time's (a difference
    naming the event), as it reports a frame-token total that disagrees with the frames."""
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        ctx = db.context("context-default", create=True)
        ctx.observe("user_message", "deploy to shanghai", time="2026-08-04T09:00:00+08:00")
        ctx.observe("user_message", "and then to hangzhou", time="2026-08-05T09:00:00+08:00")
        assert ctx.audit().ok
    _tamper(path, "UPDATE events SET time_us = time_us + 86400000000 WHERE seq = 1")
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        window = ctx.recall.search(
            since="2026-08-04T00:00:00+08:00", until="2026-08-05T00:00:00+08:00"
        )
        assert window.hits == ()  # the damage is real: @e1 left its own day
        report = ctx.audit()
    assert not report.ok
    assert any("@e1" in d for d in report.differences), report.differences


def test_a_recall_index_that_lost_a_document_is_reported(tmp_path: Path) -> None:
    """The recall index is derived data, and DESIGN §8 has ``recall-index inspect`` report
    "documents, last indexed event and staleness". An index that lost the document of an event
    (a hand edit, a bug in a write path) still reports ``current`` (inspect compares only the
    last indexed seq and the number of frame documents) and the audit does not look at the index
    at all, so the event can no longer be found by any search and no tool says so; the remedy,
    ``recall-index rebuild``, is never suggested.

    Expected: the loss is reported, by ``recall_index.inspect()`` (not current) or by the
    audit (a difference naming the recall index)."""
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        ctx = db.context("context-default", create=True)
        ctx.observe("user_message", "the database lives in shanghai")
        ctx.observe("user_message", "the cache lives in hangzhou")
        table = ctx.recall_index.inspect().table
    _tamper(path, f"DELETE FROM {table} WHERE rowid = 1")
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        refs = [hit.ref for hit in ctx.recall.search("shanghai").hits]
        assert "@e1" not in refs  # the damage is real (@e2 matches by its previous observation)
        current = ctx.recall_index.inspect().current
        report = ctx.audit()
    assert not current or not report.ok, "a recall index missing @e1's document reads as sound"
