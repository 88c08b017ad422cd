"""How the engine tells a response that did not end as the model meant it to: the note an
activation's reason carries (a reply cut at the output limit or at the context window, or
stopped by the provider: a refusal, a content filter), and the outcome of the tool call such a
stop can have cut (the last one of the response), which is not run."""

from __future__ import annotations

from morphz.runtime.models.base import ModelResponse, ToolCall
from morphz.runtime.tools.base import ToolOutcome

WINDOW_STOP = "model_context_window_exceeded"  # Anthropic: the reply filled the context window


def cut_kind(response: ModelResponse) -> str | None:
    """What cut ``response``: ``output-limit``, ``context-window``, or None (not cut)."""
    if not response.cut:
        return None
    return "context-window" if response.stop == WINDOW_STOP else "output-limit"


def stop_note(response: ModelResponse) -> str | None:
    """What the activation's reason says of how ``response`` ended; None for a normal end."""
    kind = cut_kind(response)
    if kind == "output-limit":
        return "the reply was cut at the model's output limit"
    if kind == "context-window":
        return (
            "the reply was cut when it filled the model's context window: the request left "
            "it too little room (lower the budget, or raise the output reserve)"
        )
    if response.stop == "refusal":
        return "the model declined to go on (stop reason: refusal): its reply may be partial"
    if response.stop:
        return f"the provider stopped the reply ({response.stop}): it may be partial"
    return None


def stopped_call(call: ToolCall, note: str) -> ToolOutcome:
    """The result of the last call of a response that was cut or stopped (``note`` says how):
    it may be incomplete (a provider sends the parameters written so far, or arguments that
    are not whole JSON), so it is not run, and the agent is told why and what to do instead."""
    return ToolOutcome(
        f"{call.name} was not run: {note}, while this call was being written, so its "
        "arguments may be incomplete. Make the call again, shorter (for example, write a long "
        "file in smaller pieces).",
        error=True,
        ran=False,
    )
