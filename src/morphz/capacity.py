"""Context capacity: budgets, pressure levels and the maintenance batch selector (DESIGN §10).

hard = min(configured budget, model window - output reserve). Levels: notice from
``notice_ratio`` x hard, warning from ``warning_ratio`` x hard, critical from hard - reserve
(the room maintenance itself needs). When a whole request does not fit the window the runtime
asks :func:`select_batch` for a smaller one: the current request and its causal dependencies,
protected observations, then the oldest unprotected observations that fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

from morphz.checks import check_whole
from morphz.errors import InputError
from morphz.stored_settings import read_setting

Level = Literal["normal", "notice", "warning", "critical"]
LEVELS: tuple[Level, ...] = ("normal", "notice", "warning", "critical")  # in rising order


def _share(tokens: int, ratio: float) -> int:
    """``ratio`` x ``tokens``, rounded down, with the ratio read as the decimal it was written
    as: 0.58 x 200,000 is 116,000 (the float product, 115,999.99..., would truncate to 115,999)."""
    return math.floor(Fraction(repr(ratio)) * tokens)


@dataclass(frozen=True, slots=True)
class Budget:
    window: int = 128_000  # the model's context window, in tokens
    output_reserve: int = 8_000  # tokens kept for the model's reply
    configured: int | None = None  # this context's own budget, if smaller
    reserve: int = 4_000  # room kept below hard for maintenance itself
    notice_ratio: float = 0.5
    warning_ratio: float = 0.75

    def __post_init__(self) -> None:
        check_whole(self.window, "window", 1, unit="tokens")
        check_whole(self.output_reserve, "output_reserve", 0, unit="tokens")
        check_whole(self.reserve, "reserve", 0, unit="tokens")
        if self.configured is not None:
            check_whole(self.configured, "the configured budget", 1, unit="tokens")
        for name in ("notice_ratio", "warning_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"{name} must be a number between 0 and 1, not {value!r}")
        if self.hard <= self.reserve:
            raise InputError(self._no_room())
        if not 0 < self.notice_ratio < self.warning_ratio < 1:
            raise InputError("need 0 < notice_ratio < warning_ratio < 1")

    def _no_room(self) -> str:
        """What to say when the hard limit leaves nothing above the maintenance reserve: what
        binds (the limit, or the window less the output reserve) and what can help, never a
        negative limit."""
        room = self.window - self.output_reserve
        if self.configured is not None and self.configured <= room:
            return (
                f"the limit ({self.configured} tokens) must exceed the maintenance reserve "
                f"({self.reserve}): raise the limit or lower the reserve"
            )
        if room <= 0:
            return (
                f"the window ({self.window} tokens) leaves no room above the output reserve "
                f"({self.output_reserve}): raise the window or lower the output reserve"
            )
        return (
            f"the window ({self.window} tokens) less the output reserve ({self.output_reserve}) "
            f"leaves {room}, which must exceed the maintenance reserve ({self.reserve}): raise "
            "the window, or lower the output reserve or the maintenance reserve"
        )

    @property
    def hard(self) -> int:
        room = self.window - self.output_reserve
        return room if self.configured is None else min(self.configured, room)

    @property
    def critical(self) -> int:
        return max(1, self.hard - self.reserve)

    @property
    def warning(self) -> int:
        return min(self.critical, _share(self.hard, self.warning_ratio))

    @property
    def notice(self) -> int:
        return min(self.warning, _share(self.hard, self.notice_ratio))

    def level(self, tokens: int) -> Level:
        if tokens >= self.critical:
            return "critical"
        if tokens >= self.warning:
            return "warning"
        if tokens >= self.notice:
            return "notice"
        return "normal"

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "output_reserve": self.output_reserve,
            "configured": self.configured,
            "reserve": self.reserve,
            "notice_ratio": self.notice_ratio,
            "warning_ratio": self.warning_ratio,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        return cls(**data)

    @classmethod
    def stored(cls, data: dict[str, Any] | None, context_id: str) -> Budget:
        """Context ``context_id``'s stored budget setting, or the default when it has none (a
        damaged one: StoreError)."""
        return read_setting(context_id, "budget", data, cls.from_dict) or _DEFAULT


_DEFAULT = Budget()  # what a context without a budget setting has
BUDGET_FIELDS = tuple(_DEFAULT.to_dict())  # window, output_reserve, configured, reserve, ...
# the fields that set the hard limit (min(configured, window - output_reserve)): keys given over
# a budget (a configuration's [budget] table) that name one of them are where it is raised
LIMIT_KEYS = frozenset({"configured", "window", "output_reserve"})


def budget_over(
    base: Budget, keys: Mapping[str, int], names: Mapping[str, str] | None = None
) -> Budget:
    """``base`` with the fields ``keys`` names changed (InputError when that is no budget).
    ``names``: how the one who gave the keys spelled them (a configuration's ``[budget] limit``,
    an option's ``--budget``), named so in the error; a field not in it is named as it is."""
    if not check_budget_keys(keys):
        return base
    try:
        return replace(base, **keys)
    except InputError as exc:
        spelled = names or {}
        shown = ", ".join(f"{spelled.get(key, key)} = {value}" for key, value in keys.items())
        verb = "makes" if len(keys) == 1 else "make"
        raise InputError(f"{shown} over the context's budget {verb} no budget: {exc}") from exc


def check_budget_keys(keys: object, what: str = "budget keys") -> Mapping[str, int]:
    """``keys`` when it is a mapping of Budget field names (to the values to set over a
    budget, which the Budget then checks), else an InputError naming ``what`` and the fields."""
    if not isinstance(keys, Mapping):
        raise InputError(
            f"{what} are a mapping of budget fields to values, e.g. {{'configured': "
            f"32000}}, not {type(keys).__name__}: a budget's fields are " + ", ".join(BUDGET_FIELDS)
        )
    unknown = sorted(str(key) for key in keys if key not in BUDGET_FIELDS)
    if unknown:
        raise InputError(
            f"unknown budget field(s) {', '.join(unknown)}: a budget's fields are "
            + ", ".join(BUDGET_FIELDS)
        )
    return keys


# how a configuration file spells the Budget fields its [budget] table sets
CONFIG_NAMES = {
    "window": "[budget] window",
    "output_reserve": "[budget] output_reserve",
    "configured": "[budget] limit",
    "reserve": "[budget] reserve",
}


def resume_below(budget: Budget, floor: int) -> int | None:
    """The figure below which work resumes after maintenance under ``budget``, when even a
    request on an empty context (the protocol, the kernel, the work tools' schemas) takes
    ``floor`` tokens: the warning level; the critical level when the floor is at warning
    already (a small window's fixed part); None when it is at critical too, where maintenance
    could never bring pressure down, so pressure alone never starts it (only a request too
    large for the hard limit does, ended as soon as the request fits again)."""
    for level in (budget.warning, budget.critical):
        if floor < level:
            return level
    return None


@dataclass(frozen=True, slots=True)
class Pressure:
    level: Level
    tokens: int
    kind: str  # estimated, calibrated or exact
    budget: Budget

    def to_dict(self) -> dict[str, Any]:
        b = self.budget
        return {
            "level": self.level,
            "tokens": self.tokens,
            "kind": self.kind,
            "hard": b.hard,
            "notice": b.notice,
            "warning": b.warning,
            "critical": b.critical,
            "window": b.window,
        }


def pressure(tokens: int, kind: str, budget: Budget) -> Pressure:
    return Pressure(budget.level(tokens), tokens, kind, budget)


@dataclass(frozen=True, slots=True)
class Item:
    """An inbox observation as the selector sees it."""

    seq: int
    tokens: int
    protected: bool = False


@dataclass(frozen=True, slots=True)
class Batch:
    """A maintenance request: the observations to show (others keep their state)."""

    fits: bool
    seqs: tuple[int, ...]
    tokens: int  # fixed part plus the chosen observations
    limit: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "refs": [f"@e{s}" for s in self.seqs],
            "tokens": self.tokens,
            "limit": self.limit,
            "reason": self.reason,
        }


def select_batch(
    items: Sequence[Item],
    fixed_tokens: int,
    limit: int,
    required: set[int] | frozenset[int],
    first: Sequence[int] = (),
) -> Batch:
    """Choose the observations of a maintenance request that fits ``limit`` tokens.

    ``fixed_tokens``: everything but the inbox (protocol, mind, kernel, tools, messages).
    ``required``: the current request and its causal dependencies. They and the protected
    observations are always in; then those of ``first`` that are among ``items``, in its order
    (the results of the step the agent must act on, when they cannot all be required), then the
    oldest unprotected ones, in sequence order, each while it fits (a later, smaller one may still
    fit after a larger one did not). Deterministic."""
    must = [i for i in items if i.seq in required or i.protected]
    missing = set(required) - {i.seq for i in items}
    if missing:
        raise InputError(f"required observations are not in the inbox: {sorted(missing)}")
    used = fixed_tokens + sum(i.tokens for i in must)
    if used > limit:
        return Batch(
            False,
            tuple(sorted(i.seq for i in must)),
            used,
            limit,
            f"even the minimum maintenance request needs {used} tokens of {limit}: the current "
            "request, its dependencies and protected content do not fit: raise the budget "
            "(`morphz context budget CTX --limit N` or `--window N`), or unprotect observations "
            "(`unprotect`) or retire some from another session first",
        )
    chosen = {i.seq for i in must}
    by_seq = {i.seq: i for i in items}
    ahead = [by_seq[seq] for seq in dict.fromkeys(first) if seq in by_seq]
    for item in ahead + sorted(items, key=lambda i: i.seq):
        if item.seq in chosen:
            continue
        if used + item.tokens <= limit:
            chosen.add(item.seq)
            used += item.tokens
    left_out = len(items) - len(chosen)
    return Batch(True, tuple(sorted(chosen)), used, limit, f"{left_out} observations left out")
