"""A rule-based state machine over one context in a temporary SQLite file.

Rules append observations (ticking or not), commit random transactions built from the current
mind (valid and invalid ones, fresh and stale base versions), reopen the database, run
"concurrent" commits (two transactions on the same base version, one after the other), change
the window and start and finish activations. After every step the store must equal a replay of
its own log (``ctx.audit().ok``); a refused transaction must raise a ``morphz.TxError`` and
leave the status and the mind exactly as they were.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import morphz
from histories import Clock
from morphz.errors import InputError

if TYPE_CHECKING:
    from morphz.results import FrameView, ObservationView

CONTEXT = "context-sm"
FRAME_IDS = ("a", "b", "c", "ns/d", "ns/e")
CHECKPOINTS = ("cp1", "cp2")
SESSIONS = ("default", "other", "ghost")
RELATIONS = ("supersedes", "depends-on")
BODIES = (
    "(fact (n 1))",
    '"free text"',
    '(fact (region cn-shanghai)) (note "x")',
    "(wrap (retire a))",  # an operation nested inside a body: refused
)
OP_KINDS = (
    "create",
    "derive",
    "revise",
    "retire",
    "restore",
    "protect",
    "unprotect",
    "relate",
    "unrelate",
    "place",
    "checkpoint",
    "rollback",
    "drop-checkpoint",
    "retire-session",
    "restore-session",
)
# Operations that build up the mind come up more often.
WEIGHTED_OPS = (
    *("create", "derive", "revise", "retire", "retire", "restore", "relate", "rollback"),
    *OP_KINDS,
)
TICKING = ("user_message", "tool_result", "external_event")
OBS_KINDS = (*TICKING, "recall_result", "approval_result")


class Outcome:
    """What committing a tx did: a receipt, or the code of the refusal."""

    def __init__(self, receipt: morphz.Receipt | None, code: str | None) -> None:
        self.receipt = receipt
        self.code = code

    def __repr__(self) -> str:
        return f"Outcome(rebased={self.receipt.rebased})" if self.receipt else self.code or "?"


def _chance(data: st.DataObject, n: int, label: str) -> bool:
    """True with a probability of about (n-1)/n (the value that means False is not one that
    Hypothesis favours, such as a bound)."""
    return data.draw(st.integers(0, n - 1), label=label) != n // 2


def _frame_ids(data: st.DataObject, mind: morphz.Mind) -> st.SearchStrategy[str]:
    existing = [f.id for f in mind.frames]
    if existing and data.draw(st.booleans(), label="existing frame"):
        return st.sampled_from(existing)
    return st.sampled_from(FRAME_IDS)


def _refs(mind: morphz.Mind, status: morphz.Status) -> list[str]:
    """Refs of observations, of non-observation events and of an event that does not exist."""
    refs = [o.ref for o in mind.observations]
    others = sorted(set(range(1, status.last_seq + 1)) - {int(r[2:]) for r in refs})
    refs += [f"@e{seq}" for seq in others[-2:]]
    refs.append(f"@e{status.last_seq + 1}")
    return refs


def _target(data: st.DataObject, mind: morphz.Mind, status: morphz.Status) -> str:
    if data.draw(st.integers(0, 3), label="ref or frame") == 0:
        return data.draw(st.sampled_from(_refs(mind, status)), label="ref")
    return data.draw(_frame_ids(data, mind), label="frame")


def _pick(data: st.DataObject, items: list[str], label: str) -> str | None:
    return data.draw(st.sampled_from(items), label=label) if items else None


def _likely_valid_op(data: st.DataObject, kind: str, mind: morphz.Mind, session: str) -> str | None:
    """An operation of ``kind`` that is probably valid on ``mind``, or None if there is none."""
    frames = {f.id: f for f in mind.frames}
    obs = list(mind.observations)
    unused = [i for i in FRAME_IDS if i not in frames]
    body = data.draw(st.sampled_from(BODIES[:3]), label="body")

    def frames_where(test: Callable[[FrameView], bool]) -> list[str]:
        return [f.id for f in mind.frames if test(f)]

    def obs_where(test: Callable[[ObservationView], bool]) -> list[str]:
        return [o.ref for o in obs if test(o)]

    def target(frame_ids: list[str], refs: list[str]) -> str | None:
        """Frames first (there are fewer of them than observations)."""
        if frame_ids and (not refs or _chance(data, 4, "frame target")):
            return _pick(data, frame_ids, "frame target")
        return _pick(data, refs, "ref target")

    if kind == "create":
        fid = _pick(data, unused, "new id")
        return None if fid is None else f"(create {fid} {body})"
    if kind == "derive":
        fid = _pick(data, unused, "new id")
        src = _pick(data, list(frames) + [o.ref for o in obs], "source")
        return None if fid is None or src is None else f"(derive {fid} (from {src}) {body})"
    if kind == "revise":
        fid = _pick(data, list(frames), "frame")
        return None if fid is None else f"(revise {fid} {body})"
    found: str | None
    if kind == "retire":
        found = target(
            frames_where(lambda f: f.lifecycle != "retired" and not f.protected),
            obs_where(lambda o: o.lifecycle == "active" and not o.protected),
        )
    elif kind == "restore":
        found = target(
            frames_where(lambda f: f.lifecycle != "active"),
            obs_where(lambda o: o.lifecycle == "retired"),
        )
    elif kind == "protect":
        found = target(
            frames_where(lambda f: f.lifecycle != "retired" and not f.protected),
            obs_where(lambda o: o.lifecycle == "active" and not o.protected),
        )
    elif kind == "unprotect":
        found = target(frames_where(lambda f: f.protected), obs_where(lambda o: o.protected))
    elif kind == "relate":
        pairs = [
            (s, r, o)
            for s in frames
            for o in frames
            for r in RELATIONS
            if s != o and (s, r, o) not in mind.relations
        ]
        if not pairs:
            return None
        s, r, o = data.draw(st.sampled_from(pairs), label="new edge")
        return f"(relate {s} {r} {o})"
    elif kind == "unrelate":
        if not mind.relations:
            return None
        s, r, o = data.draw(st.sampled_from(mind.relations), label="edge")
        return f"(unrelate {s} {r} {o})"
    elif kind == "place":
        fid = _pick(data, list(frames), "frame")
        if fid is None:
            return None
        anchor = _pick(data, [f for f in frames if f != fid], "anchor")
        where = data.draw(st.sampled_from(["first", "last", "before", "after"]), label="where")
        if where in ("before", "after"):
            if anchor is None:
                return None
            where = f"({where} {anchor})"
        return f"(place {fid} {where})"
    elif kind == "checkpoint":
        names = {c for c, _ in mind.checkpoints}
        found = _pick(data, [c for c in CHECKPOINTS if c not in names], "checkpoint")
    elif kind in ("rollback", "drop-checkpoint"):
        found = _pick(data, [c for c, _ in mind.checkpoints], "checkpoint")
    elif kind == "retire-session":
        found = _pick(
            data, [s for s, a in mind.sessions if a == "active" and s != session], "session"
        )
    else:
        found = _pick(data, [s for s, a in mind.sessions if a == "retired"], "session")
    return None if found is None else f"({kind} {found})"


def _op(data: st.DataObject, mind: morphz.Mind, status: morphz.Status, session: str) -> str:
    kind = data.draw(st.sampled_from(WEIGHTED_OPS), label="op")
    if _chance(data, 8, "likely valid"):
        for attempt in (kind, "create", "revise", "checkpoint"):
            op = _likely_valid_op(data, attempt, mind, session)
            if op is not None:
                return op

    def fid() -> str:
        return data.draw(_frame_ids(data, mind), label="id")

    def targets() -> str:
        n = data.draw(st.integers(1, 2), label="targets")
        return " ".join(_target(data, mind, status) for _ in range(n))

    def body() -> str:
        return data.draw(st.sampled_from(BODIES), label="body")

    def checkpoint() -> str:
        names = [c for c, _ in mind.checkpoints]
        pool = names + list(CHECKPOINTS) if names else list(CHECKPOINTS)
        return data.draw(st.sampled_from(pool), label="checkpoint")

    if kind == "create":
        return f"(create {fid()} {body()})"
    if kind == "derive":
        return f"(derive {fid()} (from {targets()}) {body()})"
    if kind == "revise":
        sources = f" (from {targets()})" if data.draw(st.booleans(), label="from") else ""
        return f"(revise {fid()}{sources} {body()})"
    if kind in ("retire", "restore", "protect", "unprotect"):
        return f"({kind} {targets()})"
    if kind in ("relate", "unrelate"):
        s, o = fid(), fid()
        r = data.draw(st.sampled_from(RELATIONS), label="relation")
        return f"({kind} {s} {r} {o})"
    if kind == "place":
        where = data.draw(st.sampled_from(["first", "last", "before", "after"]), label="where")
        if where in ("before", "after"):
            where = f"({where} {fid()})"
        return f"(place {fid()} {where})"
    if kind in ("checkpoint", "rollback"):
        return f"({kind} {checkpoint()})"
    if kind == "drop-checkpoint":
        return f"(drop-checkpoint {checkpoint()})"
    sid = data.draw(st.sampled_from(SESSIONS), label="session")
    return f"({kind} {sid})"


def _tx(
    data: st.DataObject, ctx: morphz.Context, session: str, base: int | None = None
) -> tuple[str, int]:
    """A random tx built from the current mind, and its base version."""
    mind, status = ctx.mind(all_observations=True), ctx.status()
    version = status.version
    if base is None:
        offsets = [0, 0, 0, 1, 0, 0, 2, 0, 0, -1, 0]
        base = max(0, version - data.draw(st.sampled_from(offsets), label="staleness"))
    n = data.draw(st.sampled_from([1, 1, 1, 2, 2, 3]), label="ops")
    ops = " ".join(_op(data, mind, status, session) for _ in range(n))
    reason = ' (reason "because")' if _chance(data, 10, "reason") else ""
    return f"(context-tx (base-version {base}){reason} {ops})", base


def _commit(ctx: morphz.Context, text: str, session: str) -> Outcome:
    try:
        return Outcome(ctx.commit(text, session=session), None)
    except morphz.TxError as exc:
        return Outcome(None, exc.code)


class ContextMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="morphz-sm-"))
        self.path = self.dir / "sm.db"
        self.clock = Clock()
        self.db = morphz.open(self.path, now=self.clock)
        self.activations: list[str] = []

    @property
    def ctx(self) -> morphz.Context:
        return self.db.context(CONTEXT)

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ rules

    @initialize(window=st.sampled_from([2, 1, 0, 3]))
    def create_context(self, window: int) -> None:
        self.db.context(CONTEXT, create=True, window=window)

    def _observe(self, items: list[morphz.Observation], session: str) -> None:
        """Append a batch and check the clock, the finalization of due retirements and the
        countdown of the other retiring frames."""
        ctx = self.ctx
        before, mind = ctx.status(), ctx.mind()
        events = ctx.observe_batch(items, session=session)
        after = ctx.status()
        ticks = any(item.kind in TICKING for item in items)
        due = [
            f.id
            for f in mind.frames
            if ticks and f.lifecycle == "retiring" and (f.remaining_ticks or 0) <= 1
        ]
        assert [e.seq for e in events] == [before.last_seq + 1 + i for i in range(len(items))]
        assert after.clock == before.clock + ticks
        assert after.version == before.version + bool(due)
        assert after.last_seq == before.last_seq + len(items) + bool(due)
        now = ctx.mind()
        for item, event in zip(items, events, strict=True):
            view = now.observation(event.ref)
            assert view is not None and view.lifecycle == "active" and view.kind == item.kind
            stored = ctx.event(event.ref)
            assert (stored.kind, stored.text, stored.session_id) == (item.kind, item.text, session)
        for fid in due:
            frame = now.frame(fid)
            assert frame is not None and frame.lifecycle == "retired", fid
        for old in mind.frames:
            if old.lifecycle == "retiring" and old.id not in due:
                new = now.frame(old.id)
                assert new is not None and new.lifecycle == "retiring"
                assert old.remaining_ticks is not None
                assert new.remaining_ticks == old.remaining_ticks - ticks

    @rule(
        kind=st.sampled_from(OBS_KINDS),
        text=st.text(max_size=20),
        session=st.sampled_from(["default", "other"]),
    )
    def observe(self, kind: str, text: str, session: str) -> None:
        self._observe([morphz.Observation(kind, text)], session)

    @rule(kind=st.sampled_from(TICKING))
    def tick(self, kind: str) -> None:
        """A ticking observation (more of them, so organizing windows run out)."""
        self._observe([morphz.Observation(kind, f"{kind} text")], "default")

    @rule(kinds=st.lists(st.sampled_from(OBS_KINDS), min_size=1, max_size=3))
    def observe_batch(self, kinds: list[str]) -> None:
        """A batch ticks the clock once if any of its observations ticks it."""
        self._observe([morphz.Observation(k, f"batch {k}") for k in kinds], "default")

    @rule(data=st.data(), session=st.sampled_from(["default", "default", "other"]))
    def commit(self, data: st.DataObject, session: str) -> None:
        before, mind = self.ctx.status(), self.ctx.mind(all_observations=True)
        if not _chance(data, 16, "not garbage"):
            text, base = data.draw(st.text(max_size=40), label="garbage text"), None
        else:
            text, base = _tx(data, self.ctx, session)
        outcome = _commit(self.ctx, text, session)
        note_event(f"commit: {outcome!r}")
        after = self.ctx.status()
        if outcome.receipt is None:
            assert after == before
            assert self.ctx.mind(all_observations=True) == mind
            return
        assert base is not None and base <= before.version  # a future base is refused
        receipt = outcome.receipt
        assert receipt.base_version == base
        assert receipt.before_version == before.version
        assert receipt.after_version == after.version == before.version + 1
        assert receipt.rebased == (base < before.version)
        assert after.last_seq == before.last_seq + 1 == receipt.seq
        assert after.clock == before.clock
        event = self.ctx.event(receipt.event)
        assert event.kind == "context_tx_committed"
        assert event.payload is not None and event.payload["tx_id"] == receipt.tx_id

    @rule()
    def reopen(self) -> None:
        status, mind = self.ctx.status(), self.ctx.mind(all_observations=True)
        self.db.close()
        self.db = morphz.open(self.path, now=self.clock)
        assert self.ctx.status() == status
        assert self.ctx.mind(all_observations=True) == mind

    @rule(data=st.data(), session=st.sampled_from(["default", "other"]))
    def concurrent(self, data: st.DataObject, session: str) -> None:
        """Two writers read the same version; the first commits, then the second."""
        version = self.ctx.version
        first, _ = _tx(data, self.ctx, "default", base=version)
        second, _ = _tx(data, self.ctx, session, base=version)
        alone = self._outcome_alone(second, session)
        one = _commit(self.ctx, first, "default")
        before = self.ctx.status()
        two = _commit(self.ctx, second, session)
        note_event(f"concurrent: first {one!r}, second {two!r}, alone {alone!r}")
        if one.receipt is None:
            # Nothing changed in between: the second behaves exactly as it would alone.
            assert repr(two) == repr(alone), (two, alone)
            return
        if two.receipt is not None:
            assert two.receipt.rebased
            assert two.receipt.before_version == version + 1
            return
        assert self.ctx.status() == before
        if alone.receipt is not None:
            # Valid on its base: after the first writer it is rebased, or refused because a
            # boundary it reads or writes changed (or it needs the exact version).
            assert two.code in ("conflict", "stale-version"), (first, second, two.code)

    @rule(window=st.integers(0, 4))
    def set_window(self, window: int) -> None:
        before = self.ctx.status()
        self.ctx.set_window(window)
        after = self.ctx.status()
        assert after.window == window
        assert (after.version, after.clock) == (before.version, before.clock)

    @rule(data=st.data())
    def start_activation(self, data: st.DataObject) -> None:
        observations = self.ctx.mind(all_observations=True).observations
        retired = {o.ref for o in observations if o.lifecycle != "active"}
        root = data.draw(st.sampled_from([None, *(o.ref for o in observations)]), label="root")
        if root in retired:  # the model could not see the request it would run on
            before = self.ctx.status()
            with pytest.raises(InputError, match="is retired: restore it first"):
                self.ctx.start_activation("other", root)
            assert self.ctx.status() == before  # refused: nothing recorded
            return
        self.activations.append(self.ctx.start_activation("other", root))

    @precondition(lambda self: bool(self.activations))
    @rule(data=st.data())
    def finish_activation(self, data: st.DataObject) -> None:
        activation = data.draw(st.sampled_from(self.activations), label="activation")
        self.activations.remove(activation)
        self.ctx.finish_activation(activation)

    # ------------------------------------------------------------ helpers and invariant

    def _outcome_alone(self, text: str, session: str) -> Outcome:
        """Commit ``text`` to a copy of the store as it is now, to see if it is valid alone."""
        copy = self.dir / "copy.db"
        with (
            contextlib.closing(sqlite3.connect(self.path)) as src,
            contextlib.closing(sqlite3.connect(copy)) as dst,
        ):
            src.backup(dst)
        try:
            with morphz.open(copy, now=Clock()) as db:
                return _commit(db.context(CONTEXT), text, session)
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)

    @precondition(lambda self: CONTEXT in self.db.contexts())
    @invariant()
    def store_equals_replay_of_its_log(self) -> None:
        report = self.ctx.audit()
        assert report.ok, report.differences

    @precondition(lambda self: CONTEXT in self.db.contexts())
    @invariant()
    def mind_is_consistent(self) -> None:
        """Structural facts every operation keeps: references resolve, protected content is
        active, only retiring frames count ticks, and the status agrees with the mind."""
        mind, status = self.ctx.mind(all_observations=True), self.ctx.status()
        frames = {f.id: f for f in mind.frames}
        refs = {o.ref: o for o in mind.observations}
        assert len(frames) == len(mind.frames)
        for f in mind.frames:
            assert (f.lifecycle == "retiring") == (f.remaining_ticks is not None), f
            assert not f.protected or f.lifecycle == "active", f
            for src in f.sources:
                assert src in (refs if src.startswith("@") else frames), (f.id, src)
        for subject, _, obj in mind.relations:
            assert subject in frames and obj in frames
        for o in mind.observations:
            assert not o.protected or o.lifecycle == "active", o
        frame_states = Counter(f.lifecycle for f in mind.frames)
        for state in ("active", "retiring", "retired"):
            assert status.frames[state] == frame_states[state], (state, status)
        obs_states = Counter(o.lifecycle for o in mind.observations)
        for state in ("active", "retired"):
            assert status.observations[state] == obs_states[state], (state, status)
        assert status.checkpoints == len(mind.checkpoints)
        assert (status.version, status.clock) == (mind.version, mind.clock)


ContextMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestContextMachine = ContextMachine.TestCase
