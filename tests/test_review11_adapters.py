"""Review 11 (the model provider adapters, against what the real APIs accept and return). Each
test fails against the code as it was reviewed and states the behaviour expected of it. No
network: exchanges go through an in-memory transport (httpx2.MockTransport), the store is real
SQLite (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

import morphz
from agents import make_engine
from morphz.runtime.engine import ActivationResult
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel, anthropic_messages
from morphz.runtime.models.base import Message, ModelRequest, ToolCall
from morphz.runtime.models.openai_compat import OpenAIChatModel
from morphz.runtime.models.retry import Backoff
from test_model_adapters import ENCODING, TOOLS

Answer = Callable[[dict[str, Any]], httpx2.Response]


class Server:
    """An in-memory provider: answers each request with ``answer(body)`` and keeps the bodies."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        return self.answer(body)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))

    def anthropic(self) -> AnthropicMessagesModel:
        return AnthropicMessagesModel(
            "claude-sonnet-4-6",
            api_key="sk-ant-test",
            http_client=self.client(),
            sleep=self.sleep,
            backoff=Backoff(rand=lambda: 0.5),
        )

    def openai(self, model: str = "gpt-4o") -> OpenAIChatModel:
        return OpenAIChatModel(  # the OpenAI endpoint (no base_url)
            model,
            api_key="sk-test",
            http_client=self.client(),
            sleep=self.sleep,
            backoff=Backoff(rand=lambda: 0.5),
        )


def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 3000, "output_tokens": 40},
    }


def completion(msg: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_764_460_000,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3000, "completion_tokens": 40, "total_tokens": 3040},
    }


def in_turn(answers: list[dict[str, Any]]) -> Answer:
    """Answer with ``answers`` in order (the last one again when they run out)."""
    queue = list(answers)

    def answer(body: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(200, json=queue.pop(0) if len(queue) > 1 else queue[0])

    return answer


def activate(
    ctx: morphz.Context, model: Any, workspace: Path, prompt: str, **config: Any
) -> ActivationResult:
    async def go() -> ActivationResult:
        try:
            return await make_engine(ctx, model, workspace, **config).run(prompt)
        finally:
            await model.aclose()

    return asyncio.run(go())


def request(model: Any, req: ModelRequest) -> Any:
    async def go() -> Any:
        try:
            return await model.request(req)
        finally:
            await model.aclose()

    return asyncio.run(go())


# --- OpenAI: max_tokens is refused by OpenAI's reasoning models --------------------------------

UNSUPPORTED = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}


def test_openai_reasoning_models_are_not_sent_max_tokens() -> None:
    """OpenAI's o-series and gpt-5 models refuse every Chat Completions request that carries
    ``max_tokens`` (HTTP 400 unsupported_parameter: "Use 'max_completion_tokens' instead"); the
    module docstring promises that only parameters "every one of them accepts" are sent. Today
    the adapter always sends ``max_tokens``, so ``openai:o3-mini`` or ``openai:gpt-5`` fails on
    the first request of every activation. Expected: the request reaches the model with the
    output budget as ``max_completion_tokens`` (sent so for OpenAI's endpoint, or sent again so
    after this refusal, as the adapter already does for "roles must alternate")."""

    def answer(body: dict[str, Any]) -> httpx2.Response:
        if "max_tokens" in body:
            return httpx2.Response(400, json=UNSUPPORTED)
        assert body.get("max_completion_tokens") == 2048
        return httpx2.Response(200, json=completion({"role": "assistant", "content": "ok"}, "stop"))

    server = Server(answer)
    response = request(server.openai("o3-mini"), ModelRequest(ENCODING, TOOLS, (), 2048))
    assert response.text == "ok"


# --- Anthropic: stop reasons other than max_tokens ----------------------------------------------


def test_anthropic_a_reply_that_filled_the_context_window_is_cut() -> None:
    """Anthropic's stop_reason ``model_context_window_exceeded`` (Claude Sonnet 4.5 and later)
    means the output ran into the model's context window: its docs say "treat the response as
    truncated", exactly like ``max_tokens``. The adapter sets ``cut`` only for ``max_tokens``,
    so the engine delivers the first half of a reply as complete (and runs a cut tool call).
    Expected: ModelResponse.cut is True for this stop reason too."""
    half = message([{"type": "text", "text": "The deployment plan: first, we"}], "")
    half["stop_reason"] = "model_context_window_exceeded"
    server = Server(in_turn([half]))
    response = request(server.anthropic(), ModelRequest(ENCODING, TOOLS))
    assert response.text == "The deployment plan: first, we"
    assert response.cut


def test_anthropic_a_refusal_is_not_delivered_as_a_complete_reply(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Anthropic answers ``stop_reason: "refusal"`` when Claude declines (its safety
    classifiers stop the output); the content is then empty or a partial text. The adapter
    ignores the stop reason, so the engine delivers the partial text as the activation's reply
    with no reason and nothing in the store says the model refused (with empty content the
    failure says "neither a reply nor tool calls"). Expected: the refusal is visible: the
    activation is not delivered as a normal reply, or its reason / the recorded model_reply
    says the model refused."""
    partial = message([{"type": "text", "text": "Here is how to configure the"}], "refusal")
    server = Server(in_turn([partial]))
    result = activate(ctx, server.anthropic(), workspace, "Configure the firewall.")
    replies = [e for e in ctx.events() if e.kind == "model_reply"]
    said = json.dumps(replies[-1].payload) + str(result.reason)
    assert result.state != "delivered" or "refus" in said, (result.state, said[:300])


def test_openai_a_content_filter_stop_is_not_delivered_as_a_complete_reply(
    ctx: morphz.Context, workspace: Path
) -> None:
    """OpenAI's ``finish_reason: "content_filter"`` means the output was withheld or cut by
    the content filter (Azure OpenAI and compatible servers send it with partial or null
    content). The adapter treats every finish reason but ``length`` as a normal end, so the
    partial text is delivered as the activation's complete reply, silently. Expected: the
    activation is not delivered as a normal reply, or its reason / the recorded model_reply
    says the content filter stopped it."""
    partial = completion({"role": "assistant", "content": "Step one: open the"}, "content_filter")
    server = Server(in_turn([partial]))
    result = activate(ctx, server.openai(), workspace, "Explain the setup.")
    replies = [e for e in ctx.events() if e.kind == "model_reply"]
    said = json.dumps(replies[-1].payload) + str(result.reason)
    assert result.state != "delivered" or "filter" in said, (result.state, said[:300])


# --- the engine: tool calls of a response cut at the output limit --------------------------------


def test_a_tool_call_cut_at_the_output_limit_is_not_run(
    ctx: morphz.Context, workspace: Path
) -> None:
    """With ``stop_reason: "max_tokens"`` the last tool_use block may be incomplete, and
    Anthropic's non-streaming API sends only the parameters that were complete, so the call's
    ``input`` parses fine with a parameter missing (here exec's timeout_s, cut while being
    written: the command would run with the default). The engine records ``cut`` in the
    model_reply payload but runs the calls anyway, and the agent is never told its output was
    cut (for a cut OpenAI call it sees only "not valid JSON", retries the same long call and is
    cut again). Expected: a call from a cut response is not run (at least the last one, the one
    the limit can have cut) and the agent's result for it says the output limit cut it."""
    cut = message(
        [
            {"type": "text", "text": "Running the build."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "exec",
                "input": {"command": "printf ran > ran.txt"},
            },
        ],
        "max_tokens",
    )
    done = message([{"type": "text", "text": "Done."}], "end_turn")
    server = Server(in_turn([cut, done]))
    activate(ctx, server.anthropic(), workspace, "Build it.", ask_default=True)
    results = [e.text or "" for e in ctx.events() if e.kind == "tool_result"]
    assert not (workspace / "ran.txt").exists(), "the cut call ran"
    assert results and ("output limit" in results[0] or "cut" in results[0]), results


# --- Anthropic: the turns built from a request's messages -----------------------------------------


def test_anthropic_turns_never_hold_blank_text_blocks_or_no_content() -> None:
    """The Messages API refuses a request whose text block is empty or only whitespace
    ("text content blocks must contain non-whitespace text") and a turn with no content ("all
    messages must have non-empty content"). Models often write only "\\n\\n" before a tool_use
    block, and a reply may carry no text at all (only thinking): fed back as messages (the
    Model protocol's ``messages``), ``message_blocks`` drops an empty text but keeps a blank
    one, and sends ``content: []`` for a turn with neither text nor calls, so every later
    request of that conversation is refused with HTTP 400 (the OpenAI adapter sends the same
    messages fine). Expected: no text block is blank and every turn but a final assistant one
    has content."""
    call = ToolCall("toolu_01", "read_file", '{"path": "a.txt"}')
    req = ModelRequest(
        ENCODING,
        TOOLS,
        (
            Message("assistant", "\n\n", (call,)),
            Message("tool", "alpha", tool_call_id=call.id),
            Message("assistant", ""),  # a reply with only thinking
            Message("user", "and the next file?"),
        ),
    )
    turns = anthropic_messages(req)
    blank = [
        (i, b["text"])
        for i, turn in enumerate(turns)
        for b in turn["content"]
        if b["type"] == "text" and not b["text"].strip()
    ]
    empty = [i for i, turn in enumerate(turns[:-1]) if not turn["content"]]
    assert (blank, empty) == ([], []), turns[1:]
