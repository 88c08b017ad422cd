"""The OpenAI-compatible Chat Completions adapter (official ``openai`` SDK).

One adapter for every server that speaks ``POST {base_url}/chat/completions``: OpenAI and most
hosted models, vLLM, Ollama (``http://localhost:11434/v1``), llama.cpp server. Only the common
parameters are sent (``model``, ``messages``, ``tools``, ``max_tokens``), nothing
provider-specific, so every one of them accepts the request. The exception: OpenAI's reasoning
models (o-series, gpt-5) refuse ``max_tokens`` and ask for ``max_completion_tokens``; the adapter
then sends that request again with ``max_completion_tokens``, and does so for every later request
(``output_param``).

This module reads no environment variables: the configuration layer
(:mod:`morphz.runtime.config`) reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` and passes them
in. Without a ``base_url`` the OpenAI endpoint is used; without an ``api_key`` a placeholder is
sent (local servers ignore it, the SDK insists on one).

Request mapping (:class:`ModelRequest` → Chat Completions)::

    messages = [{"role": "system", "content": PREAMBLE},
                {"role": "user", "content": <the Context Encoding>},
                *<the request's extra messages: user / assistant (+ tool_calls) / tool>]
    tools    = [{"type": "function", "function": {name, description, parameters}}, ...]
    max_tokens = the request's max_output_tokens (capped by the adapter's, when set)

With ContextDelta the encoding is a seed followed by increments, and the request's cache layout
says where each begins (``turns``): the seed and each increment are then sent as consecutive user
messages, so a server that reuses only whole earlier messages still finds every one of them
unchanged in the next request. When a server refuses two user messages in a row (a strict chat
template: "roles must alternate"), the adapter sends that request again with the encoding as one
user message, and does so for every later request (``turns_merged``); ``delta_messages = false``
for the model spares the first refusal.

Response mapping: ``choices[0].message.content`` → text; ``message.tool_calls`` → ToolCall with
``function.arguments`` kept as the raw text the model wrote (the runtime parses it and reports
broken JSON to the agent); ``usage.prompt_tokens`` / ``completion_tokens`` /
``prompt_tokens_details.cached_tokens`` (DeepSeek's ``prompt_cache_hit_tokens``) → Usage; the
whole JSON body → ``raw``. The body is read as JSON here (not through the SDK's lenient models)
so a malformed one is a :class:`BadResponseError`. A body with an ``error`` and no choices is an
error, whatever the HTTP status (some proxies and local servers answer 200), and so is a first
choice that ended with ``finish_reason: "error"`` and an ``error`` object (OpenRouter: the model
failed after it started; the error's ``code`` is its status). Errors are translated in
:meth:`SdkAdapter._translate` and retried by :mod:`morphz.runtime.models.retry`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, cast

import httpx2
import openai

from morphz.errors import InputError
from morphz.runtime.models.base import (
    BadResponseError,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSchema,
    Usage,
)
from morphz.runtime.models.sdk import PREAMBLE, SdkAdapter

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

AUTH_HINT = "OPENAI_API_KEY / OPENAI_BASE_URL or [openai] base_url in morphz.toml"


class OpenAIChatModel(SdkAdapter):
    """A :class:`~morphz.runtime.models.base.Model` over an OpenAI-compatible endpoint."""

    prefix = "openai"
    provider = "the OpenAI-compatible server"
    body_name = "OpenAI-compatible"
    auth_hint = AUTH_HINT
    key_setting = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    client_class = "AsyncOpenAI"

    def __init__(self, model: str, **settings: Any) -> None:
        """``settings``: those of :class:`~morphz.runtime.models.sdk.SdkAdapter`."""
        super().__init__(openai, model, **settings)
        self.turns_merged = False  # the server refused consecutive user messages once
        self.output_param = "max_tokens"  # or max_completion_tokens, once max_tokens was refused

    def _unset_environment(self, client: Any) -> None:
        # the SDK fills these from OPENAI_ORG_ID and OPENAI_PROJECT_ID and sends them as headers
        client.organization = client.project = None

    def _error_body(self, data: dict[str, Any]) -> Mapping[str, object] | None:
        # an error and no answer beside it ("error": null next to the choices is an answer)
        if data.get("error") and not data.get("choices"):
            return data
        return choice_error(data)

    async def request(self, request: ModelRequest) -> ModelResponse:
        messages = chat_messages(request, merge_turns=self.turns_merged)
        try:
            return await self._send(request, messages)
        except ProviderError as exc:
            if refuses_max_tokens(exc, self.output_param):
                self.output_param = "max_completion_tokens"
                return await self.request(request)
            if not refuses_consecutive_turns(exc, messages):
                raise
            self.turns_merged = True
            return await self._send(request, chat_messages(request, merge_turns=True))

    async def _send(self, request: ModelRequest, messages: list[dict[str, Any]]) -> ModelResponse:
        tools = chat_tools(request.tools)

        async def send(client: Any) -> httpx2.Response:
            create = client.chat.completions.with_raw_response.create
            raw = await create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else openai.omit,
                **{self.output_param: self.output_tokens(request)},
            )
            return cast("httpx2.Response", raw.http_response)

        return await self._call(send, parse_completion)


# -- request


def chat_messages(request: ModelRequest, *, merge_turns: bool = False) -> list[dict[str, Any]]:
    """The preamble, the encoding (a message for the seed and for each increment, or one message
    with ``merge_turns``), then the request's extra messages."""
    layout = request.layout
    split = layout is not None and not merge_turns
    pieces = layout.turn_texts(request.encoding) if split and layout else [request.encoding]
    out: list[dict[str, Any]] = [{"role": "system", "content": PREAMBLE}]
    out.extend({"role": "user", "content": piece} for piece in pieces)
    out.extend(chat_message(m) for m in request.messages)
    return out


def refuses_max_tokens(exc: ProviderError, param: str) -> bool:
    """Whether ``exc`` is OpenAI refusing ``max_tokens`` for a model that takes only
    ``max_completion_tokens`` (its reasoning models: "Unsupported parameter: 'max_tokens' ...
    Use 'max_completion_tokens' instead")."""
    said = exc.message
    return (
        param == "max_tokens"
        and type(exc) is ProviderError
        and "max_completion_tokens" in said
        and "max_tokens" in said.replace("max_completion_tokens", "")
    )


def refuses_consecutive_turns(exc: ProviderError, messages: list[dict[str, Any]]) -> bool:
    """Whether ``exc`` is a server (a strict chat template) refusing ``messages`` because two
    user messages follow each other: it says roles must alternate, and they did not."""
    roles = [m["role"] for m in messages]
    consecutive = any(a == b == "user" for a, b in pairwise(roles))
    return consecutive and type(exc) is ProviderError and "alternate" in exc.message.lower()


def chat_message(message: Message) -> dict[str, Any]:
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["content"] = message.content or None
            out["tool_calls"] = [chat_tool_call(c) for c in message.tool_calls]
        return out
    if message.role == "tool":
        if not message.tool_call_id:
            raise InputError("a tool message needs the tool_call_id of the call it answers")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    raise InputError(f"message role must be user, assistant or tool, not {message.role!r}")


def chat_tool_call(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def chat_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


# -- response


def choice_error(data: dict[str, Any]) -> Mapping[str, object] | None:
    """The error a choice carries, as an error body: OpenRouter (and gateways of its schema)
    answers HTTP 200 when the model failed after it started, the choice ending with
    ``finish_reason: "error"`` and an ``error`` object (its numeric ``code`` the status)."""
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict) or first.get("finish_reason") != "error":
        return None
    error = first.get("error")
    return {"error": error} if isinstance(error, dict) and error else None


def parse_completion(data: dict[str, Any]) -> ModelResponse:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadResponseError("the response has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise BadResponseError("the first choice of the response has no message")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise BadResponseError("the tool_calls of the response are not a list")
    finish = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
    text = message_text(message.get("content"))
    refusal = message.get("refusal")
    if text is None and isinstance(refusal, str) and refusal:  # the model declined: its words
        text = refusal
    return ModelResponse(
        text=text,
        tool_calls=tuple(tool_call(i, c) for i, c in enumerate(calls)),
        usage=chat_usage(data.get("usage")),
        raw=data,
        cut=finish == "length",
        stop=None if finish in NORMAL_FINISH else str(finish),
    )


# finish reasons of a reply that ended as the model meant it to ("length" is a cut, and any
# other, such as "content_filter", is reported as the response's stop)
NORMAL_FINISH = (None, "stop", "tool_calls", "function_call", "length")


def message_text(content: object) -> str | None:
    """``content`` as text: a string, null, or (some servers) a list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    raise BadResponseError(f"the message content is neither text nor parts: {content!r}")


def tool_call(index: int, call: object) -> ToolCall:
    """A tool call as written. A missing id gets ``call_<index>``; missing or empty arguments
    are ``{}`` (a call without arguments); arguments given as an object are dumped to JSON."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        raise BadResponseError(f"tool call {index} of the response has no function: {call!r}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise BadResponseError(f"tool call {index} of the response has no function name: {call!r}")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = "{}" if arguments is None else json.dumps(arguments)
    call_id = call.get("id")
    return ToolCall(str(call_id) if call_id else f"call_{index}", name, arguments or "{}")


def chat_usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion, cached_tokens(usage))


def cached_tokens(usage: dict[str, Any]) -> int:
    """The input tokens the provider's prefix cache served: OpenAI's
    ``prompt_tokens_details.cached_tokens``, or DeepSeek's ``prompt_cache_hit_tokens``."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        cached = usage.get("prompt_cache_hit_tokens")
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else 0
