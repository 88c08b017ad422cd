"""Review 17c (scale pathologies the benchmarks do not cover): each test fails on the code it
was written against; its docstring says what is expected and what was measured.

No test measures wall-clock time. Growth is shown deterministically, at two sizes of the same
state: by the SQLite virtual-machine steps an operation takes (``set_progress_handler``), by the
Python allocations it makes (``tracemalloc``'s peak), or by the string comparisons it makes
(a ``str`` subclass that counts its ``__eq__`` calls).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import morphz
from histories import Clock, tx
from measures import vm_steps
from morphz.encoding.delta import DeltaEncoder
from morphz.observe import Observation

LOCAL = "2026-08-04T10:00:00+00:00"

# ------------------------------------------------------------------ measures


def peak_bytes(action: Callable[[], object]) -> int:
    """The peak of Python allocations while ``action`` runs (its result dropped after)."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def retired_history(ctx: morphz.Context, frames: int) -> None:
    """``frames`` frames created and retired, their windows over (the context's window is 1):
    the history a long-lived mind keeps (retired frames keep their rows and their place)."""
    for start in range(0, frames, 500):
        ids = [f"old{i}" for i in range(start, min(frames, start + 500))]
        tx(ctx, " ".join(f"(create {fid} (v))" for fid in ids))
        tx(ctx, f"(retire {' '.join(ids)})", "done with them")
        ctx.observe("user_message", "tick")
        ctx.observe("user_message", "tick")


# ------------------------------------------------------------------ a frame many relate to


def test_relating_to_a_well_connected_frame_does_not_reindex_all_its_relations(
    tmp_path: Path,
) -> None:
    """DESIGN §4: "a commit must cost O(what it changes)". A ``relate`` changes one edge, yet
    the recall upkeep (``recall.maintain.frames_to_reindex`` marks both ends of every changed
    edge; ``frame_docs`` then reads ``edges_of(object)``, store/sqlite_txn.py:144, and
    tokenizes ``documents.frame_text`` with every relation the object has) rewrites the whole
    document of the object: a frame that many frames relate to (a goal, a project, a hub that
    retired frames still point at) costs O(its degree) per commit, and building its relations
    one commit at a time is quadratic. Measured: one ``(relate y part-of hub)`` takes 0.7 ms
    when 100 frames relate to ``hub``, 41 ms at 10,000 and 173 ms at 50,000 (an ``unrelate``
    318 ms), all under the writer lock; relating 50,000 frames in 500-op commits took 14 s.
    Expected: one relate to a frame costs about the same SQL whether 50 or 500 frames
    already relate to it."""
    steps = []
    for degree in (50, 500):
        db = morphz.open(tmp_path / f"hub{degree}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            tx(ctx, "(create hub (goal ship the release))")
            tx(ctx, " ".join(f"(create x{i} (v)) (relate x{i} part-of hub)" for i in range(degree)))
            tx(ctx, "(create y (v))")
            steps.append(vm_steps(db, lambda ctx=ctx: tx(ctx, "(relate y part-of hub)")))
            assert ("y", "part-of", "hub") in ctx.mind().relations
        finally:
            db.close()
    assert steps[1] < 2 * steps[0], f"10x the relations to hub cost {steps[1] / steps[0]:.1f}x"


# ------------------------------------------------------------------ a search hit on a big text


def test_a_search_hit_on_a_large_observation_does_not_split_all_of_it(tmp_path: Path) -> None:
    """A search hit shows a preview of 240 characters (``recall.search.preview``), but it is
    computed as ``" ".join(text.split())`` over the *whole* text before it is cut
    (src/morphz/recall/search.py:319): a list of every word of the document. Measured: a
    search whose hit is a 50 MB tool result takes 2.5 s and peaks at 429 MB of Python memory
    (8.9x the text), a 5 MB one 43 MB; a page of 100 hits on 1 MB results would need ~900 MB.
    ``recall frame --events`` (traverse._details) previews the same way. Expected: the
    preview looks at a bounded prefix; the search peaks at well under 3x the text it reads."""
    db = morphz.open(tmp_path / "big.db", now=Clock())
    try:
        ctx = db.context("c", create=True)
        text = " ".join(f"w{i % 97} kesamo" if i == 7 else f"w{i % 97}" for i in range(500_000))
        ctx.observe("tool_result", text)
        assert [h.ref for h in ctx.recall.search("kesamo").hits] == ["@e1"]
        peak = peak_bytes(lambda: ctx.recall.search("kesamo"))
    finally:
        db.close()
    assert peak < 3 * len(text), f"peak {peak / len(text):.1f}x the {len(text):,}-char text"


# ------------------------------------------------------------------ ContextDelta, many checkpoints


class _Name(str):
    """A checkpoint name that counts how often it is compared for equality."""

    __slots__ = ()
    compared = 0

    def __eq__(self, other: object) -> bool:
        _Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _counted(encoding):  # type: ignore[no-untyped-def]
    names = tuple(_Name(str(name)) for name in encoding.state.checkpoints)  # fresh objects
    return dataclasses.replace(
        encoding, state=dataclasses.replace(encoding.state, checkpoints=names)
    )


def test_a_context_delta_step_is_not_quadratic_in_the_checkpoints(tmp_path: Path) -> None:
    """``encoding.delta._changes`` finds the new checkpoints with ``c not in
    sent.checkpoints`` and ``_removals`` the dropped ones with ``c not in now.checkpoints``
    (src/morphz/encoding/delta.py:244 and :261), where both are tuples: every step of an
    activation with ContextDelta compares every checkpoint name with every other, O(C^2).
    Measured (``DeltaEncoder.next`` after one new tool result): 8 ms with 1,000 checkpoints,
    0.79 s with 10,000 and 6.9 s with 30,000, while the compile of the same encoding takes
    3-8 ms. Expected: 10x the checkpoints cost about 10x the comparisons, not 100x (sets)."""
    compared = []
    for count in (100, 1000):
        db = morphz.open(tmp_path / f"cp{count}.db", now=Clock())
        try:
            ctx = db.context("c", create=True)
            tx(ctx, "(create plan (step one))")
            for start in range(0, count, 500):
                stop = min(count, start + 500)
                tx(ctx, " ".join(f"(checkpoint cp{i})" for i in range(start, stop)))
            ctx.observe("user_message", "go")
            delta = DeltaEncoder()
            delta.next(_counted(ctx.encode(local_time=LOCAL)))
            ctx.observe("tool_result", "done")
            second = _counted(ctx.encode(local_time=LOCAL))
            _Name.compared = 0
            delta.next(second)
            assert delta.last == "increment"
            compared.append(_Name.compared)
        finally:
            db.close()
    assert compared[1] < 20 * max(compared[0], 1), f"10x the checkpoints: {compared} compares"


# ------------------------------------------------------------------ place, over a long history


def test_reordering_frames_does_not_read_every_frame_the_context_ever_had(
    tmp_path: Path,
) -> None:
    """mind/order.py's docstring: "A place reads the two frames the moved one goes between
    ... never the mind's whole history". But when a transaction places a frame next to frames
    it placed already, ``Overlay._neighbour`` (src/morphz/mind/state.py:397) steps over at most
    ``MAX_STEPS`` = 8 changed frames and then calls ``_nearest(self.base.frames(), ...)``: a
    read of every frame row of the context, retired history included, for each such place.
    Measured: reordering 20 frames in one transaction (``(place f19 first) (place f18 (after
    f19)) ...``) runs 6,689 VM steps with 200 retired frames, 30,089 with 2,000 and 1,304,089
    (0.29 s under the writer lock) with 100,000; placing 1,000 frames in one transaction
    takes 2.9 s on a mind of 1,000 (quadratic). Expected: the same reorder costs about the
    same with 200 or 2,000 retired frames behind it."""
    steps = []
    for history in (200, 2000):
        db = morphz.open(tmp_path / f"order{history}.db", now=Clock())
        try:
            ctx = db.context("c", create=True, window=1)
            retired_history(ctx, history)
            tx(ctx, " ".join(f"(create f{i} (v {i}))" for i in range(20)))
            chain = " ".join(f"(place f{i} (after f{i - 1}))" for i in range(1, 20))
            tx(ctx, f"(place f0 first) {chain}")
            back = list(reversed(range(20)))
            # f0 ends up after f1 without a place of its own (one would move nothing: refused)
            chain = " ".join(f"(place f{back[j]} (after f{back[j - 1]}))" for j in range(1, 19))
            text = f"(place f{back[0]} first) {chain}"
            steps.append(vm_steps(db, lambda ctx=ctx, text=text: tx(ctx, text)))
            shown = [f.id for f in ctx.mind().frames if f.lifecycle == "active"]
            assert shown == [f"f{i}" for i in back]
        finally:
            db.close()
    assert steps[1] < 2 * steps[0], f"10x the retired frames cost {steps[1] / steps[0]:.1f}x"


# ------------------------------------------------------------------ the CLI on a long history

_PEAK_OF_CLI = """
import os, sys, tracemalloc
from morphz.interfaces import cli
sys.argv = ["morphz", *sys.argv[1:]]
sys.stdout = open(os.devnull, "w")
tracemalloc.start()
try:
    cli.main()
except SystemExit as exc:
    assert not exc.code, exc.code
sys.stderr.write(str(tracemalloc.get_traced_memory()[1]))
"""


def _cli_peak(*args: str) -> int:
    """The peak of Python allocations of one ``morphz`` command run in a process of its own
    (its output thrown away), from after the import of the CLI."""
    src = str(Path(morphz.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stderr.strip().splitlines()[-1])


def test_cli_events_output_does_not_hold_the_whole_history_in_memory(tmp_path: Path) -> None:
    """``morphz context events`` (cli.events_command, src/morphz/interfaces/cli.py:488) reads
    every event into a list (``ctx.events``), builds every ``to_dict`` into another list, and
    then the whole JSON document (or the whole text table) as one string before it prints a
    byte. Measured: on a context of 200,000 tool results (33 MB of text) ``--format json``
    peaks at 1.0 GB of RSS (5.9 s) and ``--format text`` at 713 MB, about 30x the history, so a
    history of a few million events cannot be listed on an ordinary machine (``ctx.events``
    itself already reads in batches of 1,000). Expected: the command streams, so its peak
    does not grow with the history: 10x the events peak at well under 3x the memory."""
    peaks = []
    for count in (1000, 10_000):
        path = tmp_path / f"ev{count}.db"
        db = morphz.open(path, now=Clock())
        try:
            ctx = db.context("c", create=True)
            filler = "lorem ipsum dolor sit amet " * 4
            ctx.observe_batch([Observation("tool_result", f"{i} {filler}") for i in range(count)])
        finally:
            db.close()
        peaks.append(_cli_peak("context", "events", "c", "--db", str(path), "--format", "json"))
    assert peaks[1] < 3 * peaks[0], f"10x the events peaked at {peaks[1] / peaks[0]:.1f}x"
