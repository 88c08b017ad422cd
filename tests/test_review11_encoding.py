"""Review of the Context Encoding (issue 4), eleventh session: each test fails on the code as
reviewed and states the behaviour expected once fixed."""

from __future__ import annotations

import pytest

import morphz


def _two_sessions(ctx: morphz.Context) -> None:
    """Session ``old`` last active on 2026-08-04 at 09:00 UTC, then ``default`` (the fixture's
    clock: one second per event)."""
    ctx.observe("user_message", "long ago", session="old")
    ctx.observe("user_message", "also long ago", session="default")


@pytest.mark.parametrize("now", ["2026-08-06T09:00:00", "yesterday", "2026-13-45T00:00:00Z"])
def test_a_now_that_is_not_a_time_with_an_offset_is_an_input_error(
    ctx: morphz.Context, now: str
) -> None:
    """``EncodeOptions.now`` is "the ISO time the session window is measured from". A string
    that is not an ISO time with a UTC offset (a naive ISO time, free text, an impossible date)
    must be refused with an InputError naming ``now``, as the same naive time given as a
    datetime is. Today it is silently ignored and the window is measured from the context's
    last activity instead: session ``old``, two days older than the ``now`` meant, is listed
    in full instead of being excluded as inactive beyond the 24-hour window."""
    _two_sessions(ctx)
    with pytest.raises(morphz.InputError, match="now"):
        ctx.encode(local_time="x", now=now)
