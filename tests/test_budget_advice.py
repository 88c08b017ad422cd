"""The `budget` refusal's advice when the budget is too small for any frame at all."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz.capacity import Budget

# critical = hard - reserve = 2,000: below a floor of 3,000 tokens with no frame in view
SMALL = Budget(window=2000, output_reserve=0, reserve=0)


def _refusal(
    tmp_path: Path, stored: Budget | None = None, **measures: object
) -> morphz.BudgetError:
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        if stored is not None:
            ctx.set_budget(stored)
        with pytest.raises(morphz.BudgetError) as info:
            ctx.commit('(context-tx (base-version 0) (create note "short"))', **measures)
        assert ctx.version == 0
    return info.value


def test_a_budget_below_the_empty_request_advises_a_larger_budget(tmp_path: Path) -> None:
    """No frame can make room when the request is past critical without any: the refusal says
    so and names the command that raises the stored budget it measured against, not "make
    the frames smaller"."""
    exc = _refusal(tmp_path, stored=SMALL, request_floor=3000)
    text = str(exc)
    assert "even with no frame in view" in text and "about 3000 tokens" in text, text
    assert "`morphz context budget CTX --limit N` or `--window N`" in text, text
    assert "smaller" not in text, text
    assert exc.details["floor"] == 3000 and exc.details["critical"] == 2000


def test_a_caller_s_budget_is_named_as_what_to_raise(tmp_path: Path) -> None:
    """A budget passed with the commit (a runtime's RuntimeConfig.budget) is measured instead
    of the stored one, so raising the stored one would change nothing: the refusal names the
    caller's budget (review 18e)."""
    text = str(_refusal(tmp_path, budget=SMALL, request_floor=3000))
    assert "even with no frame in view" in text, text
    assert "`budget=` passed to commit" in text and "RuntimeConfig.budget" in text, text
    assert "morphz context budget" not in text, text


def test_configured_budget_keys_are_named_as_what_to_raise(tmp_path: Path) -> None:
    """When keys given over the context's budget set its limit, raising the stored budget would
    change nothing: the refusal names the keys instead."""
    exc = _refusal(
        tmp_path, budget=Budget(reserve=0), budget_keys={"configured": 2000}, request_floor=3000
    )
    assert "[budget] keys" in str(exc) and "`limit` in morphz.toml" in str(exc), str(exc)


def test_a_floor_under_critical_still_advises_smaller_frames(tmp_path: Path) -> None:
    """Where frames are what passes critical, the advice stays to make them smaller."""
    big = "x " * 4000
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        with pytest.raises(morphz.BudgetError) as info:
            ctx.commit(
                f'(context-tx (base-version 0) (create note "{big}"))',
                budget=SMALL,
                request_floor=1000,
            )
    assert "Make the frames smaller" in str(info.value)
