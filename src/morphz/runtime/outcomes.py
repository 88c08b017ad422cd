"""The tool results of a model reply (DESIGN §11): the outcomes of its calls become one batch of
observations, which ticks the clock once when any of them is an external tool's real result
(a call refused before its tool ran, a ``context_tx`` receipt or a ``recall`` result does not
tick). The engine keeps each outcome as its call ends, so an activation interrupted before the
reply's last call still records the results of the calls that ran before its end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from morphz.mind.lifecycle import CLOCK_KINDS
from morphz.observe import Observation
from morphz.runtime.models.base import ToolCall
from morphz.runtime.tools.base import Tool, ToolOutcome, result_kind, valid_text

Ran = tuple[ToolCall, Tool | None, ToolOutcome]  # a call, its tool (None: unknown), its outcome


@dataclass(frozen=True, slots=True)
class ResultBatch:
    """What recording the outcomes of ``Ran`` calls takes."""

    delivered: tuple[str, ...]  # refs of the observations tools appended themselves (recall)
    observations: tuple[Observation, ...]  # the results still to be appended, in call order
    ticked: int | None  # the index of the first observation that ticks; None: no tick


def result_batch(ran: Sequence[Ran]) -> ResultBatch:
    """The observations the outcomes of ``ran`` are recorded as, and which of them ticks."""
    delivered: list[str] = []
    batch: list[Observation] = []
    ticked: int | None = None
    for call, tool, outcome in ran:
        if outcome.delivered is not None:
            delivered.append(outcome.delivered)
            continue
        kind = result_kind(tool)
        if ticked is None and outcome.ran and kind in CLOCK_KINDS:
            ticked = len(batch)
        meta: dict[str, Any] = {"tool": valid_text(call.name), "call": valid_text(call.id)}
        meta["error"] = outcome.error
        batch.append(Observation(kind, valid_text(outcome.text), meta=meta))
    return ResultBatch(tuple(delivered), tuple(batch), ticked)


__all__ = ["Ran", "ResultBatch", "result_batch"]
