"""The Context Encoding (DESIGN §9): region order, byte ranges, byte-determinism, prefix stability
under appends, previews and their refs, the mind, the session directory's working set and the
kernel."""

from __future__ import annotations

import itertools
import re
import tempfile
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import morphz
from histories import KINDS, SESSIONS, STEPS, TEXTS, TRICKY, Clock, History
from morphz.capacity import Budget
from morphz.encoding import Calibration, EncodeOptions, Encoding, estimate_tokens
from morphz.encoding.compile import PRESSURE_SLACK
from morphz.encoding.protocol import PROTOCOL
from morphz.txlang import OP_NAMES, Atom, SList, Str, read_one
from morphz.txlang.sexpr import quote

REGIONS = (
    "protocol",
    "evaluation-profile",
    "inbox",
    "observation-state",
    "mind",
    "session-directory",
    "kernel",
    "evaluation-environment",
    "evaluate",
)
WITH_CAPABILITIES = (*REGIONS[:7], "cognitive-capabilities", *REGIONS[7:])
LOCAL_TIME = "2026-08-04T10:00:00+00:00"
OPENING = b"(context-encoding\n"


def tx(ctx: morphz.Context, ops: str, reason: str | None = None) -> morphz.Receipt:
    why = f" (reason {quote(reason)})" if reason is not None else ""
    return ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


def check_layout(enc: Encoding, names: tuple[str, ...] = REGIONS) -> None:
    """Regions in ``names`` order, contiguous, their byte ranges exactly their text, and the
    whole text one S-expression whose items are the regions."""
    data = enc.text.encode()
    assert [r.name for r in enc.regions] == list(names)
    assert data.startswith(OPENING)
    pos = len(OPENING)
    for index, region in enumerate(enc.regions):
        assert region.start == pos, region.name
        chunk = data[region.start : region.end].decode()
        assert enc.region(region.name) == chunk
        assert region.tokens == estimate_tokens(chunk)
        form = read_one(chunk)
        assert isinstance(form, SList) and form.head == region.name
        separator = b"\n" if index < len(enc.regions) - 1 else b")\n"
        assert data[region.end : region.end + len(separator)] == separator
        pos = region.end + len(separator)
    assert pos == len(data)
    top = read_one(enc.text)
    assert isinstance(top, SList) and top.head == "context-encoding"
    assert [item.head for item in top.items[1:] if isinstance(item, SList)] == list(names)
    assert len(top.items) == len(names) + 1


def prefix_through_inbox(enc: Encoding) -> bytes:
    """Every byte of the encoding up to (not including) the inbox's closing parenthesis."""
    inbox = next(r for r in enc.regions if r.name == "inbox")
    return enc.text.encode()[: inbox.end - 1]


def populate(ctx: morphz.Context) -> None:
    """A state with something in every region: tricky texts, several sessions, frames in all
    lifecycles that show, relations, a checkpoint, a protected and a retired observation."""
    for index, text in enumerate(TRICKY):
        ctx.observe("user_message" if index % 2 else "tool_result", text)
    ctx.observe("external_event", "the pager fired", session="ops")
    ctx.observe("recall_result", "an old note", session="research")
    ctx.observe("user_message", "already processed")
    tx(
        ctx,
        '(derive deployment/current (from @e1 @e4) (fact (region cn-hangzhou)) "free 中文 text")'
        " (create deployment/old (fact (region cn-shanghai)))"
        ' (create notes (todo "check \\"quotes\\" and \\\\ backslashes"))'
        " (relate deployment/current supersedes deployment/old)"
        " (checkpoint before-cleanup)",
    )
    tx(ctx, "(retire deployment/old) (retire @e10) (protect @e2)", reason="outdated region")


# ------------------------------------------------------------------ layout


def test_regions_in_order_with_exact_byte_ranges(ctx: morphz.Context) -> None:
    check_layout(ctx.encode(local_time=LOCAL_TIME))  # an empty context
    populate(ctx)
    enc = ctx.encode(local_time=LOCAL_TIME)
    check_layout(enc)
    assert len(enc.text.encode()) > len(enc.text)  # multibyte content: offsets are in bytes
    assert enc.region("evaluation-profile") == "(evaluation-profile none)"
    assert enc.region("evaluate") == "(evaluate)"
    data = enc.to_dict()
    assert data["bytes"] == len(enc.text.encode())
    assert [r["name"] for r in data["regions"]] == list(REGIONS)
    assert "text" not in enc.to_dict(include_text=False)


def test_cognitive_capabilities_only_when_given(ctx: morphz.Context) -> None:
    populate(ctx)
    plain = ctx.encode(local_time=LOCAL_TIME)
    assert "cognitive-capabilities" not in [r.name for r in plain.regions]
    enc = ctx.encode(local_time=LOCAL_TIME, capabilities="(recall) (context_tx)")
    check_layout(enc, WITH_CAPABILITIES)
    assert enc.region("cognitive-capabilities") == "(cognitive-capabilities (recall) (context_tx))"
    spaced = ctx.encode(local_time=LOCAL_TIME, capabilities="  (recall)\n\n(context_tx )")
    assert spaced.text == enc.text  # printed canonically: the same capabilities, the same bytes
    with pytest.raises(morphz.InputError, match="capabilities must be S-expressions"):
        ctx.encode(capabilities="(recall")
    profiled = ctx.encode(local_time=LOCAL_TIME, profile='harness "x"')
    check_layout(profiled)
    assert read_one(profiled.region("evaluation-profile")) == SList(
        (Atom("evaluation-profile"), Str('harness "x"'))
    )


def test_text_parses_and_round_trips_every_observation_text(ctx: morphz.Context) -> None:
    populate(ctx)
    inbox = read_one(ctx.encode().region("inbox"))
    assert isinstance(inbox, SList)
    texts = {}
    for item in inbox.items[1:]:
        assert isinstance(item, SList) and item.head == "observation"
        ref = item.items[1]
        fields = {f.head: f for f in item.items[2:] if isinstance(f, SList)}
        body = fields["text"].items[1]
        assert isinstance(ref, Atom) and isinstance(body, Str)
        texts[ref.text] = body.value
    assert [texts[f"@e{i + 1}"] for i in range(len(TRICKY))] == list(TRICKY)
    assert "@e10" not in texts and "@e9" in texts  # @e10 is retired


# ------------------------------------------------------------------ determinism


def test_same_state_and_options_give_the_same_bytes(
    open_db: Callable[[], morphz.Database],
) -> None:
    db = open_db()
    ctx = db.context("context-default", create=True)
    populate(ctx)
    act = ctx.start_activation("default", root="@e2")
    opts = EncodeOptions(
        session="default",
        activation=act,
        model="test-model",
        local_time=LOCAL_TIME,
        bindings={"cwd": "/tmp/x", "lang": "中文"},
        objectives=("ship the release", 'say "done"'),
        scheduling={"queue": 2},
        authority={"shell": "ask", "files": "allow"},
    )
    first = ctx.encode(opts)
    assert ctx.encode(opts).text == first.text
    assert ctx.encode(opts).to_dict() == first.to_dict()
    same_fields = ctx.encode(
        session="default",
        activation=act,
        model="test-model",
        local_time=LOCAL_TIME,
        bindings={"lang": "中文", "cwd": "/tmp/x"},  # insertion order does not matter
        objectives=("ship the release", 'say "done"'),
        scheduling={"queue": 2},
        authority={"files": "allow", "shell": "ask"},
    )
    assert same_fields.text == first.text
    db.close()
    again = open_db().context("context-default")
    assert again.encode(opts).text == first.text


def test_encode_refuses_options_and_fields_together(ctx: morphz.Context) -> None:
    with pytest.raises(morphz.InputError):
        ctx.encode(EncodeOptions(), model="x")


def test_protocol_is_byte_identical_across_states(db: morphz.Database) -> None:
    empty = db.context("context-empty", create=True).encode()
    busy = db.context("context-default", create=True)
    populate(busy)
    variants = [
        empty,
        busy.encode(local_time=LOCAL_TIME),
        busy.encode(session="ops", model="other", capabilities="(recall)", profile="h"),
        busy.encode(budget=Budget(configured=30_000)),
    ]
    start = len(OPENING)
    for enc in variants:
        assert enc.region("protocol") == PROTOCOL
        assert enc.regions[0].start == start
        assert enc.text.encode()[: enc.regions[0].end] == OPENING + PROTOCOL.encode()


def test_protocol_is_a_complete_contract() -> None:
    form = read_one(PROTOCOL)
    assert isinstance(form, SList) and form.head == "protocol"
    sections = {item.head for item in form.items if isinstance(item, SList)}
    for section in ("ids", "context-tx", "lifecycle", "concurrency", "recall", "capacity"):
        assert section in sections
    for op in OP_NAMES:
        assert f'({op} "({op} ' in PROTOCOL, op
    for word in ("base-version", "@e42", "rebased", "reason", "organizing window", "restore"):
        assert word in PROTOCOL


# ------------------------------------------------------------------ prefix stability


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    steps=STEPS,
    appended=st.tuples(KINDS, SESSIONS, TEXTS),
    threshold=st.sampled_from((200, 1_000, 16_000)),
    window=st.sampled_from((1, 2, 8)),  # short windows: retirements finalize within a history
)
def test_appending_one_observation_keeps_every_byte_before_the_inbox_end(
    steps: list[tuple[object, ...]], appended: tuple[str, str, str], threshold: int, window: int
) -> None:
    kind, session, text = appended
    with tempfile.TemporaryDirectory() as folder:
        db = morphz.open(Path(folder) / "morphz.db", now=Clock())
        try:
            ctx = db.context("context-default", create=True, window=window)
            history = History(ctx)
            for step in steps:
                history.play(step)
            opts = EncodeOptions(local_time=LOCAL_TIME, preview_threshold=threshold)
            before = ctx.encode(opts)
            ctx.observe(kind, text, session=session)
            after = ctx.encode(opts)
        finally:
            db.close()
    kept = prefix_through_inbox(before)
    assert after.text.encode().startswith(kept)
    inbox = after.region("inbox")
    assert inbox.startswith(before.region("inbox")[:-1] + "\n (observation ")
    check_layout(after)


def test_mutable_attributes_change_observation_state_not_the_inbox(ctx: morphz.Context) -> None:
    populate(ctx)
    before = ctx.encode(local_time=LOCAL_TIME)
    tx(ctx, "(protect @e3)")
    tx(ctx, "(derive uses/e3 (from @e3) (seen yes))")  # usage: cited by one more frame
    ctx.observe("recall_result", "no tick")
    after = ctx.encode(local_time=LOCAL_TIME)
    assert after.region("inbox").startswith(before.region("inbox")[:-1])
    assert prefix_through_inbox(after).startswith(prefix_through_inbox(before))
    assert "@e3" not in before.region("observation-state")  # nothing to state yet
    assert "(@e3 (protected) (cited-by 1))" in after.region("observation-state")
    assert after.region("observation-state") != before.region("observation-state")
    for word in ("(protected", "(cited-by"):
        assert word not in after.region("inbox")


def test_inbox_items_carry_their_arrival_tick_and_state_lists_exceptions(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "first")
    ctx.observe("recall_result", "no tick")
    ctx.observe("tool_result", "second")
    enc = ctx.encode()
    inbox = enc.region("inbox")
    assert "(observation @e1 (kind user_message)" in inbox and "(tick 1)" in inbox
    assert inbox.count("(tick 1)") == 2 and inbox.count("(tick 2)") == 1  # recall: no tick
    assert "(clock 2)" in enc.region("kernel")  # age = clock - tick
    assert enc.region("observation-state") == "(observation-state)"
    tx(ctx, "(protect @e2) (derive d (from @e3) (x 1))")
    state = ctx.encode().region("observation-state")
    assert state == "(observation-state\n (@e2 (protected))\n (@e3 (cited-by 1)))"
    assert ctx.encode().region("inbox") == inbox  # mutable facts never touch the inbox


def test_retired_observations_leave_the_inbox(ctx: morphz.Context) -> None:
    for text in ("one", "two", "three"):
        ctx.observe("user_message", text)
    tx(ctx, "(retire @e2)", reason="processed")
    enc = ctx.encode()
    assert "@e2" not in enc.region("inbox")
    assert "@e2" not in enc.region("observation-state")
    assert '"two"' not in enc.text
    assert "@e1" in enc.region("inbox") and "@e3" in enc.region("inbox")
    assert ctx.recall.read("@e2").text == "two"  # retired, not deleted
    tx(ctx, "(restore @e2)")
    assert "(observation @e2 " in ctx.encode().region("inbox")


# ------------------------------------------------------------------ previews


def _observation(enc: Encoding, ref: str) -> dict[str, SList]:
    inbox = read_one(enc.region("inbox"))
    assert isinstance(inbox, SList)
    for item in inbox.items[1:]:
        assert isinstance(item, SList)
        if item.items[1] == Atom(ref):
            return {f.head or "": f for f in item.items[2:] if isinstance(f, SList)}
    raise AssertionError(f"{ref} is not in the inbox")


def _preview(fields: dict[str, SList]) -> tuple[int, str, str, str]:
    parts = {f.head: f.items[1] for f in fields["preview"].items[1:] if isinstance(f, SList)}
    total, head, omitted, tail = (parts[k] for k in ("total-chars", "head", "omitted", "tail"))
    assert isinstance(total, Atom) and isinstance(head, Str)
    assert isinstance(omitted, Str) and isinstance(tail, Str)
    return int(total.text), head.value, omitted.value, tail.value


def _read_all(ctx: morphz.Context, ref: str) -> tuple[str, int]:
    page = ctx.recall.read(ref)
    text, total = page.text, page.total_chars
    while page.next_offset is not None:
        page = ctx.recall.read(ref, offset=page.next_offset)
        text += page.text
    return text, total


def test_large_observation_shows_a_preview_that_resolves_through_recall(
    ctx: morphz.Context,
) -> None:
    body = "".join(f'line {i}: 数据 "q" \\ ;\n' for i in range(2_000))
    large = "HEAD-MARK " + body + " TAIL-MARK"
    assert len(large) > 16_000
    small = "x" * 16_000  # exactly at the threshold: shown in full
    ctx.observe("tool_result", large)
    ctx.observe("tool_result", small)
    enc = ctx.encode()
    check_layout(enc)
    fields = _observation(enc, "@e1")
    assert "text" not in fields
    total, head, omitted, tail = _preview(fields)
    assert total == len(large)
    assert head.startswith("HEAD-MARK") and large.startswith(head)
    assert tail.endswith("TAIL-MARK") and large.endswith(tail)
    assert "@e1" in omitted and "recall" in omitted
    assert len(head) + len(tail) < total
    assert f"{total - len(head) - len(tail)} characters" in omitted
    assert "TAIL-MARK" not in enc.region("inbox").split("(tail ")[0]  # the middle is not shown
    assert body[8_000:8_200] not in enc.text
    full = _observation(enc, "@e2")["text"].items[1]
    assert full == Str(small)
    text, total_chars = _read_all(ctx, "@e1")
    assert text == large and total_chars == total


def test_preview_threshold_is_configurable(ctx: morphz.Context) -> None:
    text = "start " + "abcdefghij" * 600 + " end"  # 6,010 characters
    ctx.observe("user_message", text)
    assert "text" in _observation(ctx.encode(), "@e1")  # below the default threshold
    at = ctx.encode(preview_threshold=len(text))
    assert "text" in _observation(at, "@e1")
    enc = ctx.encode(preview_threshold=len(text) - 1)
    fields = _observation(enc, "@e1")
    assert "text" not in fields
    total, head, omitted, tail = _preview(fields)
    assert total == len(text) and text.startswith(head) and text.endswith(tail)
    assert "@e1" in omitted
    assert ctx.recall.read("@e1", limit=len(text)).text == text


@pytest.mark.parametrize("size", [41, 500, 2_999, 3_001])
def test_preview_never_repeats_or_overlaps_content_with_a_small_threshold(
    ctx: morphz.Context, size: int
) -> None:
    """head + omitted + tail account for the text exactly, whatever the threshold."""
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    ctx.observe("user_message", text)
    total, head, omitted, tail = _preview(_observation(ctx.encode(preview_threshold=40), "@e1"))
    assert total == size
    assert text.startswith(head) and text.endswith(tail)
    missing = int(omitted.split(" ", 1)[0])
    assert missing >= 0
    assert len(head) + missing + len(tail) == size


# ------------------------------------------------------------------ mind


def test_mind_shows_frames_lifecycle_relations_and_checkpoints(ctx: morphz.Context) -> None:
    populate(ctx)
    mind = ctx.encode().region("mind")
    lines = mind.splitlines()
    assert lines[0] == "(mind"
    assert lines[1].startswith(" (frame deployment/current (revision 1) (sources @e1 @e4) (body ")
    assert lines[2] == (
        ' (frame deployment/old (revision 1) (lifecycle retiring) (remaining-ticks 8) (reason "out'
        'dated region") (body (fact (region cn-shanghai))))'
    )
    assert "(relations (deployment/current supersedes deployment/old))" in mind
    assert "(checkpoints before-cleanup)" in mind
    for tick in range(3):
        ctx.observe("user_message", f"tick {tick}")
    assert "(remaining-ticks 5)" in ctx.encode().region("mind")
    tx(ctx, "(place notes first) (revise deployment/current (fact (region cn-beijing)))")
    mind = ctx.encode().region("mind")
    assert mind.index("(frame notes") < mind.index("(frame deployment/current")
    assert "(frame deployment/current (revision 2)" in mind
    for tick in range(5):
        ctx.observe("user_message", f"more {tick}")
    mind = ctx.encode().region("mind")
    assert "deployment/old (revision" not in mind  # the window ended: retired, out of view
    assert "(relations (deployment/current supersedes deployment/old))" in mind


def test_protected_frames_are_marked(ctx: morphz.Context) -> None:
    tx(ctx, "(create keep (x 1)) (protect keep)")
    assert "(frame keep (revision 1) (protected) (body (x 1)))" in (ctx.encode().region("mind"))


# ------------------------------------------------------------------ session directory


def _advance(ctx: morphz.Context, hours: float) -> None:
    clock = ctx.db.now
    clock.current += timedelta(hours=hours)  # type: ignore[attr-defined]


def _now(ctx: morphz.Context) -> str:
    clock = ctx.db.now
    moment: datetime = clock.current  # type: ignore[attr-defined]
    return (moment + timedelta(seconds=1)).isoformat()


def _directory(enc: Encoding) -> list[tuple[str, str]]:
    return [(sid, level) for sid, level, _ in enc.sessions.entries]


def test_current_session_first_then_by_recency(ctx: morphz.Context) -> None:
    for sid in ("s1", "s2", "s3"):
        ctx.observe("user_message", f"hello from {sid}", session=sid)
    ctx.observe("user_message", "mine")
    enc = ctx.encode(session="s2", local_time=_now(ctx))
    assert _directory(enc) == [
        ("s2", "full"),
        ("default", "full"),
        ("s3", "full"),
        ("s1", "full"),
    ]
    text = enc.region("session-directory")
    assert text.index("(session s2 ") < text.index("(session default ") < text.index("(session s3 ")
    assert "(session s2 (level full) (attention active)" in text
    assert "(inbox @e2)" in text
    ctx.observe("tool_result", "s1 again", session="s1")
    assert [sid for sid, _ in _directory(ctx.encode(session="s2"))] == [
        "s2",
        "s1",
        "default",
        "s3",
    ]
    assert "(excluded" not in text


def test_retired_and_stale_sessions_are_excluded_with_the_reason(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "long ago", session="old")
    _advance(ctx, 30)
    ctx.observe("user_message", "busy", session="gone")
    ctx.observe("user_message", "recent", session="recent")
    ctx.observe("user_message", "mine")
    tx(ctx, "(retire-session gone)", reason="finished")
    now = _now(ctx)
    enc = ctx.encode(now=now, session_hours=24)
    assert _directory(enc) == [("default", "full"), ("recent", "full")]
    text = enc.region("session-directory")
    assert "(session old" not in text and "(session gone" not in text
    assert text.endswith("(excluded (inactive-beyond-window 1) (retired 1 (latest gone))))")
    assert enc.sessions.to_dict()["excluded"] == {"inactive-beyond-window": 1, "retired": 1}
    by_local_time = ctx.encode(local_time=now, session_hours=24)  # now defaults to local time
    assert _directory(by_local_time) == _directory(enc)
    wide = ctx.encode(now=now, session_hours=48)
    assert ("old", "full") in _directory(wide)
    assert "(excluded (retired 1 (latest gone)))" in wide.region("session-directory")


def test_current_session_is_shown_even_when_stale(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "long ago", session="old")
    _advance(ctx, 30)
    ctx.observe("user_message", "mine")
    enc = ctx.encode(session="old", now=_now(ctx), session_hours=24)
    assert _directory(enc) == [("old", "full"), ("default", "full")]


def test_sessions_beyond_the_count_are_excluded(ctx: morphz.Context) -> None:
    for index in range(6):
        ctx.observe("user_message", f"hi {index}", session=f"s{index}")
    enc = ctx.encode(session="s0", session_count=3)
    assert _directory(enc) == [("s0", "full"), ("s5", "full"), ("s4", "full")]
    assert "(excluded (beyond-count 3))" in enc.region("session-directory")
    assert len(ctx.encode(session="s0").sessions.entries) == 6  # default count is 50


def test_sessions_are_demoted_then_omitted_under_the_token_budget(ctx: morphz.Context) -> None:
    for sid in ("older", "newer"):
        for index in range(25):
            ctx.observe("tool_result", f"{sid} result {index}", session=sid)
    ctx.observe("user_message", "mine")
    roomy = ctx.encode(session_tokens=100_000)
    assert _directory(roomy) == [("default", "full"), ("newer", "full"), ("older", "full")]
    texts = {sid: text for sid, _, text in roomy.sessions.entries}
    assert "(more-refs 5)" in texts["newer"]  # a full entry lists at most 20 inbox refs
    current, full_newer = estimate_tokens(texts["default"]), estimate_tokens(texts["newer"])

    demoted = ctx.encode(session_tokens=current + full_newer - 1)
    assert _directory(demoted)[:2] == [("default", "full"), ("newer", "metadata")]
    meta = {sid: text for sid, _, text in demoted.sessions.entries}["newer"]
    assert meta.startswith("(session newer (level metadata) (attention active) (last-active ")
    assert "@e" not in meta

    tight = ctx.encode(session_tokens=current + estimate_tokens(meta))
    assert _directory(tight) == [("default", "full"), ("newer", "metadata")]
    assert tight.sessions.level("older") == "omitted"
    assert "(excluded (over-token-budget 1))" in tight.region("session-directory")

    none_left = ctx.encode(session_tokens=1)  # the current session is always shown in full
    assert _directory(none_left) == [("default", "full")]
    assert "(excluded (over-token-budget 2))" in none_left.region("session-directory")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    names=st.lists(st.integers(1, 40), min_size=6, max_size=6),
    budget=st.integers(0, 400),
)
@example(sizes=[0, 0], names=[1, 40, 1, 1, 1, 1], budget=52)  # an older, shorter one fit
def test_directory_levels_only_fall_with_recency(
    open_db: Callable[[], morphz.Database], sizes: list[int], names: list[int], budget: int
) -> None:
    """Whatever the sessions' sizes and id lengths: the current session in full, then the others
    most recent first, each shown at most as richly as the one before it (full, metadata, left
    out), within the directory's token budget (the current session aside)."""
    db = open_db()
    ctx = db.context(f"c{len(db.contexts())}", create=True)
    for index, size in enumerate(sizes):
        sid = f"s{index}-" + "x" * names[index]
        for n in range(size + 1):
            ctx.observe("tool_result", f"result {n}", session=sid)
    ctx.observe("user_message", "mine")
    plan = ctx.encode(session_tokens=budget).sessions
    levels = [level for sid, level, _ in plan.entries]
    assert plan.entries[0][:2] == ("default", "full")
    rank = {"full": 2, "metadata": 1}
    assert all(rank[a] >= rank[b] for a, b in itertools.pairwise(levels[1:]))
    assert sum(estimate_tokens(text) for _, _, text in plan.entries[1:]) <= budget
    omitted = len(sizes) - (len(plan.entries) - 1)
    assert plan.excluded.get("over-token-budget", 0) == omitted
    shown = [sid for sid, _, _ in plan.entries[1:]]
    recency = [f"s{i}-" + "x" * names[i] for i in reversed(range(len(sizes)))]
    assert shown == recency[: len(shown)]  # a prefix of the most recent: none skipped


def test_running_work_shows_in_the_directory_and_kernel(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "do it", session="worker")
    act = ctx.start_activation("worker", root="@e1")
    enc = ctx.encode(activation=act)
    assert f"(running-activations ({act} (session worker) (root @e1)))" in enc.region("kernel")
    assert "(session worker (level full) (attention active)" in enc.region("session-directory")
    assert "(running 1)" in enc.region("session-directory")
    ctx.finish_activation(act)
    assert "(running-activations)" in ctx.encode().region("kernel")


def test_the_kernel_shows_every_running_activation_with_its_objective(
    ctx: morphz.Context,
) -> None:
    ctx.observe("user_message", "fix the build", session="a")
    ctx.observe("user_message", "write the notes", session="b")
    first = ctx.start_activation("a", root="@e1", objective='fix the "build"')
    second = ctx.start_activation("b", root="@e2", objective="write the release notes")
    third = ctx.start_activation("c")
    kernel = ctx.encode(session="a", activation=first).region("kernel")
    line = next(x for x in kernel.splitlines() if x.startswith(" (running-activations"))
    assert line == (
        f' (running-activations ({first} (session a) (root @e1) (objective "fix the \\"build\\""))'
        f' ({second} (session b) (root @e2) (objective "write the release notes"))'
        f" ({third} (session c)))"
    )
    started = [e for e in ctx.events() if e.kind == "activation_started"]
    assert started[0].payload is not None
    assert started[0].payload["objective"] == 'fix the "build"'
    with pytest.raises(morphz.InputError, match="objective"):
        ctx.start_activation("a", objective="  ")
    ctx.finish_activation(second)
    assert "write the release notes" not in ctx.encode(session="a").region("kernel")


# ------------------------------------------------------------------ kernel


def test_kernel_shows_runtime_facts_and_pressure(ctx: morphz.Context) -> None:
    populate(ctx)
    act = ctx.start_activation("default", root="@e2")
    enc = ctx.encode(
        activation=act,
        objectives=("ship the release", "keep 中文 docs"),
        scheduling={"queued": 3},
        authority={"shell": "ask", "files": "allow"},
        model="gpt-test",
        local_time=LOCAL_TIME,
        bindings={"cwd": "/srv"},
    )
    kernel = enc.region("kernel").splitlines()
    status = ctx.status()
    budget = ctx.budget()
    assert kernel == [
        "(kernel",
        " (context context-default)",
        " (session default)",
        f" (activation {act})",
        f" (mind-version {status.version})",
        f" (clock {status.clock})",
        " (organizing-window 8)",
        ' (objectives "ship the release" "keep 中文 docs")',
        f" (running-activations ({act} (session default) (root @e2)))",
        ' (scheduling (queued "3"))',
        " (authority (files allow) (shell ask))",
        f" (pressure (level normal) (tokens {enc.tokens}) (figure estimated) (notice "
        f"{budget.notice}) (warning {budget.warning}) (critical {budget.critical}) (hard "
        f"{budget.hard})))",
    ]
    assert enc.region("evaluation-environment").splitlines() == [
        "(evaluation-environment",
        ' (model "gpt-test")',
        f' (local-time "{LOCAL_TIME}")',
        ' (bindings (cwd "/srv")))',
    ]
    assert enc.pressure.kind == "estimated" and enc.pressure.level == "normal"
    assert enc.tokens >= estimate_tokens(enc.text)  # the figure does not under-count the text


def test_pressure_figure_kind_estimated_calibrated_or_exact(ctx: morphz.Context) -> None:
    populate(ctx)
    estimated = ctx.encode(local_time=LOCAL_TIME)
    assert "(figure estimated)" in estimated.region("kernel")
    calibration = Calibration()
    assert calibration.kind == "estimated"
    untouched = ctx.encode(local_time=LOCAL_TIME, calibration=calibration)
    assert untouched.tokens == estimated.tokens and untouched.pressure.kind == "estimated"
    calibration.update(1_000, 1_500)
    assert calibration.kind == "calibrated" and calibration.factor == 1.5
    calibrated = ctx.encode(local_time=LOCAL_TIME, calibration=calibration)
    assert calibrated.pressure.kind == "calibrated"
    assert "(figure calibrated)" in calibrated.region("kernel")
    measured = estimated.tokens - PRESSURE_SLACK
    assert calibrated.tokens == round((measured + PRESSURE_SLACK) * 1.5)  # slack calibrated too
    for region in calibrated.regions:  # each region is counted as the whole is
        assert region.tokens == round(estimate_tokens(calibrated.region(region.name)) * 1.5)
    exact = ctx.encode(local_time=LOCAL_TIME, counter=len)
    assert exact.pressure.kind == "exact" and "(figure exact)" in exact.region("kernel")
    extra = "tool schema " * 100
    with_tools = ctx.encode(local_time=LOCAL_TIME, extra_parts=(extra,))
    assert with_tools.tokens == estimated.tokens + estimate_tokens(extra)


def test_calibration_is_a_weighted_ratio_and_ignores_empty_samples() -> None:
    calibration = Calibration(alpha=0.5)
    calibration.update(0, 100)
    calibration.update(100, 0)
    assert calibration.samples == 0 and calibration.apply(100) == 100
    calibration.update(100, 200)
    assert calibration.factor == 2.0
    calibration.update(100, 100)
    assert calibration.factor == 1.5 and calibration.samples == 2
    assert calibration.apply(100) == 150
    assert Calibration.from_dict(calibration.to_dict()) == calibration


def test_estimate_tokens_counts_cjk_closer_to_one_token_per_character() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("部署在杭州") == 5
    assert estimate_tokens("ab部署") == 3
    # the first wide code points (U+2FFF, unassigned before Unicode 15.1, would count as a chunk
    # of its own and one after it), and beyond the BMP
    assert estimate_tokens("⺀⼀〇𝕏") == 4
    # below U+2E80 a character that is not ASCII counts a third of a token per UTF-8 byte:
    # three bytes each for the symbols, two for the accent: 11 bytes, 3.67 tokens
    assert estimate_tokens("—→✓é") == 4
    assert estimate_tokens("привет") == 4  # Cyrillic: 12 bytes
    assert estimate_tokens("नमस्ते") == 6  # Devanagari: three bytes a character
    assert estimate_tokens("ok привет") == 5  # 3 ASCII characters (0.75) and 12 bytes (4)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"session": "bad id!"}, "session id 'bad id!' is not a valid id"),
        ({"session": ""}, "session id '' is not a valid id"),
        ({"activation": "act 1"}, "activation id 'act 1' is not a valid id"),
        ({"scheduling": {"two words": 1}}, "scheduling name 'two words'"),
        ({"bindings": {"a)b": "x"}}, "binding name 'a)b'"),
        ({"authority": {"exec": "sometimes"}}, "the authority of exec must be allow, ask or deny"),
        ({"authority": {"(exec": "allow"}}, "authority tool name '(exec'"),
    ],
)
def test_what_the_encoding_shows_bare_must_be_an_id(
    ctx: morphz.Context, options: dict[str, object], says: str
) -> None:
    """Was: ``--session "bad id!"`` rendered ``(session bad id!)`` into the kernel."""
    with pytest.raises(morphz.InputError, match=re.escape(says)):
        ctx.encode(**options)


def test_the_deepest_body_a_transaction_accepts_gives_an_encoding_that_reads_back(
    ctx: morphz.Context,
) -> None:
    """A body sits 2 lists deeper in an encoding than in its transaction: a transaction may
    nest a body's lists at most MAX_BODY_DEPTH deep, so every encoding (and increment) of an
    accepted state reads back with the project's reader."""
    from morphz.errors import InputError, ValidationError
    from morphz.txlang.sexpr import MAX_DEPTH
    from morphz.txlang.validate import MAX_BODY_DEPTH

    def body(depth: int) -> str:
        return "(a " * depth + "x" + ")" * depth

    with pytest.raises(ValidationError, match=f"deeper than {MAX_BODY_DEPTH} levels"):
        tx(ctx, f"(create deep {body(MAX_BODY_DEPTH + 1)})")
    for op in ("create deep", "derive cited (from deep)"):
        tx(ctx, f"({op} {body(MAX_BODY_DEPTH)})")
    read_one(ctx.encode().text)
    with pytest.raises(InputError, match=f"deeper than {MAX_DEPTH - 2} levels"):
        ctx.encode(capabilities=body(MAX_DEPTH - 1))
    read_one(ctx.encode(capabilities=body(MAX_DEPTH - 2)).text)
