"""Review 12, ContextDelta (src/morphz/encoding/delta.py): what a model reads from a seed and its
increments, applying them as the protocol's ``increments`` entry says, against the fresh
encoding of the same moment; and when a rebuild is needed. Each test failed when written."""

from __future__ import annotations

import morphz
from morphz.encoding import DeltaEncoder, EncodeOptions
from morphz.encoding.protocol import PROTOCOL
from morphz.txlang import SList, read
from morphz.txlang.sexpr import quote, to_text

OPTS = EncodeOptions(local_time="2026-08-04T10:00:00+00:00")


def tx(ctx: morphz.Context, ops: str, reason: str | None = None) -> None:
    why = f" (reason {quote(reason)})" if reason is not None else ""
    ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


def _directory(request: str) -> list[str]:
    """The session directory a model reads, in order: the seed's entries, then each
    session-directory-update applied literally (an entry replaces the one of the same session
    where it stands; an entry for a session not listed yet is added; ``(session S)`` withdraws)."""
    forms = read(request)
    seed = forms[0]
    assert isinstance(seed, SList)
    region = next(
        r for r in seed.items[1:] if isinstance(r, SList) and r.head == "session-directory"
    )
    entries: dict[str, str] = {}

    def key(entry: SList) -> str:
        take = 2 if entry.head == "session" else 1
        return " ".join(to_text(x) for x in entry.items[:take])

    for entry in region.items[1:]:
        assert isinstance(entry, SList)
        entries[key(entry)] = to_text(entry)
    for form in forms[1:]:
        assert isinstance(form, SList)
        for item in form.items[1:]:
            if isinstance(item, SList) and item.head == "session-directory-update":
                for entry in item.items[1:]:
                    assert isinstance(entry, SList)
                    if to_text(entry) == f"({key(entry)})":
                        entries.pop(key(entry))
                    else:
                        entries[key(entry)] = to_text(entry)
    return list(entries)


def test_the_protocol_says_where_an_increment_puts_a_session_new_to_the_directory(
    ctx: morphz.Context,
) -> None:
    """The seed's directory lists the request's session first, then the others by activity.
    An increment can only replace an entry by its session or add one, so after increments the
    order a model reads can differ from the fresh encoding's (found by the review: the current
    session's first entry, brought after another session's, reads second). Rebuilding the seed
    for an order each entry's last-active already states would cost a cache miss for nothing;
    instead the protocol says where a new entry goes and that the order is then no longer by
    activity. The entries a model reads are the fresh encoding's."""
    encoder = DeltaEncoder()
    encoder.next(ctx.encode(OPTS))  # an empty context: the directory is empty
    ctx.observe("user_message", "from the ops side", session="ops")
    encoder.next(ctx.encode(OPTS))
    ctx.observe("user_message", "and from the current session")  # session default
    fresh = ctx.encode(OPTS)
    request = encoder.next(fresh)
    assert encoder.last == "increment"
    assert _directory(fresh.text) == ["session default", "session ops"]
    assert _directory(request) == ["session ops", "session default"]  # added at the end
    said = " ".join(PROTOCOL.split())
    assert "a session not listed yet is added at the end, so the directory's order is no" in said


def test_a_place_that_leaves_the_mind_order_as_it_was_is_an_increment(
    ctx: morphz.Context,
) -> None:
    """A rebuild is for a change to what the seed shows, or an order increments cannot state.
    A place that moves a frame only past retired frames (``(place a first)`` when only the
    retired ``x`` is before it) leaves the mind order the seed shows as it was, so the next
    request is the previous one plus an increment (with the kernel's new mind version). The
    encoder once compared the frames' float sort keys, which a place always changes, and
    rebuilt the whole seed (``seed-changed``): a full cache miss for nothing. (A place that
    moves nothing at all is refused since review 17b.)"""
    ctx.set_window(0)  # a retire retires at once
    tx(ctx, "(create x (x 0)) (create a (x 1)) (create b (x 2))")
    tx(ctx, "(retire x)", reason="done")
    encoder = DeltaEncoder()
    first = encoder.next(ctx.encode(OPTS))
    tx(ctx, "(place a first)")
    fresh = ctx.encode(OPTS)
    assert fresh.region("mind") in first  # the mind region is byte-identical
    second = encoder.next(fresh)
    assert encoder.last == "increment", encoder.last
    assert second.startswith(first)
