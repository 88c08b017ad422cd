"""Random histories for hypothesis tests of the encoding: steps played through the public API,
keeping only valid operations, on a store with a deterministic clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

import morphz
from morphz.txlang.sexpr import quote

TRICKY = (
    'she said "ship it"',
    "a back\\slash and a trailing \\",
    "line one\nline two\n\nline four",
    "部署在杭州,数据库在上海。",
    "(not a list; not a comment",
    '"',
    "",
)


class Clock:
    """A deterministic wall clock: one second per call (for stores made inside hypothesis)."""

    def __init__(self) -> None:
        self.current = datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.current += timedelta(seconds=1)
        return self.current


def tx(ctx: morphz.Context, ops: str, reason: str | None = None) -> morphz.Receipt:
    why = f" (reason {quote(reason)})" if reason is not None else ""
    return ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


KINDS = st.sampled_from(sorted(morphz.OBSERVATION_KINDS))
SESSIONS = st.sampled_from(("default", "ops", "research", "s/4"))
TEXTS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(TRICKY),
    st.builds(lambda piece, n: piece * n, st.text(min_size=1, max_size=8), st.integers(60, 400)),
    st.builds(lambda piece: piece * (16_001 // len(piece) + 1), st.text(min_size=1, max_size=4)),
)
# what an observation may keep as meta: none, the runtime's tool-result meta, or any JSON object
# (keys that are no ids, nested values, long values that the inbox names instead of showing)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
METAS = st.one_of(
    st.none(),
    st.builds(lambda n: {"call": f"call_{n}", "error": n % 2 == 0, "tool": "exec"}, st.integers()),
    st.dictionaries(st.text(max_size=8), JSON, max_size=4),
    st.builds(lambda n: {"blob": "m" * n}, st.integers(900, 1_200)),
)
STEP = st.one_of(
    st.tuples(st.just("observe"), KINDS, SESSIONS, TEXTS, METAS),
    st.tuples(st.just("derive"), st.integers(0, 99), TEXTS),
    st.tuples(st.just("create"), st.integers(0, 99), TEXTS),
    st.tuples(st.just("revise"), st.integers(0, 99), TEXTS),
    st.tuples(st.just("retire-frame"), st.integers(0, 99)),
    st.tuples(st.just("retire-observation"), st.integers(0, 99)),
    st.tuples(st.just("protect-observation"), st.integers(0, 99)),
)
STEPS = st.lists(STEP, max_size=20)


class History:
    """Plays random steps through the public API, keeping only valid operations."""

    def __init__(self, ctx: morphz.Context) -> None:
        self.ctx = ctx
        self.active: list[str] = []  # refs of active, unprotected observations
        self.frames: list[str] = []
        self.retiring: set[str] = set()
        self.revisions = 0  # numbers each revise, so none restates the body it replaces

    def play(self, step: tuple[object, ...]) -> None:
        ctx, op = self.ctx, step[0]
        if op == "observe":
            _, kind, session, text, meta = step
            assert isinstance(kind, str) and isinstance(session, str) and isinstance(text, str)
            assert meta is None or isinstance(meta, dict)
            self.active.append(ctx.observe(kind, text, meta=meta, session=session).ref)
        elif op in ("derive", "create"):
            _, pick, text = step
            assert isinstance(pick, int) and isinstance(text, str)
            fid = f"f/{len(self.frames)}"
            if op == "derive" and self.active:
                source = self.active[pick % len(self.active)]
                tx(ctx, f"(derive {fid} (from {source}) (note {quote(text)}))")
            else:
                tx(ctx, f"(create {fid} {quote(text)})")
            self.frames.append(fid)
        elif op == "revise" and self.frames:
            _, pick, text = step
            assert isinstance(pick, int) and isinstance(text, str)
            fid = self.frames[pick % len(self.frames)]
            self.revisions += 1  # a revise that changes nothing is refused (review 20b)
            tx(ctx, f"(revise {fid} (note {quote(text)}) (rev {pick} {self.revisions}))")
            self.retiring.discard(fid)
        elif op == "retire-frame":
            candidates = [f for f in self.frames if f not in self.retiring]
            if candidates:
                pick = step[1]
                assert isinstance(pick, int)
                fid = candidates[pick % len(candidates)]
                tx(ctx, f"(retire {fid})", reason=f"done with {fid}")
                self.retiring.add(fid)
        elif op in ("retire-observation", "protect-observation") and self.active:
            pick = step[1]
            assert isinstance(pick, int)
            ref = self.active.pop(pick % len(self.active))
            if op == "retire-observation":
                tx(ctx, f"(retire {ref})", reason="processed")
            else:
                tx(ctx, f"(protect {ref})")
