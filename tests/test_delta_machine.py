"""Review 9, ContextDelta (src/morphz/encoding/delta.py): a focused test of the kernel's session
entry, and a state machine that drives one context through random histories and request options
and checks every request the encoder builds (byte-prefix extension, rebuild on seed changes,
read-back equal to the fresh encoding, pressure, determinism, layout). Both failed before the
encoder rebuilt on a change of session."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import morphz
from histories import Clock
from morphz.capacity import Budget
from morphz.encoding import DeltaEncoder, EncodeOptions, Encoding
from morphz.encoding.compile import pressure_figures
from morphz.encoding.delta import _shown
from morphz.encoding.tokens import Calibration, count
from morphz.encoding.view import View
from morphz.errors import MorphzError
from morphz.txlang import SList, read
from morphz.txlang.sexpr import quote, to_text
from test_delta import reconstruct

OPTS = EncodeOptions(local_time="2026-08-04T10:00:00+00:00")


def _kernel_as_the_protocol_reads_it(request: str) -> dict[str, str]:
    """The kernel a model reads from a ContextDelta request, following the protocol's
    ``increments`` entry literally: kernel-update entries "replace the entry with the same
    head", and the kernel "always has every entry" (nothing in it is withdrawn)."""
    forms = read(request)
    seed = forms[0]
    assert isinstance(seed, SList)
    kernel = next(r for r in seed.items[1:] if isinstance(r, SList) and r.head == "kernel")
    entries = {str(e.head): to_text(e) for e in kernel.items[1:] if isinstance(e, SList)}
    for form in forms[1:]:
        assert isinstance(form, SList)
        for item in form.items[1:]:
            if isinstance(item, SList) and item.head == "kernel-update":
                for entry in item.items[1:]:
                    assert isinstance(entry, SList)
                    entries[str(entry.head)] = to_text(entry)
    entries.pop("pressure")  # the request's own figure, not the fresh encoding's
    return entries


def test_a_kernel_update_of_the_session_does_not_restate_the_old_session(
    ctx: morphz.Context,
) -> None:
    """The kernel's ``(session S)`` entry is a kernel field (head ``session``), not a
    session-directory entry. When a request for another session continues the same
    DeltaEncoder, the increment must leave the kernel stating the new session: either a
    kernel-update with ``(session ops)`` only, or a rebuilt seed. Today the encoder keys the
    kernel's entry like a directory entry (``session default``), so the increment states
    ``(kernel-update (session ops) ... (session default))``: a model applying it by head, as
    the protocol says for the kernel, reads that the current session is still ``default``."""
    ctx.observe("user_message", "deploy the service")
    ctx.observe("user_message", "and the ops side", session="ops")
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(OPTS))
    fresh = ctx.encode(replace(OPTS, session="ops"))
    request = encoder.next(fresh)
    assert _kernel_as_the_protocol_reads_it(request) == _kernel_as_the_protocol_reads_it(fresh.text)


# ---------------------------------------------------------------- a state machine over one context

SESSIONS = ("default", "ops", "s/4")
KINDS = ("user_message", "tool_result", "recall_result", "external_event")
SIZES = (0, 5, 40, 90, 300, 2_000)  # against preview thresholds of 64, 100 and 16,000


def _text(size: int, n: int) -> str:
    base = f'obs {n} "q" \\ 部署 '
    return (base * (size // len(base) + 1))[:size]


class DeltaMachine(RuleBasedStateMachine):
    """One context through random observations (batches, some past the preview threshold),
    commits of every operation, clock and view changes, budgets, calibrations, request options
    and running activations; after each step a ContextDelta request (``request``) is checked:
    an increment extends the previous request byte for byte and leaves what the seed shows
    untouched; a rebuild is the fresh encoding; the request read back (seed plus increments)
    shows the fresh encoding's state; the kernel states the fresh encoding's level, never
    critical for an increment, and tokens no fewer than the request's; two encoders fed the
    same encodings send the same bytes and layouts."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.db = morphz.open(Path(self.folder.name) / "m.db", now=Clock())
        self.ctx = self.db.context("c", create=True, window=3)
        self.encoder, self.twin, self.framed = DeltaEncoder(), DeltaEncoder(), DeltaEncoder(4)
        self.minute, self.n = 0, 0
        self.budget: int | None = None
        self.extra: dict[str, Any] = {}
        self.running: list[str] = []
        self.previous = ""
        self.seed: Encoding | None = None

    def teardown(self) -> None:
        self.db.close()
        self.folder.cleanup()

    def tx(self, ops: str, reason: str | None = None) -> None:
        why = f" (reason {quote(reason)})" if reason is not None else ""
        with contextlib.suppress(MorphzError):  # a refused commit changes nothing
            self.ctx.commit(f"(context-tx (base-version {self.ctx.version}){why} {ops})")

    def mind(self) -> morphz.Mind:
        return self.ctx.mind(all_observations=True)

    def _frame(self, pick: int, visible: bool = True) -> str | None:
        frames = [f.id for f in self.mind().frames if not visible or f.lifecycle != "retired"]
        return frames[pick % len(frames)] if frames else None

    # -- what happens between requests

    @rule(
        batch=st.lists(
            st.tuples(st.sampled_from(KINDS), st.sampled_from(SESSIONS), st.sampled_from(SIZES)),
            min_size=1,
            max_size=3,
        )
    )
    def observe(self, batch: list[tuple[str, str, int]]) -> None:
        for session in sorted({s for _, s, _ in batch}):
            items = [
                morphz.Observation(kind, _text(size, self.n + i))
                for i, (kind, s, size) in enumerate(batch)
                if s == session
            ]
            self.n += len(items)
            self.ctx.observe_batch(items, session=session)

    @rule(pick=st.integers(0, 99), derive=st.booleans())
    def new_frame(self, pick: int, derive: bool) -> None:
        fid, self.n = f"f/{self.n}", self.n + 1
        active = [o.ref for o in self.mind().observations if o.lifecycle == "active"]
        if derive and active:
            self.tx(f"(derive {fid} (from {active[pick % len(active)]}) (note {pick}))")
        else:
            self.tx(f"(create {fid} (note {pick}))")

    @rule(pick=st.integers(0, 99))
    def revise(self, pick: int) -> None:
        fid = self._frame(pick)
        if fid:
            self.tx(f"(revise {fid} (note rev {pick} {self.n}))")
            self.n += 1

    @rule(pick=st.integers(0, 99), frame=st.booleans())
    def retire(self, pick: int, frame: bool) -> None:
        if frame:
            target = self._frame(pick)
        else:
            active = [o.ref for o in self.mind().observations if o.lifecycle == "active"]
            target = active[pick % len(active)] if active else None
        if target:
            self.tx(f"(retire {target})", reason="done")

    @rule(pick=st.integers(0, 99), frame=st.booleans())
    def restore(self, pick: int, frame: bool) -> None:
        mind = self.mind()
        if frame:
            gone = [f.id for f in mind.frames if f.lifecycle != "active"]
        else:
            gone = [o.ref for o in mind.observations if o.lifecycle == "retired"]
        if gone:
            self.tx(f"(restore {gone[pick % len(gone)]})")

    @rule(pick=st.integers(0, 99), frame=st.booleans(), on=st.booleans())
    def protect(self, pick: int, frame: bool, on: bool) -> None:
        mind = self.mind()
        if frame:
            targets = [f.id for f in mind.frames if f.protected != on]
        else:
            targets = [o.ref for o in mind.observations if o.protected != on]
        if targets:
            target = targets[pick % len(targets)]
            self.tx(f"(protect {target})" if on else f"(unprotect {target})", None if on else "x")

    @rule(a=st.integers(0, 99), b=st.integers(0, 99), rel=st.sampled_from(("supports", "about")))
    def relate(self, a: int, b: int, rel: str) -> None:
        s, o = self._frame(a), self._frame(b)
        if s and o and s != o:
            self.tx(f"(relate {s} {rel} {o})")

    @rule(pick=st.integers(0, 99))
    def unrelate(self, pick: int) -> None:
        edges = sorted(self.mind().relations)
        if edges:
            s, r, o = edges[pick % len(edges)]
            self.tx(f"(unrelate {s} {r} {o})", reason="no")

    @rule(pick=st.integers(0, 99), where=st.sampled_from(("first", "last", "before", "after")))
    def place(self, pick: int, where: str) -> None:
        fid, anchor = self._frame(pick, False), self._frame(pick // 3 + 1, False)
        if fid and where in ("first", "last"):
            self.tx(f"(place {fid} {where})")
        elif fid and anchor and anchor != fid:
            self.tx(f"(place {fid} ({where} {anchor}))")

    @rule()
    def checkpoint(self) -> None:
        self.tx(f"(checkpoint cp/{self.n})")
        self.n += 1

    @rule(pick=st.integers(0, 99), drop=st.booleans())
    def rollback_or_drop(self, pick: int, drop: bool) -> None:
        names = [n for n, _ in self.mind().checkpoints]
        if names:
            name = names[pick % len(names)]
            self.tx(f"(drop-checkpoint {name})" if drop else f"(rollback {name})", reason="x")

    @rule(sid=st.sampled_from(SESSIONS[1:]), retire=st.booleans())
    def session(self, sid: str, retire: bool) -> None:
        if retire:
            self.tx(f"(retire-session {sid})", reason="later")
        else:
            self.tx(f"(restore-session {sid})")

    @rule(start=st.booleans(), pick=st.integers(0, 99), session=st.sampled_from(SESSIONS))
    def activation(self, start: bool, pick: int, session: str) -> None:
        if start:
            active = [o.ref for o in self.mind().observations if o.lifecycle == "active"]
            root = active[pick % len(active)] if active and pick % 2 else None
            self.running.append(self.ctx.start_activation(session, root, f"goal {pick}"))
        elif self.running:
            self.ctx.finish_activation(self.running.pop(pick % len(self.running)))

    @rule(minutes=st.sampled_from((1, 30, 60 * 25)))
    def advance(self, minutes: int) -> None:
        self.minute += minutes

    @rule(
        threshold=st.sampled_from((64, 100, 16_000)),
        count=st.sampled_from((1, 2, 50)),
        tokens=st.sampled_from((0, 60, 4_000)),
        hours=st.sampled_from((1.0, 24.0)),
    )
    def view(self, threshold: int, count: int, tokens: int, hours: float) -> None:
        self.ctx.set_view(View(threshold, hours, count, tokens))

    @rule(window=st.sampled_from((1, 2, 8)))
    def organizing_window(self, window: int) -> None:
        self.ctx.set_window(window)

    @rule(budget=st.sampled_from((None, 2_800, 3_200, 4_000, 6_000, 12_000)))
    def set_budget(self, budget: int | None) -> None:
        self.budget = budget

    @rule(factor=st.sampled_from((None, 0.6, 1.7, 3.9)))
    def calibrate(self, factor: float | None) -> None:
        self.extra["calibration"] = None if factor is None else Calibration(factor, 3)

    @rule(
        session=st.sampled_from(SESSIONS),
        activation=st.sampled_from((None, "act-1")),
        objectives=st.sampled_from(((), ("ship it",), ("a", "b"))),
        model=st.sampled_from(("none", "m/1")),
        bindings=st.sampled_from(({}, {"workspace": "/w"})),
        parts=st.sampled_from(((), ("x" * 400,))),
        profile=st.sampled_from((None, "role: a", "role: b")),
        capabilities=st.sampled_from((None, "(can x)")),
    )
    def options(self, **fields: Any) -> None:
        fields["extra_parts"] = fields.pop("parts")
        self.extra.update(fields)

    # -- the request after each step

    def opts(self) -> EncodeOptions:
        day, minute = divmod(self.minute, 24 * 60)
        budget = None if self.budget is None else Budget(self.budget, 0, reserve=300)
        local = f"2026-08-{4 + day:02d}T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
        return EncodeOptions(local_time=local, budget=budget, **self.extra)

    @invariant()
    def request(self) -> None:
        fresh = self.ctx.encode(self.opts())
        request = self.encoder.next(fresh)
        assert self.twin.next(fresh) == request  # deterministic
        assert self.twin.layout == self.encoder.layout
        self.framed.next(fresh)
        sent = self.encoder.pressure
        assert sent is not None
        for encoder in (self.encoder, self.framed):
            if encoder.last == "increment":
                assert encoder.pressure is not None
                assert encoder.pressure.level == fresh.pressure.level != "critical"
        if self.encoder.last == "increment":
            assert request.startswith(self.previous) and request != self.previous
            seed = self.seed
            assert seed is not None  # what the seed shows is unchanged
            state = fresh.state
            assert {o.seq for o in seed.state.observations} <= {o.seq for o in state.observations}
            frames = {f.id: _shown(f) for f in state.frames}
            assert all(frames.get(f.id) == _shown(f) for f in seed.state.frames)
            assert set(seed.state.relations) <= set(state.relations)
            assert set(seed.state.checkpoints) <= set(state.checkpoints)
            assert fresh.view.preview_threshold == seed.view.preview_threshold
            assert (fresh.options.profile, fresh.options.capabilities) == (
                seed.options.profile,
                seed.options.capabilities,
            )
        else:
            assert request == fresh.text and sent == fresh.pressure
            self.seed = fresh
        # read back, the request shows the fresh encoding's state (the kernel as the protocol
        # says: by head, nothing withdrawn), but for the pressure, which is the request's
        read, expected = reconstruct(request), reconstruct(fresh.text)
        figures = read.pop("kernel"), expected.pop("kernel")
        assert isinstance(figures[0], dict)
        assert figures[0]["pressure"] == f"(pressure {pressure_figures(sent)})"
        assert read == expected
        assert list(read["frames"]) == list(expected["frames"])  # type: ignore[call-overload]
        kernels = (
            _kernel_as_the_protocol_reads_it(request),
            _kernel_as_the_protocol_reads_it(fresh.text),
        )
        assert kernels[0] == kernels[1]
        # the stated tokens never understate the request; its layout covers it
        o = fresh.options
        assert sent.tokens >= count([request, *o.extra_parts], o.calibration, o.counter).tokens
        layout = self.encoder.layout
        assert "".join(layout.turn_texts(request)) == request and len(layout.marks) <= 4
        assert set(layout.marks) <= {*layout.cuts, layout.size}
        self.previous = request


DeltaMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_delta_state_machine = DeltaMachine.TestCase
