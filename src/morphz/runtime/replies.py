"""How the engine tells a response that did not end as the model meant it to: the note an
activation's reason carries (a reply cut at the output limit, or stopped by the provider: a
refusal, a content filter), and the outcome of the tool call the output limit can have cut (the
last one of a cut response), which is not run."""

from __future__ import annotations

from morphz.runtime.models.base import ModelResponse, ToolCall
from morphz.runtime.tools.base import ToolOutcome


def stop_note(response: ModelResponse) -> str | None:
    """What the activation's reason says of how ``response`` ended; None for a normal end."""
    if response.cut:
        return "the reply was cut at the model's output limit"
    if response.stop == "refusal":
        return "the model declined to go on (stop reason: refusal): its reply may be partial"
    if response.stop:
        return f"the provider stopped the reply ({response.stop}): it may be partial"
    return None


def cut_call(call: ToolCall) -> ToolOutcome:
    """The result of the last call of a response the output limit cut: it may be incomplete (a
    provider sends the parameters written so far, or arguments that are not whole JSON), so it
    is not run, and the agent is told why and what to do instead."""
    return ToolOutcome(
        f"{call.name} was not run: the model's output limit cut this call while it was being "
        "written, so its arguments may be incomplete. Make the call again, shorter (for "
        "example, write a long file in smaller pieces).",
        error=True,
        ran=False,
    )
