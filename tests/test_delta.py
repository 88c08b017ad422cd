"""ContextDelta (DESIGN §9): the previous request unchanged plus an increment, or a rebuilt seed
when something already sent changed; and the prefix-reuse meter."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import morphz
from histories import STEP, Clock, History
from morphz.capacity import Budget
from morphz.encoding import DeltaEncoder, EncodeOptions, Encoding, PrefixMeter, common_prefix
from morphz.encoding.compile import PRESSURE_SLACK, pressure_figures
from morphz.encoding.protocol import PROTOCOL
from morphz.encoding.tokens import count
from morphz.txlang import SList, read, read_one
from morphz.txlang.sexpr import quote, to_text

OPTS = EncodeOptions(local_time="2026-08-04T10:00:00+00:00")


def tx(ctx: morphz.Context, ops: str, reason: str | None = None) -> None:
    why = f" (reason {quote(reason)})" if reason is not None else ""
    ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


def seeded(ctx: morphz.Context, opts: EncodeOptions = OPTS) -> tuple[DeltaEncoder, str]:
    """A context with content in the seed, and the encoder that sent it."""
    ctx.observe("user_message", "deploy the service")
    ctx.observe("tool_result", 'found "config" at C:\\srv\\app; 部署')
    tx(ctx, "(derive plan (from @e1) (step one)) (create notes (n 1)) (checkpoint start)")
    encoder = DeltaEncoder()
    first = encoder.next(ctx.encode(opts))
    assert first == ctx.encode(opts).text
    assert (encoder.rebuilds, encoder.increments, encoder.last) == (1, 0, "first")
    return encoder, first


def increment(previous: str, request: str) -> SList:
    """The increment appended to ``previous``: one (context-delta ...) and one (evaluate)."""
    assert request.startswith(previous)
    forms = read(request[len(previous) :])
    assert len(forms) == 2
    delta, evaluate = forms
    assert isinstance(delta, SList) and delta.head == "context-delta"
    assert isinstance(evaluate, SList) and evaluate.head == "evaluate"
    return delta


def heads(delta: SList) -> list[str | None]:
    return [item.head for item in delta.items[1:] if isinstance(item, SList)]


def test_new_observations_and_frames_are_sent_as_increments(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)

    ctx.observe("tool_result", 'output with "quotes" and \\ and\nnewlines')
    second = encoder.next(ctx.encode(OPTS))
    delta = increment(first, second)
    assert heads(delta) == ["arrived", "session-directory-update", "kernel-update"]
    assert "(arrived (observation @e4 (kind tool_result)" in second[len(first) :]

    tx(ctx, "(derive result (from @e4) (ok yes)) (relate result supports plan)")
    third = encoder.next(ctx.encode(OPTS))
    delta = increment(second, third)
    assert "derived" in heads(delta) and "related" in heads(delta)
    assert "(derived (frame result (revision 1) (sources @e4)" in third
    assert "(observation-state-update (@e4 (cited-by 1)))" in third[len(second) :]
    assert "(related (result supports plan))" in third[len(second) :]

    tx(ctx, "(protect @e1) (protect notes) (checkpoint later)")  # mutable attributes only
    fourth = encoder.next(ctx.encode(OPTS))
    delta = increment(third, fourth)
    added = fourth[len(third) :]
    assert "(updated (frame notes (revision 1) (protected)" in added
    assert "(@e1 (protected) (cited-by 1))" in added
    assert "(checkpointed later)" in added

    ctx.observe("recall_result", "nothing ticks")
    ctx.observe("user_message", "and a new question")
    fifth = encoder.next(ctx.encode(OPTS))
    delta = increment(fourth, fifth)
    assert heads(delta).count("arrived") == 2
    assert (encoder.rebuilds, encoder.increments) == (1, 4)
    assert encoder.text == fifth
    for request in (second, third, fourth, fifth):
        forms = read(request)
        assert isinstance(forms[0], SList) and forms[0].head == "context-encoding"


def test_an_unchanged_state_updates_only_the_pressure_of_the_longer_request(
    ctx: morphz.Context,
) -> None:
    """Nothing changed but the request grew by an increment: the kernel's pressure is that of
    the request sent, seed and increment, not of the fresh encoding."""
    encoder, first = seeded(ctx)
    fresh = ctx.encode(OPTS)
    second = encoder.next(fresh)
    sent = encoder.pressure
    assert sent is not None and sent.tokens > fresh.pressure.tokens
    figures = f"(pressure {pressure_figures(sent)})"
    assert second[len(first) :] == f"\n(context-delta\n (kernel-update {figures}))\n(evaluate)\n"
    assert count([second]).tokens <= sent.tokens <= count([second]).tokens + PRESSURE_SLACK


def test_increments_sent_as_messages_count_their_framing(ctx: morphz.Context) -> None:
    """Each increment that travels as a message of its own costs a provider's message framing:
    the pressure of the request sent counts it, per increment."""
    plain, framed = DeltaEncoder(), DeltaEncoder(message_tokens=4)
    for n in range(3):
        ctx.observe("tool_result", f"result {n}")
        encoding = ctx.encode(OPTS)
        plain.next(encoding)
        framed.next(encoding)
        assert plain.pressure is not None and framed.pressure is not None
        assert framed.pressure.tokens - plain.pressure.tokens == 4 * n  # n increments so far


def _rebuilt(
    encoder: DeltaEncoder, ctx: morphz.Context, previous: str, reason: str = "seed-changed"
) -> str:
    fresh = ctx.encode(OPTS)
    request = encoder.next(fresh)
    assert request == fresh.text and encoder.last == reason
    assert not request.startswith(previous)
    assert "\n(context-delta" not in request
    return request


def test_retiring_a_seed_observation_rebuilds(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(retire @e2)", reason="read it")
    _rebuilt(encoder, ctx, first)
    assert encoder.rebuilds == 2


def test_retiring_an_observation_sent_in_an_increment_is_an_increment(
    ctx: morphz.Context,
) -> None:
    """Read, derive, retire the raw result: the usual step of an agent, all within one seed."""
    encoder, first = seeded(ctx)
    ctx.observe("tool_result", "later")
    second = encoder.next(ctx.encode(OPTS))
    increment(first, second)
    tx(ctx, "(derive fact (from @e4) (later yes)) (retire @e4)", reason="read it")
    third = encoder.next(ctx.encode(OPTS))
    delta = increment(second, third)
    assert heads(delta)[:2] == ["derived", "retired"]
    assert "\n (retired @e4)\n" in third[len(second) :]
    assert (encoder.rebuilds, encoder.increments, encoder.last) == (1, 2, "increment")


def test_retiring_an_observation_sent_in_an_increment_with_a_seed_one_rebuilds(
    ctx: morphz.Context,
) -> None:
    encoder, _ = seeded(ctx)
    ctx.observe("tool_result", "later")
    second = encoder.next(ctx.encode(OPTS))
    tx(ctx, "(retire @e4 @e2)", reason="read them")
    third = _rebuilt(encoder, ctx, second)
    assert "later" not in third
    ctx.observe("user_message", "after the rebuild")
    fourth = encoder.next(ctx.encode(OPTS))
    increment(third, fourth)  # increments continue from the new seed
    assert (encoder.rebuilds, encoder.increments) == (2, 2)


def _level_between(level: str, low: int, high: int) -> EncodeOptions:
    """Options whose budget puts ``level`` (notice or critical) halfway between ``low`` and
    ``high`` tokens."""
    middle, reserve = (low + high) // 2, 500
    if level == "critical":
        budget = Budget(  # notice and warning too near critical to come between them
            window=64_000, output_reserve=0, configured=middle + reserve, reserve=reserve,
            notice_ratio=0.98, warning_ratio=0.99,
        )  # fmt: skip
    else:
        budget = Budget(window=64_000, output_reserve=0, notice_ratio=(middle + 0.5) / 64_000)
    assert getattr(budget, level) == middle
    return replace(OPTS, budget=budget)


@pytest.mark.parametrize("level", ["notice", "critical"])
def test_an_increment_that_would_raise_the_pressure_level_starts_a_new_seed(
    ctx: morphz.Context, level: str
) -> None:
    """An increment keeps what it brought after it leaves the view, so the request outgrows the
    fresh encoding: where the next increment would put the request at a level the fresh
    encoding is not at (notice, or critical), the fresh encoding is sent as a new seed instead.
    With the level above the request, the same step is an increment."""
    for level_between_them in (False, True):
        ctx = ctx.db.context(f"{level}-{level_between_them}", create=True)
        encoder, first = seeded(ctx)
        ctx.observe("tool_result", "a long listing line\n" * 300)
        second = encoder.next(ctx.encode(OPTS))
        increment(first, second)
        tx(ctx, "(derive listing (from @e4) (lines 300)) (retire @e4)", reason="read it")
        fresh = ctx.encode(OPTS)
        assert encoder.pressure is not None
        sent = encoder.pressure.tokens
        assert sent - fresh.tokens > 1_000  # the listing is still in the request
        high = sent if level_between_them else sent + 2_000
        fresh = ctx.encode(_level_between(level, fresh.tokens, high))
        assert fresh.pressure.level == "normal"
        third = encoder.next(fresh)
        if level_between_them:
            assert third == fresh.text
            assert (encoder.rebuilds, encoder.increments) == (2, 1)
            assert encoder.last == ("critical" if level == "critical" else "pressure-level")
        else:
            increment(second, third)
            assert (encoder.rebuilds, encoder.increments) == (1, 2)
        assert encoder.pressure is not None and encoder.pressure.level == "normal"


def test_at_critical_pressure_every_request_is_a_new_seed(ctx: morphz.Context) -> None:
    """Increments on a request already at critical pressure would pile up past the hard limit:
    while the fresh encoding is critical, each request is the fresh encoding."""
    encoder, first = seeded(ctx)
    tight = replace(OPTS, budget=Budget(window=2_000, output_reserve=0, reserve=500))
    previous = first
    for step in range(2):
        ctx.observe("tool_result", f"result {step}")
        fresh = ctx.encode(tight)
        assert fresh.pressure.level == "critical"
        request = encoder.next(fresh)
        assert request == fresh.text and not request.startswith(previous)
        previous = request
    assert (encoder.rebuilds, encoder.increments, encoder.last) == (3, 0, "critical")


def test_revising_a_seed_frame_rebuilds(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(revise plan (step two))")
    second = _rebuilt(encoder, ctx, first)
    assert "(frame plan (revision 2)" in second


def test_retiring_a_seed_frame_rebuilds(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(retire notes)", reason="not needed")
    second = _rebuilt(encoder, ctx, first)
    assert "(frame notes (revision 1) (lifecycle retiring) (remaining-ticks 8)" in second


def test_a_frame_sent_in_an_increment_is_restated_when_revised_or_retired(
    ctx: morphz.Context,
) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(create extra (e 1))")
    second = encoder.next(ctx.encode(OPTS))
    increment(first, second)
    tx(ctx, "(revise extra (e 2))")
    third = encoder.next(ctx.encode(OPTS))
    increment(second, third)
    assert "(updated (frame extra (revision 2) (body (e 2))))" in third[len(second) :]
    tx(ctx, "(retire extra)", reason="done")
    fourth = encoder.next(ctx.encode(OPTS))
    increment(third, fourth)
    assert "(updated (frame extra (revision 2) (lifecycle retiring)" in fourth[len(third) :]
    for n in range(8):  # the organizing window passes: the frame leaves the view
        ctx.observe("user_message", f"tick {n}")
    fifth = encoder.next(ctx.encode(OPTS))
    increment(fourth, fifth)
    assert "\n (retired extra)\n" in fifth[len(fourth) :]
    assert "(frame extra" not in ctx.encode(OPTS).text
    assert (encoder.rebuilds, encoder.increments) == (1, 4)


def test_moving_a_frame_sent_in_an_increment_rebuilds(ctx: morphz.Context) -> None:
    """An increment cannot say where in the mind order a frame now stands."""
    encoder, _ = seeded(ctx)
    tx(ctx, "(create extra (e 1))")
    second = encoder.next(ctx.encode(OPTS))
    tx(ctx, "(place extra first)")
    _rebuilt(encoder, ctx, second)


def test_a_frame_that_comes_back_before_frames_sent_rebuilds(ctx: morphz.Context) -> None:
    """Increments append new frames at the end of the mind: a frame placed first, or restored
    to its old place, cannot be stated by one."""
    encoder, first = seeded(ctx)
    tx(ctx, "(create early (e 1)) (place early first)")
    second = _rebuilt(encoder, ctx, first)
    assert second.index("(frame early") < second.index("(frame plan")
    tx(ctx, "(create late (l 1))")  # appended: after every frame sent
    third = encoder.next(ctx.encode(OPTS))
    increment(second, third)
    tx(ctx, "(retire late)", reason="done")
    fourth = encoder.next(ctx.encode(OPTS))
    increment(third, fourth)  # an increment frame retiring: restated
    for n in range(8):
        ctx.observe("user_message", f"tick {n}")
    fifth = encoder.next(ctx.encode(OPTS))
    assert "\n (retired late)\n" in fifth[len(fourth) :]
    tx(ctx, "(create later (l 2))")
    sixth = encoder.next(ctx.encode(OPTS))
    increment(fifth, sixth)
    tx(ctx, "(restore late)")  # back at its old place, before `later`
    seventh = _rebuilt(encoder, ctx, sixth)
    assert seventh.index("(frame late ") < seventh.index("(frame later ")


def test_an_observation_restored_before_those_sent_rebuilds(ctx: morphz.Context) -> None:
    """It comes back at its place in sequence order, which no increment can state."""
    ctx.observe("tool_result", "old result")  # @e1
    tx(ctx, "(retire @e1)", reason="read it")
    encoder = DeltaEncoder()
    first = encoder.next(ctx.encode(OPTS))
    ctx.observe("user_message", "newer")  # @e3
    second = encoder.next(ctx.encode(OPTS))
    increment(first, second)
    tx(ctx, "(restore @e1)")
    third = _rebuilt(encoder, ctx, second)
    assert third.index("(observation @e1 ") < third.index("(observation @e3 ")


def test_a_rollback_of_increment_content_is_an_increment(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(create draft (d 1)) (relate draft about plan) (checkpoint mid)")
    second = encoder.next(ctx.encode(OPTS))
    increment(first, second)
    tx(ctx, "(rollback start)", reason="start over")
    third = encoder.next(ctx.encode(OPTS))
    added = third[len(second) :]
    increment(second, third)
    assert "\n (retired draft)\n (unrelated (draft about plan))\n" in added
    assert "(frame draft" not in ctx.encode(OPTS).text
    tx(ctx, "(drop-checkpoint mid)", reason="not needed")
    fourth = encoder.next(ctx.encode(OPTS))
    assert "\n (dropped-checkpoints mid)\n" in fourth[len(third) :]
    assert (encoder.rebuilds, encoder.increments) == (1, 3)


def test_a_rollback_of_seed_content_rebuilds(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "go")
    tx(ctx, "(create plan (p 1)) (checkpoint cp)")
    tx(ctx, "(revise plan (p 2)) (create more (m 1))")
    encoder = DeltaEncoder()
    first = encoder.next(ctx.encode(OPTS))
    tx(ctx, "(rollback cp)", reason="undo")
    second = _rebuilt(encoder, ctx, first)
    assert "(frame plan (revision 1)" in second and "(frame more" not in second


def test_moving_unrelating_or_dropping_seed_content_rebuilds(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    tx(ctx, "(place notes first)")  # a seed frame moved
    second = _rebuilt(encoder, ctx, first)
    tx(ctx, "(relate notes about plan)")
    third = encoder.next(ctx.encode(OPTS))
    increment(second, third)
    tx(ctx, "(unrelate notes about plan)", reason="wrong")  # an edge an increment brought
    fourth = encoder.next(ctx.encode(OPTS))
    increment(third, fourth)
    assert "\n (unrelated (notes about plan))\n" in fourth[len(third) :]
    tx(ctx, "(relate notes about plan) (drop-checkpoint start)", reason="old")  # a seed one
    fifth = _rebuilt(encoder, ctx, fourth)
    assert "(notes about plan)" in fifth
    tx(ctx, "(unrelate notes about plan)", reason="wrong again")  # now a seed edge
    _rebuilt(encoder, ctx, fifth)
    assert (encoder.rebuilds, encoder.increments) == (4, 2)


def test_a_new_preview_threshold_rebuilds(ctx: morphz.Context) -> None:
    """The seed's inbox showed the observations under the old threshold."""
    encoder, first = seeded(ctx)
    ctx.observe("tool_result", "x" * 300)
    second = encoder.next(ctx.encode(OPTS))
    increment(first, second)
    ctx.set_view(morphz.encoding.View(preview_threshold=100))
    third = _rebuilt(encoder, ctx, second, reason="preview-threshold")
    assert "(preview (total-chars 300)" in third
    fourth = encoder.next(ctx.encode(OPTS))
    increment(third, fourth)  # the same threshold: increments again


def test_increments_preview_large_observations_like_the_inbox(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    large = "HEAD " + "0123456789" * 2_000 + " TAIL"  # above the default threshold
    ctx.observe("tool_result", large)
    second = encoder.next(ctx.encode(OPTS))
    added = second[len(first) :]
    assert f"(preview (total-chars {len(large)})" in added
    assert "@e4 with recall" in added
    assert large not in second


def test_increments_respect_the_configured_preview_threshold(ctx: morphz.Context) -> None:
    opts = EncodeOptions(local_time="2026-08-04T10:00:00+00:00", preview_threshold=500)
    encoder, first = seeded(ctx, opts)
    text = "HEAD " + "abcdefghij" * 400 + " TAIL"  # 4,010 characters: above 500
    ctx.observe("tool_result", text)
    fresh = ctx.encode(opts)
    assert "(observation @e4 " in fresh.region("inbox")
    assert "(preview (total-chars 4010)" in fresh.region("inbox")  # the inbox previews it
    second = encoder.next(fresh)
    added = second[len(first) :]
    assert "(preview (total-chars 4010)" in added  # so must the increment
    assert text not in added


# ------------------------------------------------------------------ prefix-reuse meter


def test_common_prefix_on_hand_made_strings() -> None:
    assert common_prefix(b"", b"") == 0
    assert common_prefix(b"", b"abc") == 0
    assert common_prefix(b"abc", b"abc") == 3
    assert common_prefix(b"abc", b"abd") == 2
    assert common_prefix(b"abc", b"abcdef") == 3
    assert common_prefix(b"abcdef", b"abc") == 3
    assert common_prefix(b"xbc", b"abc") == 0
    assert common_prefix("部署A".encode(), "部署B".encode()) == 6  # two 3-byte characters
    assert common_prefix("部署".encode(), "部署在".encode()) == 6
    assert common_prefix("é".encode(), b"e") == 0
    assert common_prefix("(inbox 😀)".encode(), "(inbox 😀 x)".encode()) == 11


@settings(max_examples=300, deadline=None)
@given(shared=st.binary(max_size=50), a=st.binary(max_size=20), b=st.binary(max_size=20))
def test_common_prefix_matches_a_byte_by_byte_scan(shared: bytes, a: bytes, b: bytes) -> None:
    left, right = shared + a, shared + b
    expected = 0
    while expected < min(len(left), len(right)) and left[expected] == right[expected]:
        expected += 1
    assert common_prefix(left, right) == expected
    assert common_prefix(right, left) == expected


@given(
    size=st.integers(0, 3 * 4096 + 7),
    extra=st.integers(0, 5000),
    differ=st.booleans(),
)
def test_common_prefix_across_chunk_boundaries(size: int, extra: int, differ: bool) -> None:
    """Common prefixes shorter than, equal to and longer than the 4,096-byte chunks it skips."""
    shared = bytes(i * 7 % 251 for i in range(size))
    tail = bytes(i % 13 for i in range(extra))
    other = (bytes([tail[0] ^ 1]) + tail[1:]) if differ and tail else tail[: extra // 2]
    left, right = shared + tail, shared + other
    expected = 0
    while expected < min(len(left), len(right)) and left[expected] == right[expected]:
        expected += 1
    assert common_prefix(left, right) == common_prefix(right, left) == expected


def test_prefix_meter_shares_and_aggregate() -> None:
    meter = PrefixMeter(keep_shares=True)
    assert meter.rate == 0.0
    assert meter.add("abc") is None  # the first request is not counted
    assert meter.rate == 0.0 and meter.total == 0
    assert meter.add("abcdef") == 0.5
    assert meter.add("abcdef") == 1.0
    assert meter.add("xyz") == 0.0
    assert meter.requests == 4
    assert meter.shares == [0.5, 1.0, 0.0]
    assert (meter.reused, meter.total) == (3 + 6 + 0, 6 + 6 + 3)
    assert meter.rate == 9 / 15


def test_prefix_meter_keeps_no_shares_unless_asked() -> None:
    meter = PrefixMeter()
    for text in ("abc", "abcdef", "abcdef"):
        meter.add(text)
    assert meter.shares == [] and meter.reused == 9 and meter.requests == 3


def test_prefix_meter_counts_utf8_bytes() -> None:
    meter = PrefixMeter()
    meter.add("(inbox 部署")
    share = meter.add("(inbox 部署 杭州)")
    prefix, whole = len("(inbox 部署".encode()), len("(inbox 部署 杭州)".encode())
    assert share == prefix / whole
    assert (meter.reused, meter.total) == (prefix, whole)


def test_prefix_meter_over_a_delta_run(ctx: morphz.Context) -> None:
    encoder, first = seeded(ctx)
    meter, plain = PrefixMeter(keep_shares=True), PrefixMeter()
    meter.add(first)
    plain.add(first)
    previous = first
    for step in range(4):
        ctx.observe("tool_result", f"result {step}")
        fresh = ctx.encode(OPTS)
        request = encoder.next(fresh)
        assert meter.add(request) == len(previous.encode()) / len(request.encode())
        plain_share = plain.add(fresh.text)
        assert plain_share is not None and plain_share < 1.0
        previous = request
    assert meter.rate > plain.rate
    assert len(meter.shares) == 4
    read_one(first)  # the seed is one complete encoding


# ------------------------------------------------------------------ increments are complete


def _key(item: SList, region: str) -> str:
    take = 2 if item.head == "session" and region == "session-directory" else 1
    return " ".join(to_text(x) for x in item.items[:take])


_UPDATED = {  # an update form -> the region it updates
    "observation-state-update": "observation-state",
    "session-directory-update": "session-directory",
    "kernel-update": "kernel",
    "environment-update": "evaluation-environment",
}


def _keyed(region: SList) -> dict[str, str]:
    out = {}
    for item in region.items[1:]:
        assert isinstance(item, SList) and item.items
        out[_key(item, str(region.head))] = to_text(item)
    return out


def reconstruct(request: str) -> dict[str, object]:
    """The state a model reads from a ContextDelta request: the seed with every increment
    applied in order, following the protocol's (increments ...) rules."""
    forms = read(request)
    seed = forms[0]
    assert isinstance(seed, SList) and seed.head == "context-encoding"
    regions = {r.head: r for r in seed.items[1:] if isinstance(r, SList)}
    inbox = [to_text(o) for o in regions["inbox"].items[1:]]
    mind = regions["mind"].items[1:]
    frames = {
        to_text(f.items[1]): to_text(f) for f in mind if isinstance(f, SList) and f.head == "frame"
    }
    relations = {
        to_text(e)
        for f in mind
        if isinstance(f, SList) and f.head == "relations"
        for e in f.items[1:]
    }
    checkpoints = {
        to_text(c)
        for f in mind
        if isinstance(f, SList) and f.head == "checkpoints"
        for c in f.items[1:]
    }
    state = _keyed(regions["observation-state"])
    sessions = _keyed(regions["session-directory"])
    kernel = _keyed(regions["kernel"])
    environment = _keyed(regions["evaluation-environment"])
    updates = {
        "observation-state-update": state,
        "session-directory-update": sessions,
        "kernel-update": kernel,
        "environment-update": environment,
    }
    for form in forms[1:]:
        assert isinstance(form, SList) and form.head in ("context-delta", "evaluate")
        for item in form.items[1:]:
            assert isinstance(item, SList)
            if item.head == "arrived":
                inbox.append(to_text(item.items[1]))
            elif item.head in ("derived", "updated"):
                frame = item.items[1]
                assert isinstance(frame, SList)
                frames[to_text(frame.items[1])] = to_text(frame)
            elif item.head == "related":
                relations |= {to_text(e) for e in item.items[1:]}
            elif item.head == "checkpointed":
                checkpoints |= {to_text(c) for c in item.items[1:]}
            elif item.head == "retired":  # observations and frames an increment brought
                gone = {to_text(x) for x in item.items[1:]}
                assert gone, "an empty retired form"
                inbox = [o for o in inbox if to_text(read_one(o).items[1]) not in gone]
                frames = {fid: f for fid, f in frames.items() if fid not in gone}
            elif item.head == "unrelated":
                relations -= {to_text(e) for e in item.items[1:]}
            elif item.head == "dropped-checkpoints":
                checkpoints -= {to_text(c) for c in item.items[1:]}
            else:
                assert item.head in updates, item.head
                target, region = updates[item.head], _UPDATED[item.head]
                for entry in item.items[1:]:
                    assert isinstance(entry, SList)
                    target[_key(entry, region)] = to_text(entry)
    # the protocol: only observation-state and session-directory entries are withdrawn by an
    # entry with nothing after its head; in the kernel and the environment it is an empty entry
    state, sessions = [
        {k: v for k, v in entries.items() if v != f"({k})"} for entries in (state, sessions)
    ]
    return {
        "inbox": inbox, "frames": frames, "relations": relations, "checkpoints": checkpoints,
        "observation-state": state, "sessions": sessions, "kernel": kernel,
        "environment": environment,
    }  # fmt: skip


MORE_STEPS = st.lists(
    st.one_of(
        STEP,
        st.tuples(st.just("relate"), st.integers(0, 99), st.integers(0, 99)),
        st.tuples(st.just("checkpoint"), st.integers(0, 99)),
        st.tuples(
            st.sampled_from(("unrelate", "drop", "place", "restore", "restore-observation")),
            st.integers(0, 99),
        ),
        st.tuples(st.just("encode")),
    ),
    max_size=25,
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=MORE_STEPS, window=st.sampled_from((1, 3, 8)), every=st.booleans())
def test_the_seed_with_its_increments_reads_as_the_fresh_encoding(
    steps: list[tuple[object, ...]], window: int, every: bool
) -> None:
    """Whatever happens between requests, a model applying the increments to the seed reads the
    same inbox, frames, relations, checkpoints, observation state, kernel and environment as a
    fresh encoding of the same state shows, but for the pressure, which is the request's; and
    each request extends the previous one unless it is a rebuilt seed. ``every``: a request after
    every step, so that what an increment brought is often changed again."""
    if every:
        steps = [x for step in steps for x in (step, ("encode",))]
    with tempfile.TemporaryDirectory() as folder:
        db = morphz.open(Path(folder) / "morphz.db", now=Clock())
        try:
            ctx = db.context("context-default", create=True, window=window)
            history, encoder, previous = History(ctx), DeltaEncoder(), ""
            for n, step in enumerate([*steps, ("encode",)]):
                if step[0] != "encode":
                    play_more(history, step, n)
                    continue
                fresh = ctx.encode(EncodeOptions(local_time=f"2026-08-04T10:{n:02d}:00+00:00"))
                assert_items_match(fresh)
                rebuilds = encoder.rebuilds
                request = encoder.next(fresh)
                assert request.startswith(previous) or encoder.rebuilds == rebuilds + 1
                read, expected = reconstruct(request), reconstruct(fresh.text)
                # the pressure is that of the request sent (the fresh one's for a seed)
                assert encoder.pressure is not None
                figures = f"(pressure {pressure_figures(encoder.pressure)})"
                kernels = read["kernel"], expected["kernel"]
                assert isinstance(kernels[0], dict) and isinstance(kernels[1], dict)
                assert kernels[0].pop("pressure") == figures
                kernels[1].pop("pressure")
                assert read == expected
                frames_read, frames_expected = read["frames"], expected["frames"]
                assert isinstance(frames_read, dict) and isinstance(frames_expected, dict)
                assert list(frames_read) == list(frames_expected)  # the mind order too
                previous = request
        finally:
            db.close()


def assert_items_match(encoding: Encoding) -> None:
    """The items the compile records for ContextDelta (tracked regions, frames) are the ones its
    text shows, each in canonical form (an increment restates them as they are)."""
    tracked = {"observation-state", "session-directory", "kernel", "evaluation-environment"}
    assert set(encoding.items) == tracked
    for name, items in encoding.items.items():
        region = read_one(encoding.region(name))
        assert isinstance(region, SList)
        assert [to_text(item) for item in region.items[1:]] == list(items)
    mind = read_one(encoding.region("mind"))
    assert isinstance(mind, SList)
    frames = [to_text(f) for f in mind.items[1:] if isinstance(f, SList) and f.head == "frame"]
    assert frames == list(encoding.frame_lines)
    assert len(frames) == len(encoding.state.frames)


def play_more(history: History, step: tuple[object, ...], n: int) -> None:
    ctx = history.ctx
    if step[0] == "relate" and len(history.frames) >= 2:
        a, b = step[1], step[2]
        assert isinstance(a, int) and isinstance(b, int)
        subject = history.frames[a % len(history.frames)]
        obj = history.frames[b % len(history.frames)]
        edges = {(s, r, o) for s, r, o in ctx.mind().relations}
        if subject != obj and (subject, "supports", obj) not in edges:
            visible = {f.id for f in ctx.mind().frames if f.lifecycle != "retired"}
            if subject in visible and obj in visible:
                tx(ctx, f"(relate {subject} supports {obj})")
    elif step[0] == "checkpoint":
        tx(ctx, f"(checkpoint cp/{n})")
    elif step[0] in ("unrelate", "drop"):
        _undo(ctx, str(step[0]), int(str(step[1])))
    elif step[0] in ("place", "restore", "restore-observation"):
        _reorder(history, str(step[0]), int(str(step[1])))
    elif step[0] not in ("relate", "checkpoint"):
        history.play(step)


def _undo(ctx: morphz.Context, op: str, pick: int) -> None:
    """Remove an edge or drop a checkpoint, when there is one to pick. (Rollbacks are tested on
    their own: History's bookkeeping does not follow one.)"""
    mind = ctx.mind()
    if op == "unrelate":
        edges = sorted(mind.relations)
        if edges:
            s, r, o = edges[pick % len(edges)]
            tx(ctx, f"(unrelate {s} {r} {o})", reason="not so")
        return
    names = sorted(name for name, _ in mind.checkpoints)
    if names:
        tx(ctx, f"(drop-checkpoint {names[pick % len(names)]})", reason="undo")


def _reorder(history: History, op: str, pick: int) -> None:
    """Place a visible frame first or last, restore a frame that is retiring or retired, or
    restore a retired observation."""
    ctx = history.ctx
    if op == "restore-observation":
        gone = [
            o.ref for o in ctx.mind(all_observations=True).observations if o.lifecycle == "retired"
        ]
        if gone:
            ref = gone[pick % len(gone)]
            tx(ctx, f"(restore {ref})")
            history.active.append(ref)
        return
    if op == "restore":
        back = sorted(history.retiring)
        if back:
            fid = back[pick % len(back)]
            tx(ctx, f"(restore {fid})")
            history.retiring.discard(fid)
        return
    visible = [f.id for f in ctx.mind().frames if f.lifecycle != "retired"]
    if visible:
        where = "first" if pick % 2 else "last"
        order, fid = ctx.mind().order, visible[pick % len(visible)]
        if order[0 if where == "first" else -1] != fid:  # a place that moves nothing is refused
            tx(ctx, f"(place {fid} {where})")


def test_a_new_evaluation_profile_or_capabilities_rebuilds_the_seed(ctx: morphz.Context) -> None:
    """The evaluation-profile and cognitive-capabilities regions are seed content no increment
    restates: a compile with another profile or capabilities is a new seed."""
    ctx.observe("user_message", "deploy the service")
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(replace(OPTS, profile="role: reviewer")))
    request = encoder.next(ctx.encode(replace(OPTS, profile="role: deployer")))
    assert (encoder.last, "role: deployer" in request) == ("seed-changed", True)
    capable = ctx.encode(replace(OPTS, profile="role: deployer", capabilities="(can deploy)"))
    assert "(cognitive-capabilities (can deploy))" in encoder.next(capable)
    assert encoder.last == "seed-changed"
    encoder.next(ctx.encode(replace(OPTS, profile="role: deployer", capabilities="(can deploy)")))
    assert encoder.last == "increment"


def test_a_rollback_that_changes_a_seed_frame_body_rebuilds_the_seed(ctx: morphz.Context) -> None:
    """After a rollback the same revision number can carry another body: the seed's frame
    changed, so the request is a new seed (not an `updated`, which for a seed frame is kept for
    protection and remaining ticks)."""
    tx(ctx, "(create plan (p a)) (checkpoint r1)")  # plan rev 1, body A
    tx(ctx, "(revise plan (p b)) (checkpoint r2b)")  # rev 2, body B
    tx(ctx, "(rollback r1)", reason="back to A")
    tx(ctx, "(revise plan (p c))")  # rev 2, body C
    encoder = DeltaEncoder()
    assert "(frame plan (revision 2) (body (p c)))" in encoder.next(ctx.encode(OPTS))
    tx(ctx, "(rollback r2b)", reason="back to B")  # rev 2 again, body B
    request = encoder.next(ctx.encode(OPTS))
    assert encoder.last == "seed-changed"
    assert "(frame plan (revision 2) (body (p b)))" in request


def test_an_emptied_kernel_entry_reads_as_empty_not_withdrawn(ctx: morphz.Context) -> None:
    """When the last running activation finishes, the increment restates
    `(running-activations)`: the protocol reads it as the (now empty) entry, and the kernel
    read from the request keeps it, as the fresh encoding does."""
    root = ctx.observe("user_message", "work in ops", session="ops")
    act = ctx.start_activation("ops", root.ref, "work in ops")
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(OPTS))
    ctx.finish_activation(act)
    fresh = ctx.encode(OPTS)
    request = encoder.next(fresh)
    assert encoder.last == "increment"
    assert "(kernel-update (running-activations)" in request
    read_back = reconstruct(request)["kernel"]
    assert isinstance(read_back, dict)
    assert read_back["running-activations"] == "(running-activations)"
    assert "is empty" in PROTOCOL and "(running-activations) is empty" in PROTOCOL.replace(
        "\n", " "
    )
