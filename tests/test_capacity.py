"""Capacity (DESIGN §10): budgets, pressure levels at their thresholds, the stored per-context
budget, and the maintenance batch selector."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import morphz
from morphz.capacity import Batch, Budget, Item, pressure, select_batch

# ------------------------------------------------------------------ budgets and levels


def test_default_budget() -> None:
    budget = Budget()
    assert budget.hard == 128_000 - 8_000
    assert budget.critical == budget.hard - 4_000
    assert budget.warning == int(budget.hard * 0.75)
    assert budget.notice == int(budget.hard * 0.5)


@pytest.mark.parametrize(
    ("budget", "hard"),
    [
        (Budget(window=10_000, output_reserve=1_000, reserve=500), 9_000),
        (Budget(window=10_000, output_reserve=1_000, reserve=500, configured=6_000), 6_000),
        (Budget(window=10_000, output_reserve=1_000, reserve=500, configured=9_000), 9_000),
        (Budget(window=10_000, output_reserve=1_000, reserve=500, configured=50_000), 9_000),
        (Budget(window=10_000, output_reserve=0, reserve=0), 10_000),
    ],
)
def test_hard_limit_is_the_configured_budget_within_the_window(budget: Budget, hard: int) -> None:
    assert budget.hard == hard
    assert budget.critical == hard - budget.reserve


BUDGETS = [
    Budget(window=10_000, output_reserve=1_000, reserve=500),
    Budget(window=10_000, output_reserve=1_000, reserve=500, configured=4_001),
    Budget(window=200_000, output_reserve=16_000, notice_ratio=0.3, warning_ratio=0.9),
    Budget(window=1_000, output_reserve=100, reserve=50, notice_ratio=0.25, warning_ratio=0.5),
]


@pytest.mark.parametrize("budget", BUDGETS)
def test_levels_change_exactly_at_their_thresholds(budget: Budget) -> None:
    notice = int(budget.hard * budget.notice_ratio)
    warning = int(budget.hard * budget.warning_ratio)
    critical = budget.hard - budget.reserve
    assert notice < warning < critical  # these budgets keep the levels apart
    assert (budget.notice, budget.warning, budget.critical) == (notice, warning, critical)
    assert budget.level(0) == "normal"
    assert budget.level(notice - 1) == "normal"
    assert budget.level(notice) == "notice"
    assert budget.level(warning - 1) == "notice"
    assert budget.level(warning) == "warning"
    assert budget.level(critical - 1) == "warning"
    assert budget.level(critical) == "critical"
    assert budget.level(budget.hard) == "critical"
    assert budget.level(budget.window * 10) == "critical"


def test_levels_collapse_to_critical_when_the_reserve_is_large() -> None:
    budget = Budget(window=1_000, output_reserve=0, reserve=900)
    assert budget.critical == 100
    assert budget.warning <= budget.critical and budget.notice <= budget.warning
    assert budget.level(99) in ("normal", "notice", "warning")
    assert budget.level(100) == "critical"


@pytest.mark.parametrize(
    "fields",
    [
        {"window": 0},
        {"window": -5},
        {"output_reserve": -1},
        {"reserve": -1},
        {"configured": 0},
        {"configured": -100},
        {"window": 1_000, "output_reserve": 600, "reserve": 400},  # nothing left
        {"window": 1_000, "output_reserve": 1_000, "reserve": 0},
        {"configured": 4_000},  # hard limit == maintenance reserve: critical from 0
        {"configured": 100},
        {"notice_ratio": 0.0},
        {"notice_ratio": 0.75, "warning_ratio": 0.75},
        {"notice_ratio": 0.8, "warning_ratio": 0.6},
        {"warning_ratio": 1.0},
    ],
)
def test_invalid_budgets_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(morphz.InputError):
        Budget(**fields)  # type: ignore[arg-type]


def test_budget_round_trips_and_pressure_reports_its_figures() -> None:
    budget = Budget(window=50_000, output_reserve=5_000, configured=30_000, reserve=2_000)
    assert Budget.from_dict(budget.to_dict()) == budget
    level = pressure(budget.warning, "calibrated", budget)
    assert level.level == "warning"
    assert level.to_dict() == {
        "level": "warning",
        "tokens": budget.warning,
        "kind": "calibrated",
        "hard": 30_000,
        "notice": 15_000,
        "warning": 22_500,
        "critical": 28_000,
        "window": 50_000,
    }


# ------------------------------------------------------------------ pressure in the encoding


def _figures(budget: Budget, level: str, tokens: int) -> str:
    return (
        f"(pressure (level {level}) (tokens {tokens}) (figure estimated) (notice {budget.notice}) "
        f"(warning {budget.warning}) (critical {budget.critical}) (hard {budget.hard}))"
    )


def test_kernel_pressure_levels_at_their_thresholds(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "prepare the deployment")
    ctx.commit("(context-tx (base-version 0) (derive plan (from @e1) (step one)))")
    tokens = ctx.encode().tokens  # the measured figure does not depend on the budget
    cases = [
        (Budget(configured=2 * tokens, reserve=0), "notice"),  # notice == tokens
        (Budget(configured=2 * tokens + 2, reserve=0), "normal"),  # notice == tokens + 1
        (Budget(configured=2 * tokens, reserve=0, notice_ratio=0.25, warning_ratio=0.5), "warning"),
        (
            Budget(configured=2 * tokens + 2, reserve=0, notice_ratio=0.25, warning_ratio=0.5),
            "notice",
        ),
        (Budget(configured=tokens + 100, reserve=100), "critical"),  # critical == tokens
        (Budget(configured=tokens + 101, reserve=100), "warning"),  # critical == tokens + 1
    ]
    for budget, level in cases:
        enc = ctx.encode(budget=budget)
        assert enc.tokens == tokens
        assert budget.level(tokens) == level
        assert enc.pressure.level == level and enc.pressure.budget == budget
        assert _figures(budget, level, tokens) in enc.region("kernel")


def test_set_budget_persists_and_encode_uses_it(open_db: Callable[[], morphz.Database]) -> None:
    db = open_db()
    ctx = db.context("context-default", create=True)
    other = db.context("context-other", create=True)
    assert ctx.budget() == Budget()
    ctx.observe("user_message", "hello")
    tokens = ctx.encode().tokens
    budget = Budget(window=32_000, output_reserve=2_000, configured=tokens + 10, reserve=10)
    ctx.set_budget(budget)
    assert ctx.budget() == budget
    assert other.budget() == Budget()  # per context
    db.close()

    reopened = open_db().context("context-default")
    assert reopened.budget() == budget
    enc = reopened.encode()
    assert enc.pressure.budget == budget and enc.pressure.level == "critical"
    assert reopened.status().pressure == enc.pressure.to_dict() | {"model": None}
    assert f"(hard {tokens + 10}))" in enc.region("kernel")
    override = Budget(window=1_000_000, output_reserve=0)
    assert reopened.encode(budget=override).pressure.budget == override
    assert reopened.encode(budget=override).pressure.level == "normal"
    reopened.set_budget(Budget())
    assert reopened.budget() == Budget() and reopened.encode().pressure.level == "normal"


# ------------------------------------------------------------------ maintenance batches


def test_batch_keeps_required_and_protected_then_the_oldest_that_fit() -> None:
    items = [
        Item(1, 100),
        Item(2, 300, protected=True),
        Item(3, 50),
        Item(4, 400),
        Item(5, 60),
        Item(6, 500),  # the current request: required
        Item(7, 20),
    ]
    batch = select_batch(items, fixed_tokens=1_000, limit=2_000, required={6})
    # must: 6 (required) and 2 (protected): 1,800. Then oldest first: 1 (1,900), 3 (1,950);
    # 4 (2,350) and 5 (2,010) do not fit; 7 (1,970) still does.
    assert batch.fits
    assert batch.seqs == (1, 2, 3, 6, 7)
    assert batch.tokens == 1_970
    assert batch.limit == 2_000
    assert batch.reason.startswith("2 ")
    assert batch.to_dict()["refs"] == ["@e1", "@e2", "@e3", "@e6", "@e7"]


def test_batch_prefers_the_oldest_and_a_later_smaller_one_may_still_fit() -> None:
    items = [Item(1, 40), Item(2, 70), Item(3, 30), Item(4, 10), Item(5, 5)]
    batch = select_batch(items, fixed_tokens=0, limit=80, required={5})
    # 5 is required (5); 1 fits (45); 2 does not (115); 3 fits (75); 4 does not (85)
    assert batch.seqs == (1, 3, 5) and batch.tokens == 75 and batch.fits


def test_batch_offers_first_what_it_is_told_then_the_oldest() -> None:
    # the results of the step the agent must act on, when they cannot all be required
    items = [Item(1, 40), Item(2, 30), Item(3, 50), Item(4, 60), Item(5, 20)]
    batch = select_batch(items, fixed_tokens=0, limit=100, required=set(), first=(4, 5, 3, 9, 4))
    # 4 fits (60); 5 fits (80); 3 does not (130); 9 is no item; then the oldest: 1 does not
    # (120), 2 does not (110)
    assert batch.seqs == (4, 5) and batch.tokens == 80
    assert select_batch(items, 0, 100, set()).seqs == (1, 2, 5)  # without: the oldest first


def test_batch_keeps_dependencies_even_when_they_are_the_largest() -> None:
    items = [Item(1, 10), Item(2, 10), Item(3, 900), Item(4, 10), Item(5, 50)]
    batch = select_batch(items, fixed_tokens=0, limit=975, required={3, 5})
    assert batch.seqs == (1, 2, 3, 5)  # 1 and 2 fit (970); 4 would make 980 > 975
    assert batch.tokens == 970


def test_batch_reports_when_even_the_minimum_does_not_fit() -> None:
    items = [Item(1, 10), Item(2, 400, protected=True), Item(3, 700)]
    batch = select_batch(items, fixed_tokens=100, limit=1_000, required={3})
    assert not batch.fits
    assert batch.seqs == (2, 3)
    assert batch.tokens == 1_200 and batch.limit == 1_000
    assert "1200" in batch.reason and "1000" in batch.reason
    assert select_batch([], fixed_tokens=2_000, limit=1_000, required=set()).fits is False
    exact = select_batch(items, fixed_tokens=0, limit=1_100, required={3})
    assert exact.fits and exact.seqs == (2, 3) and exact.tokens == 1_100


def test_batch_refuses_required_observations_that_are_absent() -> None:
    with pytest.raises(morphz.InputError, match="9"):
        select_batch([Item(1, 10), Item(2, 10)], fixed_tokens=0, limit=100, required={2, 9})


ITEMS = st.lists(st.tuples(st.integers(0, 300), st.booleans()), min_size=0, max_size=25).map(
    lambda specs: [
        Item(seq, tokens, protected) for seq, (tokens, protected) in enumerate(specs, start=1)
    ]
)


def _reference(items: list[Item], fixed: int, limit: int, required: set[int]) -> tuple[int, ...]:
    """The rule, stated plainly: required and protected first, then oldest-first greedy."""
    chosen = {i.seq for i in items if i.seq in required or i.protected}
    used = fixed + sum(i.tokens for i in items if i.seq in chosen)
    for item in sorted(items, key=lambda i: i.seq):
        if item.seq not in chosen and used + item.tokens <= limit:
            chosen.add(item.seq)
            used += item.tokens
    return tuple(sorted(chosen))


@settings(max_examples=200, deadline=None)
@given(
    items=ITEMS,
    fixed=st.integers(0, 500),
    limit=st.integers(1, 3_000),
    data=st.data(),
)
def test_batch_selection_is_deterministic_and_order_independent(
    items: list[Item], fixed: int, limit: int, data: st.DataObject
) -> None:
    seqs = [i.seq for i in items]
    required = set(data.draw(st.lists(st.sampled_from(seqs), max_size=3))) if seqs else set()
    batch = select_batch(items, fixed, limit, required)
    assert select_batch(items, fixed, limit, required) == batch
    shuffled = list(items)
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(shuffled)
    assert select_batch(shuffled, fixed, limit, frozenset(required)) == batch
    assert isinstance(batch, Batch)
    must = {i.seq for i in items if i.seq in required or i.protected}
    assert must <= set(batch.seqs)
    assert list(batch.seqs) == sorted(set(batch.seqs))
    sizes = {i.seq: i.tokens for i in items}
    assert batch.tokens == fixed + sum(sizes[s] for s in batch.seqs)
    minimum = fixed + sum(sizes[s] for s in must)
    assert batch.fits == (minimum <= limit)
    if batch.fits:
        assert batch.tokens <= limit
        assert batch.seqs == _reference(items, fixed, limit, required)
        for item in items:  # nothing left out would still fit
            if item.seq not in batch.seqs:
                assert batch.tokens + item.tokens > limit
    else:
        assert set(batch.seqs) == must


def test_a_context_keeps_its_calibration_per_model(ctx: morphz.Context) -> None:
    from morphz.encoding.tokens import Calibration

    assert ctx.calibration("openai:m").kind == "estimated"
    learned = Calibration()
    learned.update(1_000, 1_300)
    ctx.save_calibration("openai:m", learned)
    again = ctx.calibration("openai:m")
    assert (again.factor, again.samples, again.kind) == (1.3, 1, "calibrated")
    assert again.apply(1_000) == 1_300
    assert ctx.calibration("anthropic:other").samples == 0  # per model
    assert ctx.status().version == 0  # a runtime setting: no mind change, no event
    assert [e.kind for e in ctx.events()] == []


@given(
    hard=st.integers(1_000, 2_000_000),
    notice=st.integers(1, 49),
    warning=st.integers(50, 99),
)
@example(hard=200_000, notice=29, warning=58)  # float products 57,999.99... and 115,999.99...
def test_thresholds_are_the_ratios_as_written_times_hard(
    hard: int, notice: int, warning: int
) -> None:
    """notice = floor(notice_ratio x hard) with the ratio read as the decimal written (0.58 x
    200,000 is 116,000, though the float product is 115,999.99...)."""
    budget = Budget(
        window=hard, output_reserve=0, reserve=0,
        notice_ratio=notice / 100, warning_ratio=warning / 100,
    )  # fmt: skip
    assert budget.notice == hard * notice // 100
    assert budget.warning == min(budget.critical, hard * warning // 100)
    assert budget.level(budget.warning - 1) != "warning"
