"""Review 10, capacity and token accounting (DESIGN §10, issue 4 items 4-5; docs/decisions.md
"budget refusals", "Tokens", "Maintenance batch"). Each test fails on the code as reviewed; its
docstring states the expected behaviour."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import morphz
from agents import make_engine
from morphz.capacity import Budget
from morphz.encoding.tokens import Calibration
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel


def test_the_budget_refusal_measures_frames_as_the_runtime_measures_requests(
    ctx: morphz.Context, workspace: Path
) -> None:
    """docs/decisions.md, "`budget` refusals": a transaction that grows the frames in view is
    refused when those frames, with the protocol, pass the critical level, because maintenance
    batches leave out observations, never the mind, "so from there no request could be served";
    and "the budget is the one the runtime measures requests with". The runtime measures
    requests with the context's calibration (here 1.5, what a provider reported: JSON and code
    run 1.2-2 per tokens.py), but `_check_room` compares the frames' raw estimate with the
    critical level. So context_tx commits a frame of ~13,000 estimated tokens (15,100 with the
    protocol, under the critical 16,000) that the runtime counts at ~1.5x: the very next request
    is over the hard limit with the mind alone, the activation fails with "even the minimum
    maintenance request needs ~23,900 tokens of 20,000", and so does every later activation:
    the agent can never be sent a request in which to retire the frame.
    Expected: the commit is refused with `budget` (measured as the runtime measures, i.e.
    calibrated, or exactly when an exact tokenizer counts), the agent reads the refusal and the
    activation delivers its reply."""
    ctx.set_budget(Budget(configured=20_000))  # hard 20,000, critical 16,000
    ctx.save_calibration("openai:m", Calibration(1.5, 5))
    body = "status ok " * 5_200  # ~13,000 estimated tokens
    tx = f'(context-tx (base-version 0) (derive notes/big (from @e1) (text "{body}")))'
    requests: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            call = ToolCall("c1", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (call,))
        return ModelResponse("done")

    engine = make_engine(ctx, FunctionModel(answer, "openai:m"), workspace, exact_tokens=False)
    result = asyncio.run(engine.run("summarise the logs into one note"))
    assert "notes/big" not in {f.id for f in ctx.mind().frames}, (
        "a frame the runtime counts past the hard limit was committed"
    )
    assert result.state == "delivered", result.reason


def test_the_minimum_failure_names_the_frames_when_they_are_what_does_not_fit(
    ctx: morphz.Context, workspace: Path
) -> None:
    """DESIGN §10/§13: when even the minimum maintenance request cannot fit, the activation fails
    "with a clear error". Here the minimum is ~12,800 tokens of which ~10,000 are one frame and
    the current request is a few tokens, with nothing protected, yet the reason says "the
    current request, its dependencies and protected content do not fit" and suggests
    unprotecting observations or retiring some from another session, neither of which can help.
    (capacity.py select_batch's message, used by engine._minimum.) Expected: the reason says
    that the frames in view (the mind) take the room, about how many tokens, and names the
    remedy that works for them (retire, supersede or revise frames, e.g. with `morphz context
    tx`), besides raising the budget."""
    ctx.observe("user_message", "keep notes")
    body = "status ok " * 4_000  # one frame of ~10,000 estimated tokens
    ctx.commit(f'(context-tx (base-version 0) (derive notes/big (from @e1) (text "{body}")))')
    ctx.set_budget(Budget(configured=12_000))
    model = FunctionModel(lambda request: ModelResponse("done"), "openai:m")
    result = asyncio.run(make_engine(ctx, model, workspace, exact_tokens=False).run("hi"))
    assert result.state == "failed"
    reason = result.reason or ""
    assert "minimum maintenance request" in reason
    assert "frame" in reason, reason
