"""Cache layouts (morphz.encoding.blocks): where a request is cut into blocks and which block ends
are marked for a provider that caches only at marks (Anthropic); and the block-cache meter that
simulates such a provider."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import morphz
from histories import STEPS, Clock, History, tx
from morphz.encoding import DeltaEncoder, EncodeOptions, PrefixMeter, common_prefix
from morphz.encoding.blocks import CacheLayout, PlainLayouts, encoding_layout
from morphz.encoding.prefix import BlockCacheMeter

OPTS = EncodeOptions(local_time="2026-08-04T10:00:00+00:00")


def cut_at(layout: CacheLayout, text: str) -> list[str]:
    return [piece for piece, _ in layout.blocks(text)]


def marked(layout: CacheLayout, text: str) -> list[str]:
    return [piece for piece, mark in layout.blocks(text) if mark]


def test_cuts_after_the_profile_and_after_every_inbox_item(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "deploy the service")
    ctx.observe("tool_result", 'found "config" at C:\\srv\\app; 部署')  # not ASCII
    ctx.observe("tool_result", "line one\nline two")
    tx(ctx, "(derive plan (from @e1) (step one))")
    encoding = ctx.encode(OPTS)
    layout = encoding_layout(encoding)
    pieces = cut_at(layout, encoding.text)
    assert "".join(pieces) == encoding.text
    assert pieces[0].endswith("(evaluation-profile none)")
    assert pieces[1].startswith("\n(inbox\n (observation @e1 ")
    assert pieces[2].startswith("\n (observation @e2 ") and pieces[2].endswith('部署"))')
    assert pieces[3].startswith("\n (observation @e3 ") and pieces[3].endswith('two"))')
    assert pieces[4].startswith(")\n(observation-state")
    assert len(pieces) == 5
    # the fixed prefix and the prefix the next request extends; not the changing tail
    assert marked(layout, encoding.text) == [pieces[0], pieces[3]]


def test_an_empty_inbox_marks_only_the_fixed_prefix(ctx: morphz.Context) -> None:
    encoding = ctx.encode(OPTS)
    layout = encoding_layout(encoding)
    assert marked(layout, encoding.text) == [cut_at(layout, encoding.text)[0]]
    assert cut_at(layout, encoding.text)[0].endswith("(evaluation-profile none)")


def test_a_layout_refuses_another_text(ctx: morphz.Context) -> None:
    encoding = ctx.encode(OPTS)
    with pytest.raises(ValueError, match="characters"):
        list(encoding_layout(encoding).blocks(encoding.text + " "))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_previous_inbox_end_is_a_cut_of_the_next_request(
    steps: list[tuple[object, ...]],
) -> None:
    """Whatever the history, appending observations leaves the last request's marked inbox end
    a cut of the next request, a few blocks back from its own mark, over the same text."""
    with tempfile.TemporaryDirectory() as folder:
        db = morphz.open(Path(folder) / "morphz.db", now=Clock())
        try:
            ctx = db.context("context-default", create=True)
            history = History(ctx)
            for step in steps:
                history.play(step)
            before = ctx.encode(OPTS)
            old = encoding_layout(before)
            ctx.observe_batch(
                [
                    morphz.Observation("tool_result", "ok"),
                    morphz.Observation("user_message", "部署"),
                ]
            )
            after = ctx.encode(OPTS)
            new = encoding_layout(after)
            assert "".join(cut_at(new, after.text)) == after.text
            end = old.marks[-1]
            if before.state.observations:
                assert end in new.cuts and after.text[:end] == before.text[:end]
                assert new.cuts.index(new.marks[-1]) - new.cuts.index(end) == 2
            assert new.marks[0] == old.marks[0]  # the fixed prefix
        finally:
            db.close()


def test_a_delta_request_is_cut_at_the_seed_and_every_increment(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "deploy the service")
    encoder = DeltaEncoder()
    seed = encoder.next(ctx.encode(OPTS))
    assert encoder.layout.marks[-1] == len(seed)  # a seed marks its end as well
    ctx.observe("tool_result", "ok")
    second = encoder.next(ctx.encode(OPTS))
    tx(ctx, "(create notes (n 1))")
    third = encoder.next(ctx.encode(OPTS))
    assert encoder.increments == 2
    layout = encoder.layout
    pieces = cut_at(layout, third)
    assert "".join(pieces) == third
    assert len(seed) in layout.cuts and len(second) in layout.cuts
    assert pieces[-1] == third[len(second) :]
    # the fixed prefix, the seed's inbox, the previous request's end and this one's
    assert marked(layout, third) == [pieces[0], pieces[1], pieces[-2], pieces[-1]]


def test_a_rebuilt_seed_marks_where_the_previous_seed_inbox_ended(ctx: morphz.Context) -> None:
    """A revision rebuilds the seed after many arrivals; the old inbox end is marked, so a
    provider finds it however many blocks back it is."""
    ctx.observe("user_message", "deploy the service")
    tx(ctx, "(derive plan (from @e1) (step one))")
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(OPTS))
    old_inbox_end = encoder.layout.marks[1]
    for n in range(30):
        ctx.observe("tool_result", f"result {n}")
        encoder.next(ctx.encode(OPTS))
    tx(ctx, "(revise plan (from @e1) (step two))")
    seed = encoder.next(ctx.encode(OPTS))
    assert encoder.rebuilds == 2
    layout = encoder.layout
    assert old_inbox_end in layout.marks
    assert len(layout.marks) == 4  # profile, old inbox end, inbox end, end: the API allows 4
    assert layout.cuts.index(layout.marks[2]) - layout.cuts.index(old_inbox_end) == 30
    assert layout.marks[-1] == len(seed)


def test_a_retirement_leaves_only_the_fixed_prefix_to_anchor(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "deploy the service")
    ctx.observe("tool_result", "ok")
    layouts = PlainLayouts()
    first = ctx.encode(OPTS)
    layouts.next(first)
    tx(ctx, "(retire @e1)", reason="done")
    second = ctx.encode(OPTS)
    layout = layouts.next(second)
    assert layout == encoding_layout(second)  # nothing shared beyond the fixed prefix


# -- the block-cache meter


def test_a_block_cache_finds_prefixes_only_at_marked_cuts() -> None:
    meter = BlockCacheMeter(lookback=3)
    one = CacheLayout(6, (3,), (3, 6))
    assert meter.add("abcdef", one) == 0  # the first request reads nothing
    assert meter.add("abcdef", one) == 6
    # the same text as one block: another entry
    assert meter.add("abcdef", CacheLayout(6, (), (6,))) == 0
    # "abc" was stored at a mark; a request cut at 3 and marked later finds it within lookback
    assert meter.add("abcxyz", CacheLayout(6, (3, 4, 5), (6,))) == 3
    # ... but not beyond it
    assert meter.add("abcuvw!", CacheLayout(7, (3, 4, 5, 6), (7,))) == 0
    assert meter.requests == 5
    assert meter.total == 6 + 6 + 6 + 7
    assert meter.read == 6 + 3
    assert meter.rate == pytest.approx(9 / 25)


def test_block_cache_cost_counts_writes_and_reads() -> None:
    meter = BlockCacheMeter()
    layout = CacheLayout(4, (), (4,))
    meter.add("abcd", layout)
    meter.add("abcd", layout)  # all read
    meter.add("wxyz", layout)  # all written
    assert (meter.read, meter.written, meter.total) == (4, 4, 8)
    assert meter.cost == pytest.approx((0.1 * 4 + 1.25 * 4) / 8)


def test_the_layouts_reuse_what_the_prefix_meter_counts(ctx: morphz.Context) -> None:
    """Over a tool loop with derivations, a revision and a retirement batch, a cache that stores
    only at the layouts' marks reads every request up to its last cut inside the prefix it shares
    with the previous request: all of what the byte meter counts but a part of one block."""
    root = ctx.observe("user_message", "deploy the service").ref
    tx(ctx, f"(derive plan (from {root}) (step one))")
    meters = {
        "plain": (PrefixMeter(), BlockCacheMeter()),
        "delta": (PrefixMeter(), BlockCacheMeter()),
    }
    at_marks = {"plain": BlockCacheMeter(lookback=0), "delta": BlockCacheMeter(lookback=0)}
    layouts, encoder, refs = PlainLayouts(), DeltaEncoder(), []
    previous: dict[str, tuple[str, CacheLayout]] = {}
    for n in range(40):
        encoding = ctx.encode(OPTS)  # all ASCII: characters are bytes
        requests = {
            "plain": (encoding.text, layouts.next(encoding)),
            "delta": (encoder.next(encoding), encoder.layout),
        }
        for name, (text, layout) in requests.items():
            meters[name][0].add(text)
            hit = meters[name][1].add(text, layout)
            found_at_marks = at_marks[name].add(text, layout)
            if name in previous:
                before, stored = previous[name]
                shared = common_prefix(before.encode(), text.encode())
                assert hit == max(c for c in (0, *layout.cuts, layout.size) if c <= shared)
                # what the previous request stored, this one finds at a mark of its own: a
                # provider need not look back (only older entries need it)
                assert found_at_marks >= max(m for m in (0, *stored.marks) if m <= shared)
            previous[name] = (text, layout)
        refs.append(ctx.observe("tool_result", f"result {n} " + "x" * (n * 37 % 400)).ref)
        if n % 7 == 6:
            tx(ctx, f"(derive finding/{n} (from {refs[-1]}) (fact {n}))")
        if n == 25:
            tx(ctx, f"(revise plan (from {root}) (step two))")
        if n == 33:
            tx(ctx, f"(retire {' '.join(refs[:20])})", reason="processed")
    assert encoder.rebuilds >= 3
    for prefix, block in meters.values():
        assert block.total == prefix.total
        assert 0 <= prefix.reused - block.read < 100
    assert meters["delta"][1].rate > meters["plain"][1].rate > 0.5


def test_the_layout_in_bytes_matches_the_utf8_text(ctx: morphz.Context) -> None:
    ctx.observe("tool_result", "部署在杭州")
    ctx.observe("user_message", "ok")
    encoding = ctx.encode(OPTS)
    layout = encoding_layout(encoding)
    data, text = encoding.text.encode(), encoding.text
    in_bytes = layout.to_dict(text)
    assert [data[:b].decode() for b in in_bytes["cuts"]] == [text[:c] for c in layout.cuts]
    assert in_bytes["marks"][-1] > layout.marks[-1]  # three bytes a character before it
