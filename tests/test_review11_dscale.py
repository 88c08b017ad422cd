"""Review 11 (dscale): a review of the scale commit 180a706 for semantic differences from the
code it replaced. Each test fails on the current code; its docstring states what is expected.

What was compared and found the same (no test here): the supersede fast path (old and new
``apply_tx`` side by side on random transactions biased to retire/derive/revise/relate/unrelate/
restore/rollback/checkpoint interleavings: identical changes, receipts, written boundaries and
errors, thousands of firings), ``place`` through neighbour reads (MindState, Overlay and the
SQL ``frames_order`` neighbours against a full sort, renumbers, rollbacks, > 64 moves), the audit
replay after places and rollbacks, traversal pages and cursors (old and new ``traverse`` on random
graphs with cycles and events), ``ctx.mind()`` observations and checkpoints, ``status`` session
counts and ``pick_activations``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.errors import MorphzError
from morphz.interfaces.cli import main

BEYOND_SQLITE = 2**63  # one past SQLite's largest INTEGER


def test_events_with_a_limit_beyond_sqlite_integers_is_not_an_overflow(
    ctx: morphz.Context,
) -> None:
    """``ctx.events(after, limit)`` checks ``limit`` only as a whole number of at least 0, and
    before 180a706 any such limit worked (the limit was applied in Python): a limit larger than
    the history returns the whole history. Since the limit is bound into SQL (``LIMIT ?``), a
    limit of 2**63 or more raises a bare ``OverflowError`` ("Python int too large to convert to
    SQLite INTEGER") from the driver, outside the typed errors. Expected: every event (as a
    smaller large limit gives), or at worst a typed InputError naming the range."""
    ctx.observe("user_message", "one")
    ctx.observe("user_message", "two")
    expected = ctx.events(0, 2**63 - 1)
    assert len(expected) == 2
    try:
        got = ctx.events(0, BEYOND_SQLITE)
    except MorphzError:
        return  # a typed refusal naming the range is acceptable
    except OverflowError as exc:
        pytest.fail(f"ctx.events(0, 2**63) raised an untyped OverflowError: {exc}")
    assert [e.seq for e in got] == [e.seq for e in expected]


def test_cli_events_with_a_huge_limit_does_not_print_a_traceback(
    env: Path,
) -> None:
    """``morphz context events --limit N`` accepts any N >= 1 (``click.IntRange(min=1)``). With
    N >= 2**63 the command dies with a Python traceback (OverflowError from the SQLite driver,
    ``store/sqlite_txn.py`` ``events``). Expected: the events are listed (exit 0), or a one-line
    error with a non-zero exit, never an uncaught exception."""
    db = str(env / "m.db")
    runner = CliRunner()
    assert runner.invoke(main, ["context", "create", "c", "--db", db]).exit_code == 0
    observed = runner.invoke(
        main, ["context", "observe", "c", "--kind", "user_message", "--text", "hi", "--db", db]
    )
    assert observed.exit_code == 0, observed.output
    result = runner.invoke(
        main, ["context", "events", "c", "--limit", str(BEYOND_SQLITE), "--db", db]
    )
    assert not isinstance(result.exception, OverflowError), (
        f"uncaught {type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code == 0, result.output


def _writer_statements(db: morphz.Database, action: object) -> int:
    """SQL statements ``action`` runs on the store's writer connection."""
    count = [0]

    def traced(_statement: str) -> None:
        count[0] += 1

    writer = db.store._writer  # type: ignore[attr-defined]
    writer.set_trace_callback(traced)
    try:
        action()  # type: ignore[operator]
    finally:
        writer.set_trace_callback(None)
    return count[0]


def test_a_place_after_retiring_many_frames_in_the_same_tx_does_not_query_once_per_frame(
    tmp_path: Path,
) -> None:
    """Consolidation retires many frames and places the summary in one tx. ``place`` now reads
    its neighbours through ``Overlay._neighbour`` (mind/state.py), which steps the base one
    frame per SQL statement past every frame the tx already changed: after retiring N frames,
    ``(place g first)`` runs N+4 statements (old code: 4, one SELECT of the frames), and K
    such places run K*N (N=4,000, K=100: 2.7 s against 0.87 s before 180a706). Expected: the
    statements a place adds do not grow with the frames the tx changed before it (e.g. read
    the base order from the key with one statement and skip changed frames while iterating)."""
    from histories import Clock, tx

    added = []
    db = morphz.open(tmp_path / "m.db", now=Clock())
    try:
        for n in (40, 400):
            counts = []
            for place in (False, True):
                ctx = db.create_context(f"c{n}-{place}", window=2)
                tx(ctx, " ".join(f"(create f{i} (x))" for i in range(n)) + " (create g (y))")
                ops = f"(retire {' '.join(f'f{i}' for i in range(n))})"
                ops += " (place g first)" if place else ""
                counts.append(_writer_statements(db, lambda c=ctx, t=ops: tx(c, t, "r")))
            added.append(counts[1] - counts[0])
    finally:
        db.close()
    assert added[1] <= added[0] + 10, f"statements one place adds at 40 and 400 retired: {added}"


def test_a_place_past_many_frames_changed_in_the_tx_finds_the_same_neighbours(
    ctx: morphz.Context,
) -> None:
    """The overlay steps the base past the frames the tx moved or deleted and finds the frames
    it changed by bisection (review 17c; it read the whole order once past 8 of them before):
    the place lands where the audit's in-memory replay (a sorted list) puts it, between the same
    neighbours, in both directions."""
    ids = [f"f{i:02d}" for i in range(30)]
    ctx.commit(f"(context-tx (base-version 0) {' '.join(f'(create {i} (n 1))' for i in ids)})")
    retire = " ".join(f"(retire {i})" for i in ids[2:25])  # 23 changed frames in a row
    # each neighbour step passes retired (changed) frames: f04..f24 after f03, f23..f02 before f24
    places = "(place f01 (after f03)) (place f28 (before f24)) (place f27 first)"
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "r") {retire} {places})')
    order = [f.id for f in ctx.mind().frames]
    assert order.index("f01") == order.index("f03") + 1, order
    assert order.index("f28") == order.index("f24") - 1, order
    assert order[0] == "f27", order
    assert ctx.audit().ok
