"""Review 11 (complexity at scale): each test fails on the code it was written against; its
docstring says what is expected.

No test measures wall-clock time. Growth is shown deterministically: by the SQLite
virtual-machine steps an operation takes (``set_progress_handler``: a measure of the rows it
reads that does not depend on the machine's speed), by the lines of Python it executes
(``sys.settrace``), or by the C calls it makes (``sys.setprofile``), at two sizes of the same
history. An operation whose cost should not depend on the history's size must take about the
same steps at both sizes; one that should be linear must not grow like a square."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import morphz
from histories import tx
from measures import vm_steps
from morphz.mind import apply_tx
from morphz.mind.memory import MindState
from morphz.observe import Observation
from morphz.txlang import read_tx
from morphz.txlang.validate import _twice

# ------------------------------------------------------------------ measures


def python_lines(action: Callable[[], object]) -> int:
    """Lines of Python ``action`` executes (loops included, unlike a count of calls)."""
    lines = [0]

    def trace(_frame: Any, event: str, _arg: Any) -> Any:
        if event == "line":
            lines[0] += 1
        return trace

    sys.settrace(trace)
    try:
        action()
    finally:
        sys.settrace(None)
    return lines[0]


# ------------------------------------------------------------------ sessions x activations


def _sessions_with_activations(ctx: morphz.Context, sessions: int, per_session: int) -> None:
    """``sessions`` sessions, each with ``per_session`` finished activations (every chat turn
    and exec run leaves one)."""
    for s in range(sessions):
        for _ in range(per_session):
            _, act = ctx.begin_activation(f"s{s}", "do the thing")
            ctx.finish_activation(act)


def test_session_listing_does_not_read_every_activation_once_per_session(
    tmp_path: Any,
) -> None:
    """``ctx.sessions()`` (and, through ``session_rows``, ``ctx.status()``, the audit, and
    ``morphz chat`` on every turn, whose ``_follow`` calls ``ctx.status()`` for the last seq)
    must cost about linearly in the sessions and activations. Today ``session_rows`` counts
    each session's running activations with a correlated subquery planned as ``SEARCH a USING
    PRIMARY KEY (context_id=?)``: every activation the context ever had is read once per
    session, O(sessions x activations). Measured: 2,000 sessions and 100,000 finished
    activations make ``ctx.sessions()`` take 25 s, ``morphz context status`` 27 s and an audit
    of a 50-event context 15 s. Here 4x the sessions (and activations) must cost well under
    the 16x of a square."""
    from histories import Clock

    steps = []
    for n in (15, 60):
        db = morphz.open(tmp_path / f"s{n}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            _sessions_with_activations(ctx, n, 2)
            assert len(ctx.sessions()) == n
            steps.append(vm_steps(db, ctx.sessions))
        finally:
            db.close()
    assert steps[1] < 6 * steps[0], f"4x the sessions cost {steps[1] / steps[0]:.1f}x: {steps}"


def test_status_does_not_grow_with_sessions_times_activations(tmp_path: Any) -> None:
    """``morphz context status`` (``ctx.status()``) reports how many sessions a context has;
    the store keeps those counts (``session_counts``, migration 0006, kept "exact on every path
    that writes a session" precisely so the directory need not read every session). Today
    status computes ``len(r.session_rows())``, which reads every session and, per session,
    every activation (see the test above): 4x the sessions and activations cost ~16x. Expected:
    at most linear growth (the session count from ``session_counts``)."""
    from histories import Clock

    steps = []
    for n in (15, 60):
        db = morphz.open(tmp_path / f"t{n}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            _sessions_with_activations(ctx, n, 2)
            status = ctx.status(local_time="2026-08-04T10:00:00+00:00")
            assert status.sessions == n
            steps.append(vm_steps(db, partial(ctx.status, local_time="2026-08-04T10:00:00+00:00")))
        finally:
            db.close()
    assert steps[1] < 6 * steps[0], f"4x the sessions cost {steps[1] / steps[0]:.1f}x: {steps}"


# ------------------------------------------------------------------ commits and finished work


def test_retiring_observations_does_not_read_every_finished_activation(tmp_path: Any) -> None:
    """A commit costs "O(what it changes)" (DESIGN §4). Retiring an observation checks that it
    is not the root of a *running* activation (``SqliteWrite.causally_protected``), and
    retiring a session that it has no running work (``session_busy``); both query
    ``activations ... AND state = 'running'`` but are planned as ``SEARCH activations USING
    PRIMARY KEY (context_id=?)``, so each retired observation reads every activation the
    context ever had (the tenth session fixed the same plan for the compile only). Measured:
    retiring 50 observations takes 0.31 s under the writer lock after 100,000 finished
    activations, against 1 ms for a create. Expected: the same steps after 20 or 200 finished
    activations."""
    from histories import Clock

    steps = []
    for n in (20, 200):
        db = morphz.open(tmp_path / f"r{n}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            _sessions_with_activations(ctx, 1, n)
            refs = [e.ref for e in ctx.observe_batch([Observation("tool_result", "x")] * 5)]
            ops = f"(retire {' '.join(refs)})"
            steps.append(vm_steps(db, partial(tx, ctx, ops, "done with them")))
        finally:
            db.close()
    assert steps[1] < 1.3 * steps[0], f"10x the finished activations cost {steps}"


def _retired_frames(ctx: morphz.Context, count: int) -> None:
    for start in range(0, count, 100):
        ids = [f"old/{i}" for i in range(start, min(count, start + 100))]
        tx(ctx, " ".join(f"(create {i} (fact))" for i in ids))
        tx(ctx, f"(retire {' '.join(ids)})", "gone")


def test_place_does_not_read_every_frame_the_context_ever_had(tmp_path: Any) -> None:
    """``(place ID first)`` moves one frame: its cost should depend on the frames around its
    new place, not on the mind's whole history (DESIGN §4: "a commit must cost O(what it
    changes), not O(size of the mind)"). Today ``mind.apply._place`` sorts
    ``a.view.frames()``, every frame row of the context, retired ones included (and they are
    never deleted), and a tx with k places does it k times. Expected: the same steps with 50
    or 500 retired frames in the history."""
    from histories import Clock

    steps = []
    for n in (50, 500):
        db = morphz.open(tmp_path / f"p{n}.db", now=Clock())
        try:
            ctx = db.create_context("c", window=0)
            _retired_frames(ctx, n)
            tx(ctx, "(create a (1)) (create b (2)) (create c (3))")
            steps.append(vm_steps(db, partial(tx, ctx, "(place c first)")))
        finally:
            db.close()
    assert steps[1] < 1.3 * steps[0], f"10x the retired frames cost {steps}"


def test_consolidating_frames_in_one_tx_is_not_cubic() -> None:
    """The pattern the protocol teaches for replacing frames: derive a summary from them,
    retire them, and relate the summary ``supersedes`` each (the fast path retires each at
    once). In one tx of N such relations, ``mind.apply._fast_path`` runs after every
    operation, and for every frame retired so far loops over every supersedes edge added so
    far: O(N^3) (N=300: 0.15 s, 600: 1.1 s, 1,000: ~5 s of CPU inside ``BEGIN IMMEDIATE``, and
    again in every audit replay). Expected: about linear in N (here: twice the frames, at most
    3x the Python lines; today ~4.7x, and growing with N)."""

    def consolidate(n: int) -> Callable[[], object]:
        mind = MindState()
        create = " ".join(f"(create old{i} (x))" for i in range(n))
        mind.apply(apply_tx(mind, read_tx(f"(context-tx (base-version 0) {create})")), commit=True)
        olds = " ".join(f"old{i}" for i in range(n))
        relates = " ".join(f"(relate summary supersedes old{i})" for i in range(n))
        text = (
            f'(context-tx (base-version 1) (reason "consolidate") (derive summary (from {olds})'
            f" (all)) (retire {olds}) {relates})"
        )
        parsed = read_tx(text)
        changes = apply_tx(mind, parsed)
        assert all(
            getattr(changes.frames[f"old{i}"], "lifecycle", None) == "retired" for i in range(n)
        )
        return lambda: apply_tx(mind, parsed)

    small, large = python_lines(consolidate(20)), python_lines(consolidate(40))
    assert large < 3 * small, f"2x the frames ran {large / small:.1f}x the lines"


# ------------------------------------------------------------------ listing and reading


def test_events_with_a_limit_reads_only_that_many_rows(
    ctx: morphz.Context, db: morphz.Database
) -> None:
    """``ctx.events(after, limit)`` ("at most ``limit`` of them"; ``morphz context events
    --limit N``) must read about ``limit`` rows. Today the limit is not given to the store:
    ``SqliteRead.events`` runs ``LIMIT -1`` and ``fetchmany(1000)`` materializes up to 1,000
    full rows (text, meta, payload) before ``Context.events`` stops after ``limit``: with 500
    tool results of 200 KB, ``ctx.events(0, 1)`` peaks at 100 MB of memory. Expected: the same
    steps for ``limit=1`` with 20 or 400 events in the log."""
    ctx.observe_batch([Observation("tool_result", f"r{i}") for i in range(20)])
    small = vm_steps(db, lambda: ctx.events(0, 1))
    ctx.observe_batch([Observation("tool_result", f"r{i}") for i in range(380)])
    large = vm_steps(db, lambda: ctx.events(0, 1))
    assert large < 1.3 * small, (
        f"20x the events cost {large / small:.1f}x for one: {small}, {large}"
    )


def test_show_does_not_read_every_retired_observation(
    ctx: morphz.Context, db: morphz.Database
) -> None:
    """``ctx.mind()`` (``morphz context show``, chat's ``/mind``) lists active, protected and
    retiring observations unless ``all_observations``. Today it reads every observation row
    the context ever had (``r.observations()``) and filters them in Python, though the store
    has the partial index ``observations_active``. Expected: with the same active inbox, the
    same steps after 20 or 400 retired observations."""

    def retire_batch(n: int) -> None:
        refs = [e.ref for e in ctx.observe_batch([Observation("tool_result", "x")] * n)]
        tx(ctx, f"(retire {' '.join(refs)})", "read")

    retire_batch(20)
    ctx.observe("user_message", "still here")
    small = vm_steps(db, ctx.mind)
    retire_batch(380)
    large = vm_steps(db, ctx.mind)
    assert [o.ref for o in ctx.mind().observations] == ["@e22"]
    assert large < 1.3 * small, f"20x the retired observations cost {large / small:.1f}x"


def test_show_does_not_load_every_checkpoint_snapshot(
    ctx: morphz.Context, db: morphz.Database, monkeypatch: Any
) -> None:
    """``ctx.mind()`` shows each checkpoint as (name, version), but builds them from
    ``r.snapshots()``, which reads every checkpoint's full copy of the mind (all its frames and
    edges): 10 checkpoints of a 100-frame mind read 1,000 frame rows more than the mind itself.
    Expected: the frame rows read are those of the mind (the checkpoints' names and versions
    come from the ``checkpoints`` table alone)."""
    from morphz.store import sqlite_rows, sqlite_txn

    tx(ctx, " ".join(f"(create f{i} (fact {i}))" for i in range(100)))
    for k in range(10):
        tx(ctx, f"(checkpoint cp{k})")
    built = [0]
    real = sqlite_rows.frame_from_row

    def counting(row: Any) -> Any:
        built[0] += 1
        return real(row)

    monkeypatch.setattr(sqlite_txn, "frame_from_row", counting)
    monkeypatch.setattr(sqlite_rows, "frame_from_row", counting)  # read_frames builds them there
    mind = ctx.mind()
    assert len(mind.checkpoints) == 10 and len(mind.frames) == 100
    assert built[0] == 100, f"{built[0]} frame rows read to show a mind of 100 frames"


def test_a_traversal_page_does_not_walk_the_whole_graph(tmp_path: Any) -> None:
    """``ctx.recall.frame`` serves "bounded nodes per page" (DESIGN §9). Today every page,
    however small its budget, first walks everything reachable to ``depth``
    (``recall.traverse._walk``: a frame read, a citing query and an edges query per node) and
    then slices its page out: a page of 5 nodes under a frame cited by 2,000 others runs 6,007
    statements, and walking all its pages of 50 is quadratic (1.4 s for 2,000, minutes for
    20,000). Expected: the first page of 5 descendants runs about as many SQL statements
    whether 40 or 400 frames cite the root (the walk stops expanding nodes once it has the
    page's nodes and knows there are more)."""
    from histories import Clock

    counts = []
    for n in (40, 400):
        db = morphz.open(tmp_path / f"g{n}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            tx(ctx, "(create hub (root))")
            for start in range(0, n, 200):
                stop = min(n, start + 200)
                tx(ctx, " ".join(f"(derive leaf{j} (from hub) (x))" for j in range(start, stop)))
            page = ctx.recall.frame("hub", direction="descendants", budget=5)
            assert len(page.nodes) == 5 and page.next_cursor is not None
            statements: list[str] = []
            conn = db.store._reader()  # type: ignore[attr-defined]
            conn.set_trace_callback(statements.append)
            try:
                ctx.recall.frame("hub", direction="descendants", budget=5)
            finally:
                conn.set_trace_callback(None)
            counts.append(len(statements))
        finally:
            db.close()
    assert counts[1] < 2 * counts[0], f"10x the descendants ran {counts} statements"


# ------------------------------------------------------------------ transaction text


def test_a_duplicate_target_is_found_without_a_scan_per_target() -> None:
    """``txlang.validate._twice`` names the first target listed twice with
    ``next(n for n in names if names.count(n) > 1)``: one full scan of the list per target
    before the duplicate, O(N^2) (a retire of 8,000 targets with a duplicate at the end takes
    0.7 s to refuse, 32,000 take 13 s) for what a set finds in one pass. Expected: the
    duplicate is found with a bounded number of scans of the list (here: at most 2 calls of
    ``count``, however long the list)."""
    names = (*(f"f{i}" for i in range(500)), "f499")
    op = read_tx('(context-tx (base-version 0) (reason "r") (retire f0))').ops[0]
    counts = [0]

    def profile(_frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") == "count":
            counts[0] += 1

    sys.setprofile(profile)
    try:
        found = _twice(op, names)
    finally:
        sys.setprofile(None)
    assert found is not None and "'f499'" in found[1]
    assert counts[0] <= 2, f"{counts[0]} scans of a 501-name list to find its duplicate"
