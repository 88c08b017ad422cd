"""The tool results of a model reply (DESIGN §11): the outcomes of its calls become one batch of
observations, which ticks the clock once when any of them is an external tool's real result
(a call refused before its tool ran, a ``context_tx`` receipt or a ``recall`` result does not
tick). The engine keeps each outcome as its call ends (and stages it in the store:
:mod:`morphz.staging`), so an activation interrupted before the reply's last call still records
the results of the calls that ran before its end, and a killed process's recovery records them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from morphz.mind.lifecycle import CLOCK_KINDS
from morphz.observe import Observation
from morphz.runtime.models.base import ToolCall
from morphz.runtime.tools.base import Tool, ToolOutcome, result_kind, valid_text
from morphz.staging import Outcome


@dataclass(frozen=True, slots=True)
class Ran:
    """A call that ended: its index among its reply's calls, its tool (None: unknown) and its
    outcome."""

    position: int
    call: ToolCall
    tool: Tool | None
    outcome: ToolOutcome


@dataclass(frozen=True, slots=True)
class ResultBatch:
    """What recording the outcomes of ``Ran`` calls takes."""

    delivered: tuple[str, ...]  # refs of the observations tools appended themselves (recall)
    results: tuple[Outcome, ...]  # the results still to be appended, in call order


def result_of(ran: Ran) -> Outcome | None:
    """The observation ``ran``'s outcome is recorded as, and whether it ticks; None when its
    tool appended its result itself (a recall's delivered result)."""
    if ran.outcome.delivered is not None:
        return None
    kind = result_kind(ran.tool)
    ticks = ran.outcome.ran and kind in CLOCK_KINDS
    meta: dict[str, Any] = {"tool": valid_text(ran.call.name), "call": valid_text(ran.call.id)}
    meta["error"] = ran.outcome.error
    return Outcome(ran.position, Observation(kind, valid_text(ran.outcome.text), meta=meta), ticks)


def result_batch(ran: Sequence[Ran]) -> ResultBatch:
    """The observations the outcomes of ``ran`` are recorded as (each with whether it ticks;
    the batch ticks once, shown on the first that does)."""
    delivered: list[str] = []
    results: list[Outcome] = []
    for one in ran:
        result = result_of(one)
        if result is None:
            delivered.append(str(one.outcome.delivered))
        else:
            results.append(result)
    return ResultBatch(tuple(delivered), tuple(results))


__all__ = ["Ran", "ResultBatch", "result_batch", "result_of"]
