"""What a request costs beyond its encoding's figure, as the engine budgets a maintenance batch:
each observation shown (its inbox entry and observation-state line), what showing observations
adds to the session directory, and the output a request may ask for."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from morphz.capacity import Budget
from morphz.encoding import render
from morphz.encoding.compile import Encoding
from morphz.encoding.sessions import MAX_REFS
from morphz.encoding.tokens import estimate_tokens
from morphz.store.active_base import ActiveObservation

_STATE_LINE = re.compile(r"^ ?\((@e\d+)[ )].*$", re.M)  # an observation-state item, by ref


def observation_costs(encoding: Encoding, factor: float) -> dict[int, int]:
    """What showing each observation of ``encoding`` adds to a request, as the pressure figure
    counts it: its inbox entry and its observation-state line if it has one, each as the region
    shows it (a space before it and a line break after it: the estimate is taken per line, so
    the lines' estimates add up to the region's). Its ref in the session directory is added by
    :func:`with_refs`."""
    threshold = encoding.view.preview_threshold
    states = {
        m.group(1): estimate_tokens(f" {m.group(0).strip()}\n")
        for m in _STATE_LINE.finditer(encoding.region("observation-state"))
    }
    costs: dict[int, int] = {}
    for o in encoding.state.observations:
        entry = estimate_tokens(f" {render.observation(o, threshold)}\n")
        costs[o.seq] = math.ceil((entry + states.get(f"@e{o.seq}", 0)) * factor)
    return costs


def with_refs(
    costs: dict[int, int], observations: Sequence[ActiveObservation], factor: float
) -> dict[int, int]:
    """``costs`` with each observation's ref in the session directory (`` @eN``) added to the
    first MAX_REFS of each session in ``observations``' order (the order a batch considers them):
    the directory lists at most that many refs of a session, and counts the others
    (:func:`directory_allowance`). Which ones it lists are the last shown, of about the same
    length; the compile measures what the batch really costs."""
    listed: dict[str, int] = {}
    out = dict(costs)
    for o in observations:
        if listed.get(o.session_id, 0) < MAX_REFS:
            listed[o.session_id] = listed.get(o.session_id, 0) + 1
            out[o.seq] += math.ceil(estimate_tokens(f" @e{o.seq}") * factor)
    return out


def directory_allowance(observations: list[ActiveObservation], factor: float) -> int:
    """At most what showing ``observations`` adds to the session directory beside their refs
    (which :func:`observation_costs` counts): the count of the refs a session does not list."""
    refs: dict[str, int] = {}
    for o in observations:
        refs[o.session_id] = refs.get(o.session_id, 0) + 1
    text = "".join(f" (more-refs {count})" for count in refs.values() if count > MAX_REFS)
    return math.ceil(estimate_tokens(text) * factor)


def output_tokens(most: int, budget: Budget) -> int:
    """The output a request asks for: at most ``most``, and no more than the window leaves
    above the hard limit (the output reserve, or more under a smaller configured limit), so a
    request within the hard limit fits the window with its reply; at least 1, the least a
    provider takes, even when the budget leaves nothing (docs/decisions.md)."""
    return max(1, min(most, budget.window - budget.hard))
