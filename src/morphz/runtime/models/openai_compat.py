"""The OpenAI-compatible Chat Completions adapter (official ``openai`` SDK).

One adapter for every server that speaks ``POST {base_url}/chat/completions``: OpenAI and most
hosted models, vLLM, Ollama (``http://localhost:11434/v1``), llama.cpp server. Only the common
parameters are sent (``model``, ``messages``, ``tools``, ``max_tokens``), nothing
provider-specific, so every one of them accepts the request.

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

Response mapping: ``choices[0].message.content`` → text; ``message.tool_calls`` → ToolCall with
``function.arguments`` kept as the raw text the model wrote (the runtime parses it and reports
broken JSON to the agent); ``usage.prompt_tokens`` / ``completion_tokens`` /
``prompt_tokens_details.cached_tokens`` → Usage; the whole JSON body → ``raw``. The body is
read as JSON here (not through the SDK's lenient models) so a malformed one is a
:class:`BadResponseError`. Errors are translated in :meth:`OpenAIChatModel._translate` and
retried by :mod:`morphz.runtime.models.retry`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import openai

from morphz.errors import InputError
from morphz.runtime.models.base import (
    BadResponseError,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSchema,
    Usage,
)
from morphz.runtime.models.retry import (
    Backoff,
    Failure,
    Retry,
    Sleep,
    call_with_retries,
    connection_failure,
    error_text,
    status_failure,
)

if TYPE_CHECKING:
    import httpx2
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

PREAMBLE = (
    "You are the agent described by the protocol region of the context encoding that follows; "
    "act only through the offered tools or a final reply."
)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "none"
AUTH_HINT = "OPENAI_API_KEY / OPENAI_BASE_URL or [openai] base_url in morphz.toml"


class OpenAIChatModel:
    """A :class:`~morphz.runtime.models.base.Model` over an OpenAI-compatible endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        max_retries: int = 3,
        sleep: Sleep = asyncio.sleep,
        max_output_tokens: int | None = None,
        backoff: Backoff | None = None,
        on_retry: Callable[[Retry], None] | None = None,
    ) -> None:
        check_settings(model, max_retries, max_output_tokens)
        self.model = model
        self.base_url = base_url or DEFAULT_BASE_URL
        self.max_retries = max_retries
        self.max_output_tokens = max_output_tokens
        self.backoff = backoff or Backoff()
        self.on_retry = on_retry
        self._sleep = sleep
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or NO_KEY,
            http_client=http_client,
            max_retries=0,
        )

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    async def request(self, request: ModelRequest) -> ModelResponse:
        messages = chat_messages(request)
        tools = chat_tools(request.tools)
        max_tokens = output_tokens(request, self.max_output_tokens)

        async def send() -> bytes:
            create = self._client.chat.completions.with_raw_response.create
            raw = await create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else openai.omit,
                max_tokens=max_tokens,
            )
            return raw.http_response.content

        body = await call_with_retries(
            send,
            self._translate,
            max_retries=self.max_retries,
            sleep=self._sleep,
            backoff=self.backoff,
            on_retry=self.on_retry,
        )
        return parse_completion(load_json(body, "OpenAI-compatible"))

    async def aclose(self) -> None:
        await self._client.close()

    def _translate(self, exc: Exception) -> Failure | None:
        """The one place where ``openai`` exceptions become ProviderErrors."""
        where = self.base_url
        if isinstance(exc, openai.APIStatusError):
            text = error_text(exc.message, exc.body)
            return status_failure(
                exc.status_code,
                text,
                exc.response.headers,
                provider="the OpenAI-compatible server",
                where=where,
                auth_hint=AUTH_HINT,
            )
        if isinstance(exc, openai.APIConnectionError):
            return connection_failure(exc, provider="the OpenAI-compatible server", where=where)
        if isinstance(exc, openai.APIResponseValidationError):
            return Failure(BadResponseError(f"a malformed response from {where}: {exc}"))
        return None


def check_settings(model: str, max_retries: int, max_output_tokens: int | None) -> None:
    if not model:
        raise InputError("a model name is required")
    if max_retries < 0:
        raise InputError(f"max_retries must be 0 or more, not {max_retries}")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise InputError(f"max_output_tokens must be positive, not {max_output_tokens}")


def output_tokens(request: ModelRequest, cap: int | None) -> int:
    return request.max_output_tokens if cap is None else min(cap, request.max_output_tokens)


# -- request


def chat_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The preamble, the encoding, then the request's extra messages."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": PREAMBLE},
        {"role": "user", "content": request.encoding},
    ]
    out.extend(chat_message(m) for m in request.messages)
    return out


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


def load_json(body: bytes, provider: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        preview = body[:200].decode("utf-8", "replace")
        raise BadResponseError(f"the {provider} response is not JSON ({exc}): {preview}") from exc
    if not isinstance(data, dict):
        raise BadResponseError(f"the {provider} response is not a JSON object: {body[:200]!r}")
    return data


def parse_completion(data: dict[str, Any]) -> ModelResponse:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        error = f" (it says: {data['error']})" if "error" in data else ""
        raise BadResponseError(f"the response has no choices{error}")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise BadResponseError("the first choice of the response has no message")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise BadResponseError("the tool_calls of the response are not a list")
    return ModelResponse(
        text=message_text(message.get("content")),
        tool_calls=tuple(tool_call(i, c) for i, c in enumerate(calls)),
        usage=chat_usage(data.get("usage")),
        raw=data,
    )


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
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(prompt, completion, cached if isinstance(cached, int) else 0)
