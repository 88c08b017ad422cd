"""A ceiling guessed from a refusal that stated no numbers (a quarter less) does not fail an
activation whose smallest request is above the guess but below every request refused: that
request is tried once (morphz.runtime.refusals)."""

from __future__ import annotations

from morphz.runtime.refusals import Refusals


def test_a_guessed_ceiling_lets_a_smaller_request_be_tried_once() -> None:
    refusals = Refusals()
    refusals.learn(4_000, "too long", False, {})
    assert refusals.guessed and refusals.ceiling == 3_000
    assert not refusals.try_smallest(2_900)  # below the ceiling: it fits, nothing to try
    assert not refusals.try_smallest(4_000)  # not below what was refused
    assert refusals.try_smallest(3_400)
    assert refusals.ceiling == 3_400
    assert refusals.measure(3_420, 10_000, lambda: 3_400) == (3_400, 3_400)  # the ceiling binds
    refusals.learn(3_400, "too long", False, {})  # refused too: nothing smaller is left
    assert refusals.ceiling == 2_550 and refusals.smallest == 3_400
    assert not refusals.try_smallest(3_400)


def test_a_ceiling_the_provider_stated_is_no_guess() -> None:
    refusals = Refusals()
    stated = "prompt is too long: 4000 tokens > 3000 maximum"
    refusals.learn(4_000, stated, False, {})
    assert not refusals.guessed and refusals.ceiling == 3_000
    assert not refusals.try_smallest(3_400)
    refusals.learn(3_000, "too long", False, {})  # a later one without numbers is a guess
    assert refusals.guessed and refusals.try_smallest(2_900)
