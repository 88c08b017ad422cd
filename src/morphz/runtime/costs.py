"""What a request costs beyond its encoding's figure, as the engine budgets a maintenance batch:
each observation shown (its inbox entry and observation-state line), what showing observations
adds to the session directory, and the output a request may ask for."""

from __future__ import annotations

import math
import re

from morphz.capacity import Budget
from morphz.encoding import render
from morphz.encoding.compile import Encoding
from morphz.encoding.sessions import MAX_REFS
from morphz.encoding.tokens import estimate_tokens
from morphz.store.active_base import ActiveObservation

_STATE_LINE = re.compile(r"^ ?\((@e\d+)[ )].*$", re.M)  # an observation-state item, by ref


def observation_costs(encoding: Encoding, factor: float) -> dict[int, int]:
    """What showing each observation of ``encoding`` adds to a request, as the pressure figure
    counts it: its inbox entry and its observation-state line if it has one, each with its
    separator (estimates of parts add up to at least the estimate of the whole)."""
    threshold = encoding.view.preview_threshold
    states = {
        m.group(1): estimate_tokens("\n " + m.group(0).strip())
        for m in _STATE_LINE.finditer(encoding.region("observation-state"))
    }
    costs: dict[int, int] = {}
    for o in encoding.state.observations:
        entry = estimate_tokens("\n " + render.observation(o, threshold))
        costs[o.seq] = math.ceil((entry + states.get(f"@e{o.seq}", 0)) * factor)
    return costs


def directory_allowance(observations: list[ActiveObservation], factor: float) -> int:
    """At most what showing ``observations`` adds to the session directory: each session lists
    the refs of its last shown observations and counts the others."""
    refs: dict[str, list[str]] = {}
    for o in observations:
        refs.setdefault(o.session_id, []).append(f"@e{o.seq}")
    text = "".join(
        f" {' '.join(listed[-MAX_REFS:])} (more-refs {len(listed)})" for listed in refs.values()
    )
    return math.ceil(estimate_tokens(text) * factor)


def output_tokens(most: int, budget: Budget) -> int:
    """The output a request asks for: at most ``most``, and no more than the window leaves
    above the hard limit (the output reserve, or more under a smaller configured limit), so a
    request within the hard limit fits the window with its reply; at least 1, the least a
    provider takes, even when the budget leaves nothing (docs/decisions.md)."""
    return max(1, min(most, budget.window - budget.hard))
