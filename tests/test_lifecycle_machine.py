"""The mind's lifecycle against its replay (written by the twelfth session's lifecycle review): a
rule-based state machine over a real SQLite store that checks, after
every step, that the replay of the log gives the live mind and encoding, that a refused tx
changes nothing, that retiring frames leave the view when their ticks say, that retired content
stays recallable, that a rollback restores its checkpoint, and that reopening changes nothing.

The suite runs a few examples (``MACHINE_EXAMPLES``); the review ran 150 examples of 50 steps
several times without a finding. For a longer search, raise them here and run this file alone.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import morphz
from histories import Clock
from morphz.audit import _Report, replay_event
from morphz.encoding.compile import compile_encoding
from morphz.encoding.options import EncodeOptions
from morphz.mind import MindState
from morphz.recall.documents import TEXT_KINDS
from morphz.results import AuditReport
from morphz.store.active_base import ActiveObservation

CONTEXT = "context-lc"
IDS = ("a", "b", "c", "ns/d")
WORDS = ("walrus", "pelican", "octopus", "giraffe", "narwhal", "penguin", "lobster", "buffalo")
OPTS = EncodeOptions(local_time="2026-08-04T12:00:00+00:00")


def replay(ctx: morphz.Context) -> MindState:
    out = _Report(AuditReport(ctx.id))
    with ctx.db.store.read(ctx.id) as r:
        state = MindState(window=r.row.initial_window)
        for event in r.events():
            replay_event(state, event, out)
    assert not out.report.differences, out.report.differences
    return state


class _ReplayActive:
    """The encoding's active-state reads answered from a replayed MindState."""

    def __init__(self, base: Any, state: MindState, r: Any) -> None:
        self.base, self.state, self.r = base, state, r

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def observations(self) -> list[ActiveObservation]:
        out = []
        for seq in sorted(self.state.obs):
            o = self.state.obs[seq]
            if o.lifecycle != "active":
                continue
            e = self.r.event(seq)
            out.append(
                ActiveObservation(
                    seq, e.kind, e.session_id, e.time, e.text or "", o.protected, e.clock
                )
            )
        return out

    def frames(self) -> list[Any]:
        shown = [f for f in self.state.frames_by_id.values() if f.lifecycle != "retired"]
        return sorted(shown, key=lambda f: (f.pos, f.id))

    def relations(self) -> list[Any]:
        frames = self.state.frames_by_id
        return sorted(
            e for e in self.state.edge_set if e[0] in frames and frames[e[0]].lifecycle != "retired"
        )

    def checkpoint_names(self) -> list[str]:
        return sorted(self.state.snapshots)

    def cited_by(self, refs: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.state.frames_by_id.values():
            for src in f.sources:
                if src in refs:
                    out[src] = out.get(src, 0) + 1
        return out


class _ReplayRead:
    def __init__(self, r: Any, state: MindState) -> None:
        self.r, self.state = r, state
        self.active = _ReplayActive(r.active, state, r)
        self.row = dataclasses.replace(
            r.row, version=state.version, clock=state.clock, window=state.window
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.r, name)


def replayed_encoding(ctx: morphz.Context) -> str:
    state = replay(ctx)
    with ctx.db.store.read(ctx.id) as r:
        return compile_encoding(_ReplayRead(r, state), OPTS).text  # type: ignore[arg-type]


def frame_tokens(ctx: morphz.Context) -> int:
    with ctx.db.store.read(ctx.id) as r:
        return r.active.frame_tokens()


def snapshot(ctx: morphz.Context) -> dict[str, Any]:
    """Everything a refused transaction must leave as it was."""
    return {
        "status": ctx.status(),
        "mind": ctx.mind(all_observations=True),
        "events": len(ctx.events()),
        "index": ctx.recall_index.inspect().to_dict(),
        "budget": ctx.budget(),
        "encoding": ctx.encode(OPTS).text,
    }


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="morphz-lc-"))
        self.path = self.dir / "lc.db"
        self.clock = Clock()
        self.db = morphz.open(self.path, now=self.clock)
        self.counter = 0
        self.words: dict[str, set[str]] = {}  # frame id -> words its bodies carried
        self.obs_words: dict[str, str] = {}  # @eN -> its word
        self.checkpoints: dict[str, tuple[int, morphz.Mind]] = {}  # name -> (clock, mind)
        self.activations: list[str] = []

    @property
    def ctx(self) -> morphz.Context:
        return self.db.context(CONTEXT)

    def teardown(self) -> None:
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def word(self) -> str:
        self.counter += 1
        return f"{WORDS[self.counter % len(WORDS)]}{'x' * (self.counter // len(WORDS))}"

    def _commit(
        self,
        ops: str,
        reason: str | None = "why",
        base: int | None = None,
        session: str = "default",
    ) -> morphz.Receipt | None:
        ctx = self.ctx
        before = snapshot(ctx)
        version = before["status"].version if base is None else base
        why = f' (reason "{reason}")' if reason else ""
        text = f"(context-tx (base-version {version}){why} {ops})"
        kept = frame_tokens(ctx)
        try:
            receipt = ctx.commit(text, session=session)
            freed = sum(e.immediate for e in receipt.effects if not e.target.startswith("@"))
            assert kept - frame_tokens(ctx) == freed, (
                text,
                receipt.effects,
                kept,
                frame_tokens(ctx),
            )
            return receipt
        except morphz.TxError:
            after = snapshot(ctx)
            for key in before:
                assert after[key] == before[key], (key, text)
            return None

    @initialize(window=st.sampled_from([1, 2, 3, 0]))
    def create(self, window: int) -> None:
        self.db.context(CONTEXT, create=True, window=window)

    # ------------------------------------------------------------ observations and clock

    @rule(
        kind=st.sampled_from(
            ["user_message", "tool_result", "external_event", "recall_result", "approval_result"]
        ),
        session=st.sampled_from(["default", "other"]),
    )
    def observe(self, kind: str, session: str) -> None:
        ctx = self.ctx
        mind_before = ctx.mind()
        word = self.word()
        event = ctx.observe(kind, f"seen {word}", session=session)
        if kind in TEXT_KINDS:
            self.obs_words[event.ref] = word
        ticks = kind in ("user_message", "tool_result", "external_event")
        self._check_countdown(mind_before, ctx.mind(), ticks)

    def _check_countdown(self, before: morphz.Mind, after: morphz.Mind, ticks: bool) -> None:
        for f in before.frames:
            if f.lifecycle != "retiring":
                continue
            now = after.frame(f.id)
            assert now is not None
            assert f.remaining_ticks is not None
            if ticks and f.remaining_ticks <= 1:
                assert now.lifecycle == "retired", (f, now)
            else:
                assert now.lifecycle == "retiring", (f, now)
                assert now.remaining_ticks == f.remaining_ticks - ticks

    # ------------------------------------------------------------ transactions

    @rule(fid=st.sampled_from(IDS), src=st.sampled_from([None, "frame", "obs"]))
    def derive(self, fid: str, src: str | None) -> None:
        word = self.word()
        mind = self.ctx.mind()
        sources = ""
        if src == "frame" and mind.frames:
            sources = f" (from {mind.frames[0].id})"
        elif src == "obs" and mind.observations:
            sources = f" (from {mind.observations[-1].ref})"
        if sources:
            op = f"(derive {fid}{sources} (fact {word}))"
        else:
            op = f"(create {fid} (fact {word}))"
        if self._commit(op) is not None:
            self.words.setdefault(fid, set()).add(word)

    @rule(fid=st.sampled_from(IDS))
    def revise(self, fid: str) -> None:
        word = self.word()
        if self._commit(f"(revise {fid} (fact {word}))") is not None:
            self.words.setdefault(fid, set()).add(word)

    @rule(
        fid=st.sampled_from(IDS),
        what=st.sampled_from(["retire", "restore", "protect", "unprotect"]),
    )
    def life(self, fid: str, what: str) -> None:
        self._commit(f"({what} {fid})")

    @rule(data=st.data(), what=st.sampled_from(["retire", "restore", "protect", "unprotect"]))
    def obs_life(self, data: st.DataObject, what: str) -> None:
        refs = [o.ref for o in self.ctx.mind(all_observations=True).observations]
        if refs:
            self._commit(f"({what} {data.draw(st.sampled_from(refs))})")

    @rule(new=st.sampled_from(IDS), old=st.sampled_from(IDS))
    def supersede(self, new: str, old: str) -> None:
        word = self.word()
        ops = (
            f"(derive {new} (from {old}) (fact {word})) (relate {new} supersedes {old}) "
            f"(retire {old})"
        )
        if self._commit(ops) is not None:
            self.words.setdefault(new, set()).add(word)
            assert self.ctx.mind().frame(old).lifecycle == "retired"  # type: ignore[union-attr]

    @rule(
        s=st.sampled_from(IDS),
        o=st.sampled_from(IDS),
        rel=st.sampled_from(["supersedes", "uses"]),
        add=st.booleans(),
    )
    def relate(self, s: str, o: str, rel: str, add: bool) -> None:
        self._commit(f"({'relate' if add else 'unrelate'} {s} {rel} {o})")

    @rule(
        fid=st.sampled_from(IDS),
        where=st.sampled_from(["first", "last", "(before a)", "(after c)"]),
    )
    def place(self, fid: str, where: str) -> None:
        self._commit(f"(place {fid} {where})")

    @rule(name=st.sampled_from(["cp1", "cp2"]))
    def checkpoint(self, name: str) -> None:
        if self._commit(f"(checkpoint {name})") is not None:
            mind = self.ctx.mind()
            self.checkpoints[name] = (mind.clock, mind)

    @rule(name=st.sampled_from(["cp1", "cp2"]))
    def drop(self, name: str) -> None:
        if self._commit(f"(drop-checkpoint {name})") is not None:
            self.checkpoints.pop(name, None)

    @rule(name=st.sampled_from(["cp1", "cp2"]))
    def rollback(self, name: str) -> None:
        if self._commit(f"(rollback {name})") is None or name not in self.checkpoints:
            return
        clock, then = self.checkpoints[name]
        now = self.ctx.mind()
        assert now.order == then.order
        assert now.relations == then.relations
        for f in then.frames:
            g = now.frame(f.id)
            assert g is not None
            assert (g.body, g.revision, g.sources, g.protected) == (
                f.body,
                f.revision,
                f.sources,
                f.protected,
            )
            if f.lifecycle == "retiring":
                assert f.remaining_ticks is not None
                left = f.remaining_ticks - (now.clock - clock)
                if left <= 0:
                    assert g.lifecycle == "retired", (f, g)
                else:
                    assert (g.lifecycle, g.remaining_ticks) == ("retiring", left), (f, g)
            else:
                assert g.lifecycle == f.lifecycle, (f, g)

    @rule(session=st.sampled_from(["other", "ghost"]), retire=st.booleans())
    def session_attention(self, session: str, retire: bool) -> None:
        self._commit(f"({'retire-session' if retire else 'restore-session'} {session})")

    @rule(data=st.data())
    def stale_or_garbage(self, data: st.DataObject) -> None:
        version = self.ctx.version
        text = data.draw(
            st.sampled_from(
                [
                    f"(context-tx (base-version {version + 1}) (create zz (x)))",
                    "(context-tx (base-version 0",
                    f"(context-tx (base-version {version}) (create a (wrap (retire b))))",
                    f"(context-tx (base-version {version}) (create q1 (x)) (retire missing))",
                ]
            )
        )
        before = snapshot(self.ctx)
        try:
            self.ctx.commit(text)
        except morphz.MorphzError:
            after = snapshot(self.ctx)
            for key in before:
                assert after[key] == before[key], key

    @rule(data=st.data(), session=st.sampled_from(["default", "other"]))
    def random_tx(self, data: st.DataObject, session: str) -> None:
        from test_state_machine import _tx

        text, _ = _tx(data, self.ctx, session)
        self.checkpoints.clear()  # a random tx may take or drop checkpoints
        ctx = self.ctx
        before, kept = snapshot(ctx), frame_tokens(ctx)
        try:
            receipt = ctx.commit(text, session=session)
        except morphz.TxError:
            after = snapshot(ctx)
            for key in before:
                assert after[key] == before[key], (key, text)
            return
        freed = sum(e.immediate for e in receipt.effects if not e.target.startswith("@"))
        assert kept - frame_tokens(ctx) == freed, (text, receipt.effects, kept, frame_tokens(ctx))

    @rule(
        kinds=st.lists(
            st.sampled_from(["user_message", "recall_result", "tool_result"]),
            min_size=1,
            max_size=3,
        ),
        tick=st.booleans(),
        imp=st.booleans(),
    )
    def batch(self, kinds: list[str], tick: bool, imp: bool) -> None:
        ctx = self.ctx
        before = ctx.mind()
        items = [morphz.Observation(k, f"batch {self.word()}") for k in kinds]
        if imp:
            import io
            import json

            lines = "".join(json.dumps({"kind": i.kind, "text": i.text}) + "\n" for i in items)
            ctx.import_history(io.StringIO(lines))
            tick = True
        else:
            ctx.observe_batch(items, tick=tick)
        ticks = tick and any(k != "recall_result" for k in kinds)
        self._check_countdown(before, ctx.mind(), ticks)

    @rule()
    def begin(self) -> None:
        _, act = self.ctx.begin_activation("other", f"please {self.word()}")
        self.activations.append(act)

    @rule(window=st.integers(0, 3))
    def set_window(self, window: int) -> None:
        self.ctx.set_window(window)

    @rule()
    def start_activation(self) -> None:
        refs = [o.ref for o in self.ctx.mind().observations]
        root = refs[-1] if refs else None
        self.activations.append(self.ctx.start_activation("other", root))

    @precondition(lambda self: bool(self.activations))
    @rule()
    def finish_activation(self) -> None:
        self.ctx.finish_activation(self.activations.pop())

    @rule()
    def reopen(self) -> None:
        mind, enc = self.ctx.mind(all_observations=True), self.ctx.encode(OPTS).text
        self.db.close()
        self.db = morphz.open(self.path, now=self.clock)
        assert self.ctx.mind(all_observations=True) == mind
        assert self.ctx.encode(OPTS).text == enc

    # ------------------------------------------------------------ invariants

    @precondition(lambda self: CONTEXT in self.db.contexts())
    @invariant()
    def audit_and_replay(self) -> None:
        report = self.ctx.audit()
        assert report.ok, report.differences
        assert replayed_encoding(self.ctx) == self.ctx.encode(OPTS).text

    @precondition(lambda self: CONTEXT in self.db.contexts())
    @invariant()
    def view_matches_lifecycle(self) -> None:
        mind = self.ctx.mind()
        text = self.ctx.encode(OPTS).text
        mind_region = text[text.index("(mind") : text.index("(session-directory")]
        for f in mind.frames:
            shown = f"(frame {f.id} " in mind_region
            assert shown == (f.lifecycle != "retired"), (f, mind_region)
            if f.lifecycle == "retiring":
                assert f"(remaining-ticks {f.remaining_ticks})" in mind_region

    @precondition(lambda self: CONTEXT in self.db.contexts())
    @invariant()
    def retired_is_recallable(self) -> None:
        mind = self.ctx.mind(all_observations=True)
        for f in mind.frames:
            if f.lifecycle != "retired":
                continue
            for word in self.words.get(f.id, ()):
                if word not in f.body.replace("(", " ").replace(")", " ").split():
                    continue
                hits = self.ctx.recall.search(word, limit=100).to_dict()
                assert any(h["frame_id"] == f.id for h in hits["hits"]), (f, hits)
        for o in mind.observations:
            if o.lifecycle == "retired" and o.ref in self.obs_words:
                hits = self.ctx.recall.search(self.obs_words[o.ref], limit=100).to_dict()
                assert any(h["ref"] == o.ref for h in hits["hits"]), (o, hits)


MACHINE_EXAMPLES, MACHINE_STEPS = 25, 40

LifecycleMachine.TestCase.settings = settings(
    max_examples=MACHINE_EXAMPLES,
    stateful_step_count=MACHINE_STEPS,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
TestLifecycleMachine = LifecycleMachine.TestCase
