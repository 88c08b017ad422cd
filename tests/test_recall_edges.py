"""Edges of recall found in a review of 2026-11-30 (each failed against the code as it was)."""

from __future__ import annotations

from typing import Any

import pytest

import morphz
from test_recall import commit, key, keys, say  # noqa: F401


def found(ctx: morphz.Context, query: str, **kw: Any) -> set[str]:
    return set(keys(ctx.recall.search(query, limit=100, **kw)))


# ------------------------------------------------------------------ chronological paging


# ------------------------------------------------------------------ tokenization


def test_a_word_written_with_combining_marks_is_found(ctx: morphz.Context) -> None:
    """The same word in NFD (macOS file names, many pasted texts) or with Turkish dotted I is
    cut in two at the combining mark, so a search for the word does not find it."""
    nfd = say(ctx, "the office moved to Zu\u0308rich last week")
    turkish = say(ctx, "flight to İstanbul is booked")
    assert nfd in found(ctx, "Zürich")
    assert turkish in found(ctx, "Istanbul")


def test_diacritics_are_folded_for_stemmed_words_too(ctx: morphz.Context) -> None:
    """The FTS5 tokenizer folds diacritics ('cafe' finds 'café'), but the Snowball stem is
    taken before the fold, so an unaccented query misses a word whose stem differs."""
    cafe = say(ctx, "we met at the café downtown")
    resume = say(ctx, "my résumé is attached")
    assert cafe in found(ctx, "cafe")  # holds
    assert resume in found(ctx, "resume")


# ------------------------------------------------------------------ upgrade from schema 0001


def _schema_0001_store(path: Any, time: str) -> None:
    """A store as Morphz wrote it before the recall index (schema 0001): one context holding
    one user message at ``time``."""
    import sqlite3

    from morphz.mind.state import GENESIS_HEAD
    from morphz.store.sqlite import _migrations, _statements

    (number, name, sql) = _migrations()[0]
    assert number == 1
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE TABLE schema_migrations "
            "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (1, ?, datetime('now'))", (name,))
        conn.execute(
            "INSERT INTO contexts VALUES ('context-default', ?, 0, 1, 1, ?, 8, 8, 0, 0)",
            (time, GENESIS_HEAD),
        )
        conn.execute(
            "INSERT INTO events (context_id, seq, kind, session_id, time, recorded_at, text, "
            "meta, payload, version, clock, head) VALUES ('context-default', 1, 'user_message', "
            "'default', ?, ?, 'kiwi harvest report', NULL, '{\"tick\": true}', 0, 1, ?)",
            (time, time, GENESIS_HEAD),
        )
        conn.execute(
            "INSERT INTO observations VALUES "
            "('context-default', 1, 'user_message', 'active', 0, 19)"
        )
        conn.execute(
            "INSERT INTO sessions VALUES ('context-default', 'default', 'active', 1, 1, ?)", (time,)
        )
        conn.commit()
    finally:
        conn.close()


def test_history_from_before_the_recall_index_is_searchable_after_the_upgrade(
    tmp_path: Any,
) -> None:
    """The 0002 migration creates the index but nothing ever indexes the events already in the
    store: search misses the whole old history, and the index stays 'not current' (indexed_seq
    stuck at 0) however many events arrive later, until an operator happens to rebuild."""
    path = tmp_path / "old.db"
    _schema_0001_store(path, "2023-05-01T00:00:00+00:00")
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        ctx.observe("user_message", "kiwi prices rose", session="later")
        assert "@e1" in found(ctx, "kiwi")


def test_migrated_event_times_keep_their_microseconds(tmp_path: Any) -> None:
    """0002 fills events.time_us from julianday() rounded to the millisecond, while every new
    event gets exact microseconds: an old event at 00:00:00.9996 is treated as 00:00:01.000,
    so `until 00:00:01` (exclusive) drops it and `since 00:00:01` returns it."""
    path = tmp_path / "old.db"
    _schema_0001_store(path, "2023-05-01T00:00:00.999600+00:00")
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        ctx.recall_index.rebuild()  # so that the old event is a document at all
        before = ctx.recall.search(until="2023-05-01T00:00:01+00:00", limit=10)
        after = ctx.recall.search(since="2023-05-01T00:00:01+00:00", limit=10)
        assert (keys(before), keys(after)) == (["@e1"], [])


# ------------------------------------------------------------------ typed errors


def test_a_query_or_frame_id_that_is_not_text_is_a_typed_error(ctx: morphz.Context) -> None:
    """read(42) is an InputError naming the fix; search(42) and frame(42) crash untyped
    (AttributeError / TypeError) in the Python API (DESIGN §13: every refusal is typed)."""
    from morphz.errors import MorphzError

    say(ctx, "kiwi harvest")
    with pytest.raises(MorphzError):
        ctx.recall.read(42)  # type: ignore[arg-type]  # holds
    with pytest.raises(MorphzError):
        ctx.recall.search(42)  # type: ignore[arg-type]
    with pytest.raises(MorphzError):
        ctx.recall.frame(42)  # type: ignore[arg-type]


def test_an_index_of_the_old_tokens_is_rebuilt_when_the_store_is_upgraded(tmp_path: Any) -> None:
    """0008_recall_tokens changed the tokens (diacritics folded before stemming): opening a
    store that had not applied it rebuilds each context's index, so accented words stemmed the
    old way are found by their plain spelling."""
    import sqlite3

    path = tmp_path / "m.db"
    with morphz.open(path) as db:
        say(db.context("context-default", create=True), "my résumé is attached")
    conn = sqlite3.connect(path)
    table = conn.execute("SELECT fts_table FROM recall_meta").fetchone()[0]
    conn.execute(f"DELETE FROM {table}")  # the index as an older Morphz left it: here, empty
    conn.execute("DELETE FROM schema_migrations WHERE number = 8")
    conn.commit()
    conn.close()
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        assert "@e1" in found(ctx, "resume")
        assert ctx.recall_index.inspect().current
