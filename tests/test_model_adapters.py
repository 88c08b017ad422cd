"""The provider adapters against recorded HTTP exchanges (tests/recordings/*.json).

Each recording holds request/response pairs in the provider's wire format. A replay transport
(``httpx2.MockTransport``) answers the adapter's requests in order and keeps what it was sent,
so each test checks both directions: the ModelResponse parsed from the recorded answer, and the
outgoing request (method, URL, JSON body) against the recorded one. Sleeps are recorded, not
slept, so retries and backoff delays are asserted exactly.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from morphz.encoding.blocks import CacheLayout
from morphz.errors import InputError
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import (
    AuthError,
    BadResponseError,
    ContextTooLongError,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ProviderError,
    RateLimitError,
    ToolCall,
    ToolSchema,
    Usage,
)
from morphz.runtime.models.openai_compat import PREAMBLE, OpenAIChatModel, refuses_consecutive_turns
from morphz.runtime.models.retry import (
    Backoff,
    Failure,
    Retry,
    call_with_retries,
    is_context_too_long,
    parse_retry_after,
)

RECORDINGS = Path(__file__).parent / "recordings"
KEY = "sk-test-key"
ENCODING = (
    "(protocol morphz-context-1 (see the protocol region of a full encoding))\n"
    "(inbox\n"
    ' (observation @e3 (kind user_message) (session default) "Prepare the deployment of the '
    'billing service to the production region."))\n'
    "(mind\n"
    ' (frame f1 (kind decision) (v 1) "Target region: eu-west-1."))\n'
    "(kernel\n (context ops)\n (session default)\n (activation a1)\n"
    " (mind-version 2)\n (clock 3))\n"
    "(evaluate)"
)


def _schema(name: str, description: str) -> dict[str, Any]:
    prop = {"type": "string", "description": description}
    return {
        "type": "object",
        "properties": {name: prop},
        "required": [name],
        "additionalProperties": False,
    }


TOOLS = (
    ToolSchema(
        "context_tx",
        "Commit a context transaction to your mind. Returns the receipt, or a typed error.",
        _schema("tx", "the (context-tx ...) text"),
    ),
    ToolSchema(
        "read_file",
        "Read a text file of the workspace; returns its content and content hash.",
        _schema("path", "a path inside the workspace"),
    ),
)
REQUEST = ModelRequest(ENCODING, TOOLS)
REPLY = (
    "The deployment of the billing service targets eu-west-1; the plan is ready for your review."
)
FIXED = Backoff(rand=lambda: 0.5)  # delays 1.125, 2.25, 4.5, ... (base 1, x2, +12.5%)


# -- replay


@dataclass
class Replay:
    """Answers requests with the recorded responses, in order, and keeps the requests."""

    exchanges: list[dict[str, Any]]
    sent: list[httpx2.Request] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)

    @classmethod
    def load(cls, name: str, case: str | None = None) -> Replay:
        data = json.loads((RECORDINGS / name).read_text(encoding="utf-8"))
        return cls(data["cases"][case]["exchanges"] if case else data["exchanges"])

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        if len(self.sent) >= len(self.exchanges):
            raise AssertionError("more requests than the recording holds")
        exchange = self.exchanges[len(self.sent)]
        self.sent.append(request)
        if "transport_error" in exchange:
            raise httpx2.ConnectError(exchange["transport_error"], request=request)
        answer = exchange["response"]
        content = answer["text"] if "text" in answer else json.dumps(answer["json"])
        return httpx2.Response(answer["status"], headers=answer["headers"], content=content)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))

    @property
    def first(self) -> dict[str, Any]:
        request: dict[str, Any] = self.exchanges[0]["request"]
        return request

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.sent]

    def check_requests(self) -> None:
        """Every recorded request was sent, exactly as recorded."""
        assert len(self.sent) == len(self.exchanges)
        for request, exchange in zip(self.sent, self.exchanges, strict=True):
            assert request.method == exchange["request"]["method"]
            assert str(request.url) == exchange["request"]["url"]
            assert json.loads(request.content) == exchange["request"]["body"]


def openai_model(replay: Replay, **kw: Any) -> OpenAIChatModel:
    kw.setdefault("base_url", replay.first["url"].removesuffix("/chat/completions"))
    kw.setdefault("api_key", KEY)
    kw.setdefault("backoff", FIXED)
    return OpenAIChatModel(
        replay.first["body"]["model"],
        http_client=replay.client(),
        sleep=replay.sleep,
        on_retry=replay.retries.append,
        **kw,
    )


def anthropic_model(replay: Replay, **kw: Any) -> AnthropicMessagesModel:
    kw.setdefault("api_key", KEY)
    kw.setdefault("backoff", FIXED)
    return AnthropicMessagesModel(
        replay.first["body"]["model"],
        base_url=replay.first["url"].removesuffix("/v1/messages"),
        http_client=replay.client(),
        sleep=replay.sleep,
        on_retry=replay.retries.append,
        **kw,
    )


def run(model: OpenAIChatModel | AnthropicMessagesModel, request: ModelRequest) -> ModelResponse:
    async def go() -> ModelResponse:
        try:
            return await model.request(request)
        finally:
            await model.aclose()

    return asyncio.run(go())


def fails(
    model: OpenAIChatModel | AnthropicMessagesModel, kind: type[ProviderError]
) -> ProviderError:
    with pytest.raises(kind) as info:
        run(model, REQUEST)
    return info.value


def replay_for(name: str) -> tuple[Replay, Callable[..., Any]]:
    replay = Replay.load(name)
    return replay, anthropic_model if name.startswith("anthropic") else openai_model


# -- OpenAI-compatible: requests and responses


def test_openai_text_reply_and_the_request_shape() -> None:
    replay = Replay.load("openai_chat_text.json")
    model = openai_model(replay)
    checked: Model = model
    assert checked.name == "openai:gpt-4o-mini"
    response = run(model, REQUEST)
    replay.check_requests()
    assert response.text == REPLY
    assert response.tool_calls == ()
    assert response.usage == Usage(input_tokens=1893, output_tokens=24, cached_input_tokens=1536)
    assert response.raw["id"] == "chatcmpl-C1q8ZkVh2oX7f3RmPqJ0aLwE9tYbN"
    sent = replay.sent[0]
    assert (sent.method, sent.url.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = json.loads(sent.content)
    assert set(body) == {"model", "messages", "tools", "max_tokens"}  # nothing provider-specific
    assert body["model"] == "gpt-4o-mini"
    assert body["max_tokens"] == 4096
    assert body["messages"] == [
        {"role": "system", "content": PREAMBLE},
        {"role": "user", "content": ENCODING},
    ]
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "context_tx",
            "description": TOOLS[0].description,
            "parameters": TOOLS[0].parameters,
        },
    }
    assert [t["function"]["name"] for t in body["tools"]] == ["context_tx", "read_file"]
    assert replay.sleeps == []


def test_openai_sends_a_delta_seed_and_each_increment_as_user_messages() -> None:
    replay = Replay.load("openai_chat_text.json")
    seed, one, two = (
        ENCODING,
        "\n(context-delta\n (arrived x))\n(evaluate)\n",
        "\n(context-delta)\n(evaluate)\n",
    )
    text = seed + one + two
    turns = (len(seed), len(seed + one))
    layout = CacheLayout(len(text), turns, (len(text),), turns)
    run(openai_model(replay), ModelRequest(text, TOOLS, layout=layout))
    messages = replay.bodies()[0]["messages"]
    assert messages[1:] == [{"role": "user", "content": t} for t in (seed, one, two)]
    # a layout without turns: one message
    replay = Replay.load("openai_chat_text.json")
    plain = CacheLayout(len(text), turns, (len(text),))
    run(openai_model(replay), ModelRequest(text, TOOLS, layout=plain))
    assert replay.bodies()[0]["messages"][1:] == [{"role": "user", "content": text}]


def test_openai_tool_calls_keep_the_raw_argument_text() -> None:
    replay = Replay.load("openai_chat_tool_call.json")
    response = run(openai_model(replay), REQUEST)
    replay.check_requests()
    recorded = replay.exchanges[0]["response"]["json"]["choices"][0]["message"]["tool_calls"]
    assert response.text is None
    assert response.tool_calls == tuple(
        ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in recorded
    )
    assert response.tool_calls[0].arguments == '{"path":"deploy/production.toml"}'
    assert response.tool_calls[1].name == "context_tx"
    assert response.usage == Usage(1893, 88, 0)


def test_openai_tool_results_are_sent_in_chat_completions_shapes() -> None:
    replay = Replay.load("openai_chat_tool_result.json")
    call = ToolCall(
        "call_Qm1nO8pK7rS2tU4vW6xY9zA0", "read_file", '{"path":"deploy/production.toml"}'
    )
    result = 'region = "us-east-2"\nreplicas = 3\n(sha256 9f2c...e1)'
    request = ModelRequest(
        ENCODING,
        TOOLS,
        (Message("assistant", "", (call,)), Message("tool", result, tool_call_id=call.id)),
    )
    response = run(openai_model(replay), request)
    replay.check_requests()
    messages = replay.bodies()[0]["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": call.id, "content": result}
    assert response.text == "The production configuration says us-east-2, not eu-west-1."
    assert response.usage == Usage(1966, 15, 1792)


def test_openai_without_tools_sends_no_tools_and_caps_output_tokens() -> None:
    replay = Replay.load("openai_chat_text.json")
    response = run(openai_model(replay, max_output_tokens=512), ModelRequest(ENCODING, ()))
    body = replay.bodies()[0]
    assert "tools" not in body
    assert body["max_tokens"] == 512
    assert response.text is not None


@pytest.mark.parametrize(
    ("name", "text", "calls", "usage"),
    [
        (
            "vllm_chat_tool_call.json",
            None,
            [("read_file", '{"path": "deploy/production.toml"}')],
            Usage(2011, 29, 0),
        ),
        ("ollama_chat_tool_call.json", "", [("context_tx", None)], Usage(1987, 41, 0)),
    ],
)
def test_local_servers_speak_the_same_api(
    name: str, text: str | None, calls: list[tuple[str, str | None]], usage: Usage
) -> None:
    replay = Replay.load(name)
    response = run(openai_model(replay), REQUEST)
    replay.check_requests()
    assert response.text == text
    assert [c.name for c in response.tool_calls] == [n for n, _ in calls]
    for call, (_, arguments) in zip(response.tool_calls, calls, strict=True):
        assert call.id
        assert arguments is None or call.arguments == arguments
        assert json.loads(call.arguments)
    assert response.usage == usage


def test_the_module_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.9:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    replay = Replay.load("openai_chat_text.json")
    model = OpenAIChatModel("gpt-4o-mini", http_client=replay.client(), sleep=replay.sleep)
    run(model, REQUEST)
    replay.check_requests()  # the recorded URL: https://api.openai.com/v1/chat/completions
    assert replay.sent[0].headers["authorization"] == "Bearer none"


# -- retries and backoff


def test_429_waits_the_retry_after_then_succeeds() -> None:
    replay = Replay.load("openai_error_429_then_ok.json")
    response = run(openai_model(replay), REQUEST)
    replay.check_requests()
    assert replay.sleeps == [2.0]
    assert [(r.attempt, r.delay) for r in replay.retries] == [(1, 2.0)]
    assert isinstance(replay.retries[0].error, RateLimitError)
    assert replay.retries[0].error.retry_after == 2.0
    assert response.usage == Usage(1893, 24, 1536)


def test_429_exhausted_backs_off_exponentially_then_raises() -> None:
    replay = Replay.load("openai_error_429_exhausted.json")
    error = fails(openai_model(replay, max_retries=3), RateLimitError)
    replay.check_requests()  # 4 requests: the first try and 3 retries
    assert replay.sleeps == [1.125, 2.25, 4.5]
    assert isinstance(error, RateLimitError) and error.retry_after is None
    # not chained to the SDK's exception (its request holds the key): a note says what it said
    assert error.__cause__ is None and error.__context__ is None
    assert "RateLimitError: " in error.__notes__[0], error.__notes__
    # in the message, which is what the engine records and prints
    assert "gave up after 3 retries (8 s): run again later" in error.message
    assert "Rate limit reached" in error.message


def test_an_exhausted_quota_is_not_retried() -> None:
    replay = Replay.load("openai_error_429_quota.json")
    fails(openai_model(replay), RateLimitError)
    assert (len(replay.sent), replay.sleeps) == (1, [])


def test_server_errors_are_retried_honouring_retry_after() -> None:
    replay = Replay.load("openai_error_500_then_ok.json")
    response = run(openai_model(replay), REQUEST)
    replay.check_requests()
    assert replay.sleeps == [1.125, 1.0]  # backoff for the 500, Retry-After: 1 for the 503
    assert response.text is not None


def test_server_errors_exhausted_raise_a_provider_error() -> None:
    replay = Replay.load("openai_error_502_exhausted.json")
    error = fails(openai_model(replay, max_retries=2), ProviderError)
    replay.check_requests()
    assert type(error) is ProviderError
    assert replay.sleeps == [1.125, 2.25]
    assert "HTTP 502" in error.message and "Bad Gateway" in error.message
    # not chained to the SDK's exception (its request holds the key): a note says what it said
    assert error.__cause__ is None and error.__context__ is None
    assert "InternalServerError: " in error.__notes__[0], error.__notes__


def test_connection_errors_are_retried() -> None:
    replay = Replay.load("llamacpp_connect_error_then_ok.json")
    response = run(openai_model(replay), REQUEST)
    replay.check_requests()
    assert replay.sleeps == [1.125]
    assert "cannot reach" in replay.retries[0].error.message
    assert response.text == "Ready: the plan targets eu-west-1."
    assert response.usage == Usage(2104, 11, 0)


def test_max_retries_zero_raises_at_once() -> None:
    replay = Replay.load("openai_error_429_then_ok.json")
    fails(openai_model(replay, max_retries=0), RateLimitError)
    assert (len(replay.sent), replay.sleeps) == (1, [])


def test_default_backoff_has_bounded_jitter() -> None:
    backoff = Backoff()
    for attempt in range(8):
        step = min(30.0, 2.0**attempt)
        for _ in range(20):
            delay = backoff.delay(attempt, None)
            assert delay is not None and step <= delay <= step * 1.25
    assert backoff.delay(0, 7.5) == 7.5
    assert backoff.delay(0, 3600.0) is None  # not waited for: raised for the caller to decide


def test_a_retry_after_too_long_is_raised_without_waiting() -> None:
    sleeps: list[float] = []
    attempts = 0

    async def call() -> str:
        nonlocal attempts
        attempts += 1
        raise KeyError("quota")

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    def translate(exc: Exception) -> Failure:
        return Failure(RateLimitError("wait an hour", 3600.0), True, 3600.0)

    retry = call_with_retries(call, translate, max_retries=3, sleep=sleep, backoff=Backoff())
    with pytest.raises(RateLimitError):
        asyncio.run(retry)
    assert (attempts, sleeps) == (1, [])


def test_exceptions_that_are_not_provider_failures_pass_unchanged() -> None:
    async def call() -> str:
        raise KeyError("a bug")

    retry = call_with_retries(
        call, lambda exc: None, max_retries=3, sleep=asyncio.sleep, backoff=Backoff()
    )
    with pytest.raises(KeyError, match="a bug"):
        asyncio.run(retry)


def test_retry_after_headers() -> None:
    now = datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 8, 4, 9, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "271", "retry-after": "1"}) == 0.271
    assert parse_retry_after({"retry-after": later}, now=now.timestamp()) == 30.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


# -- typed errors


@pytest.mark.parametrize(
    "name", ["openai_error_401.json", "openai_error_403.json", "anthropic_error_401.json"]
)
def test_auth_errors_say_to_check_key_and_base_url(name: str) -> None:
    replay, make = replay_for(name)
    error = fails(make(replay), AuthError)
    replay.check_requests()
    assert "Check the API key and the base URL" in error.message
    assert replay.first["url"].split("/v1")[0] in error.message
    assert KEY not in error.message
    assert replay.sleeps == []


@pytest.mark.parametrize(
    "name",
    [
        "openai_context_too_long.json",
        "vllm_context_too_long.json",
        "llamacpp_context_too_long.json",
        "anthropic_context_too_long.json",
        "anthropic_request_too_large_413.json",
    ],
)
def test_context_too_long_is_typed_and_not_retried(name: str) -> None:
    replay, make = replay_for(name)
    error = fails(make(replay), ContextTooLongError)
    replay.check_requests()
    assert replay.sleeps == []
    assert "too long" in error.message


def test_other_client_errors_are_not_retried() -> None:
    replay = Replay.load("openai_error_404_model.json")
    error = fails(openai_model(replay), ProviderError)
    assert type(error) is ProviderError
    assert "check the model name and the base URL" in error.message
    assert (len(replay.sent), replay.sleeps) == (1, [])


@pytest.mark.parametrize(
    ("name", "case"),
    [
        ("openai_bad_response.json", "no_choices"),
        ("openai_bad_response.json", "error_body_with_200"),
        ("openai_bad_response.json", "malformed_json"),
        ("openai_bad_response.json", "tool_call_without_name"),
        ("anthropic_bad_response.json", "no_content"),
        ("anthropic_bad_response.json", "tool_use_without_name"),
        ("anthropic_bad_response.json", "malformed_json"),
        ("anthropic_bad_response.json", "error_body_with_200"),
    ],
)
def test_bad_responses(name: str, case: str) -> None:
    replay = Replay.load(name, case)
    make = anthropic_model if name.startswith("anthropic") else openai_model
    fails(make(replay), BadResponseError)
    replay.check_requests()
    assert replay.sleeps == []


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 128000 tokens. However, your messages resulted",
        "Error code: 400 - {'code': 'context_length_exceeded'}",
        "The prompt (total length 9000) is too long to fit into the model (context length 8192).",
        "the request exceeds the available context size, try increasing it",
        "input length exceeds maximum context length",
        "prompt too long; exceeded max context length by 1200 tokens",
        "prompt is too long: 215211 tokens > 200000 maximum",
        "Too many tokens in the request",
    ],
)
def test_context_too_long_phrasings(text: str) -> None:
    assert is_context_too_long(text)


@pytest.mark.parametrize(
    "text",
    [
        "Invalid 'tools[0].function.name': string does not match pattern.",
        "max_tokens is too large: 50000. This model supports at most 16384 completion tokens",
        "Rate limit reached for gpt-4o-mini. Please try again in 271ms.",
    ],
)
def test_other_errors_are_not_context_too_long(text: str) -> None:
    assert not is_context_too_long(text)


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="max_retries"):
        OpenAIChatModel("gpt-4o-mini", api_key=KEY, max_retries=-1)
    replay = Replay.load("openai_chat_text.json")
    for message in (Message("tool", "result"), Message("system", "be brief")):
        with pytest.raises(InputError):
            run(openai_model(replay), ModelRequest(ENCODING, TOOLS, (message,)))
    assert replay.sent == []


# -- Anthropic Messages


def test_anthropic_text_reply_and_the_request_shape() -> None:
    replay = Replay.load("anthropic_text.json")
    model = anthropic_model(replay)
    assert model.name == "anthropic:claude-sonnet-4-6"
    response = run(model, REQUEST)
    replay.check_requests()
    assert response.text == REPLY
    assert response.usage == Usage(
        input_tokens=357 + 1536, output_tokens=26, cached_input_tokens=1536
    )
    sent = replay.sent[0]
    assert (sent.method, sent.url.path) == ("POST", "/v1/messages")
    assert "anthropic-version" in sent.headers
    assert KEY in (sent.headers.get("x-api-key", ""), sent.headers.get("authorization", "")[7:])
    body = json.loads(sent.content)
    assert set(body) == {"model", "system", "messages", "tools", "max_tokens"}
    assert body["system"] == PREAMBLE
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": ENCODING}]}]
    assert body["tools"][1] == {
        "name": "read_file",
        "description": TOOLS[1].description,
        "input_schema": TOOLS[1].parameters,
    }
    assert body["max_tokens"] == 4096


LAYOUT = CacheLayout(len(ENCODING), (40, ENCODING.index("\n(mind")), (40, len(ENCODING)))


@pytest.mark.parametrize(
    ("cache", "control"),
    [("5m", {"type": "ephemeral"}), ("1h", {"type": "ephemeral", "ttl": "1h"})],
)
def test_anthropic_cuts_the_encoding_and_marks_the_cache_layout(
    cache: str, control: dict[str, str]
) -> None:
    replay = Replay.load("anthropic_text.json")
    run(anthropic_model(replay, prompt_cache=cache), ModelRequest(ENCODING, TOOLS, layout=LAYOUT))
    blocks = replay.bodies()[0]["messages"][0]["content"]
    assert "".join(b["text"] for b in blocks) == ENCODING
    mind = ENCODING.index("\n(mind")
    assert [b["text"] for b in blocks] == [ENCODING[:40], ENCODING[40:mind], ENCODING[mind:]]
    assert [b.get("cache_control") for b in blocks] == [control, None, control]
    assert all(b["type"] == "text" for b in blocks)


def test_anthropic_prompt_cache_off_or_no_layout_sends_one_unmarked_block() -> None:
    for cache, layout in (("off", LAYOUT), ("5m", None)):
        replay = Replay.load("anthropic_text.json")
        run(
            anthropic_model(replay, prompt_cache=cache),
            ModelRequest(ENCODING, TOOLS, layout=layout),
        )
        assert replay.bodies()[0]["messages"][0]["content"] == [{"type": "text", "text": ENCODING}]


def test_anthropic_sends_at_most_four_marks_the_last_ones() -> None:
    cuts = tuple(range(10, 70, 10))
    layout = CacheLayout(len(ENCODING), cuts, (*cuts, len(ENCODING)))
    replay = Replay.load("anthropic_text.json")
    run(anthropic_model(replay), ModelRequest(ENCODING, TOOLS, layout=layout))
    blocks = replay.bodies()[0]["messages"][0]["content"]
    assert len(blocks) == 7
    assert ["cache_control" in b for b in blocks] == [False] * 3 + [True] * 4


def test_anthropic_refuses_an_unknown_prompt_cache() -> None:
    with pytest.raises(InputError, match="prompt_cache must be 5m, 1h or off"):
        AnthropicMessagesModel("claude", api_key=KEY, prompt_cache="forever")


def test_anthropic_tool_use_blocks_become_tool_calls() -> None:
    replay = Replay.load("anthropic_tool_use.json")
    response = run(anthropic_model(replay), REQUEST)
    replay.check_requests()
    blocks = replay.exchanges[0]["response"]["json"]["content"]
    assert response.text == "I'll check the production configuration first."
    assert [(c.id, c.name) for c in response.tool_calls] == [
        (b["id"], b["name"]) for b in blocks[1:]
    ]
    for call, block in zip(response.tool_calls, blocks[1:], strict=True):
        assert json.loads(call.arguments) == block["input"]
    assert "—" in response.tool_calls[1].arguments  # the text as written, not \u-escaped
    assert response.usage == Usage(1893 + 1536, 167, 0)


def test_anthropic_tool_results_merge_into_one_user_turn() -> None:
    replay = Replay.load("anthropic_tool_result.json")
    calls = (
        ToolCall(
            "toolu_01A9sD8fG7hJ6kL5zX4cV3bN", "read_file", '{"path": "deploy/production.toml"}'
        ),
        ToolCall("toolu_01Z9xY8wV7uT6sR5qP4oN3mL", "read_file", '{"path": "deploy/'),
    )
    request = ModelRequest(
        ENCODING,
        TOOLS,
        (
            Message("assistant", "I'll check the production configuration first.", calls),
            Message("tool", 'region = "us-east-2"\nreplicas = 3', tool_call_id=calls[0].id),
            Message(
                "tool",
                "error: the arguments of read_file are not valid JSON",
                tool_call_id=calls[1].id,
            ),
        ),
    )
    response = run(anthropic_model(replay), request)
    replay.check_requests()
    messages = replay.bodies()[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][2]["input"] == {"_unparsed_arguments": '{"path": "deploy/'}
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "tool_result"]
    assert response.text == "The production configuration says us-east-2, not eu-west-1."


def test_anthropic_overloaded_is_retried_with_backoff() -> None:
    replay = Replay.load("anthropic_overloaded_529.json")
    response = run(anthropic_model(replay), REQUEST)
    replay.check_requests()
    assert replay.sleeps == [1.125, 2.25]
    assert all("HTTP 529" in r.error.message for r in replay.retries)
    assert response.text is not None


def test_anthropic_rate_limit_waits_the_retry_after() -> None:
    replay = Replay.load("anthropic_error_429.json")
    run(anthropic_model(replay), REQUEST)
    replay.check_requests()
    assert replay.sleeps == [15.0]
    assert isinstance(replay.retries[0].error, RateLimitError)


def test_anthropic_rate_limit_exhausted_raises() -> None:
    replay = Replay.load("anthropic_error_429.json")
    error = fails(anthropic_model(replay, max_retries=0), RateLimitError)
    assert isinstance(error, RateLimitError) and error.retry_after == 15.0
    # not chained to the SDK's exception (its request holds the key): a note says what it said
    assert error.__cause__ is None and error.__context__ is None
    assert "RateLimitError: " in error.__notes__[0], error.__notes__


def test_without_the_anthropic_package_the_error_says_what_to_install() -> None:
    script = (
        "import sys; sys.modules['anthropic'] = None\n"
        "from morphz.errors import InputError\n"
        "from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel\n"
        "try:\n    AnthropicMessagesModel('claude-sonnet-4-6', api_key='k')\n"
        "except InputError as exc:\n    print(exc.message)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'morphz[anthropic]'" in out.stdout


def test_only_a_refusal_of_consecutive_user_turns_merges_them() -> None:
    """The adapter sends a request again as one message only when the server said roles must
    alternate and the request had two user messages in a row; any other failure stands."""
    split = [{"role": "system"}, {"role": "user"}, {"role": "user"}]
    merged = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "user"}]
    refusal = ProviderError("HTTP 400: Conversation roles must alternate user/assistant/...")
    assert refuses_consecutive_turns(refusal, split)
    assert not refuses_consecutive_turns(refusal, merged)
    assert not refuses_consecutive_turns(ProviderError("HTTP 400: bad tool schema"), split)
    too_long = ContextTooLongError("roles must alternate, and the prompt is too long")
    assert not refuses_consecutive_turns(too_long, split)
