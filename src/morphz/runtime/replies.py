"""How the engine records a response and tells one that did not end as the model meant it to:
the payload of its ``model_reply`` event (its usage figures kept only when they are whole
numbers), the note an activation's reason carries (a reply cut at the output limit or at the
context window, or stopped by the provider: a refusal, a content filter), and the outcome of the
tool call such a stop can have cut (the last one of the response), which is not run."""

from __future__ import annotations

from typing import Any

from morphz.runtime.models.base import ModelResponse, ToolCall
from morphz.runtime.tools.base import ToolOutcome, valid_text

WINDOW_STOP = "model_context_window_exceeded"  # Anthropic: the reply filled the context window


def reply_payload(
    activation: str, response: ModelResponse, sent: dict[str, object]
) -> dict[str, Any]:
    """The payload of ``response``'s ``model_reply`` event in ``activation``, with what its
    request ``sent``: its calls (made valid Unicode: what a provider sends may hold lone
    surrogates, "\\ud800" in its JSON), how it was cut or stopped, and its usage figures (each
    null unless a whole number: an adapter of one's own may report 1500.0, or nothing)."""
    calls = [
        {"id": valid_text(c.id), "name": valid_text(c.name), "arguments": valid_text(c.arguments)}
        for c in response.tool_calls
    ]
    payload: dict[str, Any] = {"activation": activation, "tool_calls": calls, "request": sent}
    if calls:  # run one after another, each outcome staged as it ends (recovery reads it)
        payload["staged_calls"] = True
    if response.cut:  # the output limit or the window stopped it: text or calls partial
        payload["cut"] = cut_kind(response)
    if response.stop:  # the provider stopped it (a refusal, a content filter)
        payload["stop"] = response.stop
    usage = response.usage
    if usage is not None:
        payload["usage"] = {
            "input": whole(usage.input_tokens),
            "output": whole(usage.output_tokens),
            "cached": whole(usage.cached_input_tokens),
        }
    return payload


def whole(figure: object) -> int | None:
    """``figure`` when it is a whole number of tokens (an int, not a bool, not negative), else
    None: a usage figure that teaches nothing and is recorded as unknown."""
    if isinstance(figure, bool) or not isinstance(figure, int) or figure < 0:
        return None
    return figure


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
