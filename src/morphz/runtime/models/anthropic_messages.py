"""The Anthropic Messages adapter (official ``anthropic`` SDK, the ``morphz[anthropic]`` extra).

``anthropic`` is imported when an adapter is built, not with this module: without the extra,
building one raises an :class:`InputError` that says to ``pip install 'morphz[anthropic]'``.
This module reads no environment variables: the configuration layer reads
``ANTHROPIC_API_KEY`` and passes it in (so the SDK's own lookup of keys and profiles is never
used); without a ``base_url`` the Anthropic endpoint is used.

Request mapping (:class:`ModelRequest` → ``POST /v1/messages``)::

    system   = PREAMBLE
    messages = [{"role": "user", "content": <the Context Encoding as text blocks>},
                *<the request's extra messages>]
    tools    = [{"name", "description", "input_schema"}, ...]
    max_tokens = the request's max_output_tokens (capped by the adapter's, when set)

Prompt caching: Anthropic reuses a cached prefix only up to a block marked with
``cache_control`` and finds one only at block boundaries. When the request has a cache layout
(:mod:`morphz.encoding.blocks`), the encoding is cut into text blocks there and the layout's marks
(at most four) get ``{"type": "ephemeral"}`` (with ``"ttl": "1h"`` when ``prompt_cache="1h"``);
``prompt_cache="off"`` or no layout sends it as one unmarked block.

Extra messages: assistant tool calls become ``tool_use`` blocks (their raw arguments parsed
back to the ``input`` object; text that is not a JSON object is kept as
``{"_unparsed_arguments": text}``), tool results become ``tool_result`` blocks in a user turn,
and consecutive turns of one role are merged (the API wants them alternating).

Response mapping: ``text`` blocks joined → text; ``tool_use`` blocks → ToolCall with
``arguments = json.dumps(input)`` (the API sends the input already parsed); usage: input =
``input_tokens + cache_read_input_tokens + cache_creation_input_tokens`` (Anthropic counts the
cached parts apart; the runtime calibrates against the whole input), cached =
``cache_read_input_tokens``, output = ``output_tokens``. Other blocks (thinking) are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import httpx2

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
from morphz.runtime.models.retry import stated_status
from morphz.runtime.models.sdk import PREAMBLE, TIMEOUT, SdkAdapter

if TYPE_CHECKING:
    from types import ModuleType

    from anthropic.types import MessageParam, ToolUnionParam

AUTH_HINT = "ANTHROPIC_API_KEY or [anthropic] base_url in morphz.toml"
PROVIDER = "Anthropic"
# the cache lifetime of the marks (the first is the default), or no marks
PROMPT_CACHE = ("5m", "1h", "off")
MAX_MARKS = 4  # the API's limit of cache_control breakpoints per request
# the HTTP status of each of Anthropic's error types (its errors page): an error body that came
# with HTTP 200 (a proxy, a gateway) states its status only so
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def load_sdk() -> ModuleType:
    """The ``anthropic`` package, or an InputError that says how to install it."""
    try:
        import anthropic
    except ImportError as exc:
        raise InputError(
            "the Anthropic adapter needs the anthropic package: pip install 'morphz[anthropic]'"
        ) from exc
    return anthropic


class AnthropicMessagesModel(SdkAdapter):
    """A :class:`~morphz.runtime.models.base.Model` over the Anthropic Messages API."""

    prefix = "anthropic"
    provider = PROVIDER
    body_name = PROVIDER
    auth_hint = AUTH_HINT
    key_setting = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"
    client_class = "AsyncAnthropic"

    def __init__(self, model: str, *, prompt_cache: str = "5m", **settings: Any) -> None:
        """``prompt_cache``: 5m, 1h or off (see the module's docstring); ``settings``: those
        of :class:`~morphz.runtime.models.sdk.SdkAdapter`."""
        if prompt_cache not in PROMPT_CACHE:
            raise InputError(f"prompt_cache must be 5m, 1h or off, not {prompt_cache!r}")
        super().__init__(load_sdk(), model, **settings)
        self.prompt_cache = prompt_cache

    def _unset_environment(self, client: Any) -> None:
        # the SDK adds the headers ANTHROPIC_CUSTOM_HEADERS lists; we give it none of our own
        client._custom_headers = {}

    def _error_body(self, data: dict[str, Any]) -> Mapping[str, object] | None:
        return data if data.get("type") == "error" else None

    def _stated_status(self, data: Mapping[str, object]) -> int | None:
        """The status of the error's ``type`` (:data:`ERROR_STATUS`), or a numeric one that a
        proxy put in its place."""
        inner = data.get("error")
        kind = inner.get("type") if isinstance(inner, dict) else None
        status = ERROR_STATUS.get(kind) if isinstance(kind, str) else None
        return status if status is not None else stated_status(data)

    async def request(self, request: ModelRequest) -> ModelResponse:
        messages = anthropic_messages(request, self.prompt_cache)
        tools = anthropic_tools(request.tools)

        async def send(client: Any) -> httpx2.Response:
            create = client.messages.with_raw_response.create
            raw = await create(
                model=self.model,
                system=PREAMBLE,
                messages=cast("list[MessageParam]", messages),
                tools=cast("list[ToolUnionParam]", tools) if tools else self._sdk.omit,
                max_tokens=self.output_tokens(request),
                # explicit (ten minutes to answer, five seconds to connect), so the SDK does not
                # refuse, before sending, an output budget it reckons could take over ten minutes
                timeout=TIMEOUT,
            )
            return cast("httpx2.Response", raw.http_response)

        return await self._call(send, parse_message)


# -- request


def anthropic_messages(request: ModelRequest, cache: str = "5m") -> list[dict[str, Any]]:
    """The encoding as the first user turn, then the extra messages, same-role turns merged
    (a message with nothing to send, no text but blanks and no calls, is left out)."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": encoding_blocks(request, cache)}]
    for message in request.messages:
        role, blocks = message_blocks(message)
        if not blocks:  # a reply with no text and no calls: the API refuses an empty turn
            continue
        if turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def encoding_blocks(request: ModelRequest, cache: str) -> list[dict[str, Any]]:
    """The encoding as text blocks cut and marked by its cache layout (the last marks when
    there are more than the API allows)."""
    layout = request.layout
    if layout is None or cache == "off":
        return [{"type": "text", "text": request.encoding}]
    control = {"type": "ephemeral"} | ({"ttl": cache} if cache != "5m" else {})
    blocks = list(layout.blocks(request.encoding))
    marked = [i for i, (_, mark) in enumerate(blocks) if mark][-MAX_MARKS:]
    out: list[dict[str, Any]] = [{"type": "text", "text": text} for text, _ in blocks]
    for index in marked:
        out[index]["cache_control"] = control
    return out


def message_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    # the API refuses a blank text block ("text content blocks must contain non-whitespace text")
    text = [{"type": "text", "text": message.content}] if message.content.strip() else []
    if message.role == "user":
        return "user", text
    if message.role == "assistant":
        return "assistant", text + [tool_use_block(c) for c in message.tool_calls]
    if message.role == "tool":
        if not message.tool_call_id:
            raise InputError("a tool message needs the tool_call_id of the call it answers")
        result = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        return "user", [{**result, "content": message.content}]
    raise InputError(f"message role must be user, assistant or tool, not {message.role!r}")


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    try:
        data = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError:
        data = None
    arguments = data if isinstance(data, dict) else {"_unparsed_arguments": call.arguments}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def anthropic_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


# -- response


# stop reasons of a reply that ended as the model meant it to, and of one the output limit or
# the context window cut; any other (such as "refusal") is reported as the response's stop
NORMAL_STOPS = (None, "", "end_turn", "tool_use", "stop_sequence")
CUT_STOPS = ("max_tokens", "model_context_window_exceeded")


def parse_message(data: dict[str, Any]) -> ModelResponse:
    content = data.get("content")
    if not isinstance(content, list):
        raise BadResponseError("the Anthropic response has no content list")
    stop = data.get("stop_reason")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(tool_use_call(index, block))
    return ModelResponse(
        text="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=anthropic_usage(data.get("usage")),
        raw=data,
        cut=stop in CUT_STOPS,
        # max_tokens is the one cut the engine knows without its stop; the window's is named
        stop=None if stop in NORMAL_STOPS or stop == "max_tokens" else str(stop),
    )


def tool_use_call(index: int, block: dict[str, Any]) -> ToolCall:
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise BadResponseError(f"tool_use block {index} of the response has no name: {block!r}")
    call_id = block.get("id")
    arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
    return ToolCall(str(call_id) if call_id else f"toolu_{index}", name, arguments)


def anthropic_usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    fresh, output = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(fresh, int) or not isinstance(output, int):
        return None
    read = usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    read = read if isinstance(read, int) else 0
    written = written if isinstance(written, int) else 0
    return Usage(fresh + read + written, output, read)
