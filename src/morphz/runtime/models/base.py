"""The model protocol: one request in, one response out, typed errors (DESIGN §11).

A request carries the Context Encoding (the whole context the model evaluates), the messages
of the current activation that are not yet in the encoding (normally none: tool results arrive
as observations), the tool schemas on offer, and optionally the encoding's cache layout (where
an adapter whose provider caches only at marked blocks should cut and mark the text). A response
is a reply text, tool calls, or both, with the input/output usage the provider reported (it feeds
token calibration).

Provider errors are a small tree under :class:`ProviderError` so the runtime can react: retry
after a rate limit, enter maintenance after a context-too-long refusal, fail the step on a bad
response or an authentication error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from morphz.encoding.blocks import CacheLayout
from morphz.errors import InputError, MorphzError


class ProviderError(MorphzError):
    """A model provider refused or failed a request."""

    code = "provider"


class AuthError(ProviderError):
    code = "provider-auth"


class RateLimitError(ProviderError):
    code = "provider-rate-limit"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ContextTooLongError(ProviderError):
    code = "provider-context-too-long"


class BadResponseError(ProviderError):
    code = "provider-bad-response"


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool as offered to a model: name, description, JSON Schema of its arguments. ``text``
    is its canonical JSON (sorted keys), made once: what token figures count and the prefix
    meter sees of it on every request."""

    name: str
    description: str
    parameters: dict[str, Any]
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", json.dumps(self.to_dict(), sort_keys=True))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model wrote it. ``arguments`` is the raw JSON text (it may be broken:
    the runtime parses it and reports errors to the agent as tool results)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """A chat message of the activation: role user/assistant/tool, with optional tool calls."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelRequest:
    encoding: str
    tools: tuple[ToolSchema, ...]
    messages: tuple[Message, ...] = ()
    max_output_tokens: int = 4096
    layout: CacheLayout | None = None  # of ``encoding``; None: send it as one block


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    cut: bool = False  # the output limit stopped it (finish_reason length, stop_reason max_tokens)
    # why the model stopped when it was not a normal end, as the provider says it ("refusal",
    # "content_filter"; with ``cut``, "model_context_window_exceeded"; None for an output-limit
    # cut): its text or last call may be partial, and the engine says so
    stop: str | None = None

    def __post_init__(self) -> None:
        """Refuse a field of the wrong type here, where it is made (a function model's or a
        test's mistake), rather than as an AttributeError deep in the engine. A list of tool
        calls is taken as the tuple it stands for."""
        _check_field("text", self.text, (str, type(None)), "text or None")
        calls = self.tool_calls
        if not isinstance(calls, tuple | list) or not all(isinstance(c, ToolCall) for c in calls):
            _refuse("tool_calls", calls, "a tuple of ToolCall")
        object.__setattr__(self, "tool_calls", tuple(calls))
        _check_field("usage", self.usage, (Usage, type(None)), "a Usage or None")
        _check_field("raw", self.raw, (dict,), "a dict")
        _check_field("cut", self.cut, (bool,), "True or False")
        _check_field("stop", self.stop, (str, type(None)), "text or None")


def _check_field(name: str, value: object, kinds: tuple[type, ...], wanted: str) -> None:
    if not isinstance(value, kinds):
        _refuse(name, value, wanted)


def _refuse(name: str, value: object, wanted: str) -> NoReturn:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise InputError(f"ModelResponse.{name} must be {wanted}, not {type(value).__name__} {shown}")


class Model(Protocol):
    """Anything that answers a :class:`ModelRequest`. ``name`` appears in the encoding."""

    @property
    def name(self) -> str: ...

    async def request(self, request: ModelRequest) -> ModelResponse: ...
