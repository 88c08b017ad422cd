"""A refusal ceiling holds for ContextDelta requests too (review 9: increments piled past the
ceiling a too-long refusal taught were sent, and refused, again)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import morphz
from morphz.encoding.tokens import count
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

# ---------------------------------------------------------------- the engine's refusal ceiling


def _figure(request: ModelRequest) -> int:
    """A request's tokens as the engine counts a refused one (estimated: no calibration, no
    exact tokenizer in tests)."""
    return count([request.encoding, *(t.text for t in request.tools)]).tokens


def test_a_delta_request_is_kept_below_the_ceiling_a_refusal_taught(
    ctx: morphz.Context, workspace: Path
) -> None:
    """After a too-long refusal that states the provider's maximum, "this activation keeps its
    requests below the share of it the provider said it would take" (engine ``_refused``): a
    request over that ceiling is refused again for certain. Without ContextDelta the engine
    checks every request against the ceiling (``_fits``). With ContextDelta it checks only the
    fresh encoding, so increments pile up past the ceiling and the request is sent, and
    refused, again (a wasted provider round trip and step). Expected: once the provider said
    its maximum, no later request exceeds it (a new seed, or maintenance, instead)."""
    limit: list[int] = []  # the provider's maximum: the first request's size + ~4 increments
    sent: list[tuple[int, bool]] = []  # (figure, refused)

    def model(request: ModelRequest) -> ModelResponse:
        figure = _figure(request)
        if not limit:
            limit.append(figure + 1_350)
        if figure > limit[0]:
            sent.append((figure, True))
            raise ContextTooLongError(f"prompt is too long: {figure} tokens > {limit[0]} maximum")
        sent.append((figure, False))
        step = len(sent)
        if step >= 14:
            return ModelResponse("done")
        version = re.findall(r"\(mind-version (\d+)\)", request.encoding)[-1]
        body = " ".join(f"word{i}" for i in range(60))
        tx = f"(context-tx (base-version {version}) (create f/{step} (n {body})))"
        return ModelResponse(None, (ToolCall(f"c{step}", "context_tx", json.dumps({"tx": tx})),))

    config = RuntimeConfig(workspace, delta=True)
    engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), config)
    result = asyncio.run(engine.run("keep working", session="s1"))
    assert result.state == "delivered", result.reason
    first = next(i for i, (_, refused) in enumerate(sent) if refused)
    after = sent[first + 1 :]
    assert after and all(figure <= limit[0] for figure, _ in after), (limit, sent)
