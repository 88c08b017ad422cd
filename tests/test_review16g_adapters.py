"""Review 16g: the model provider adapters as a demanding user running real providers meets
them. Each test fails against the code as it was reviewed and states the behaviour expected of
it. Provider answers come from an in-memory transport (httpx2.MockTransport) or a real HTTP server
on loopback reached through the official SDKs; `morphz exec` runs as a user runs it. No
network."""

from __future__ import annotations

import json
import traceback
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx2
import pytest

import morphz
from adapter_calls import request_once
from loopback import Loopback
from morphz.errors import InputError, MorphzError
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import ContextTooLongError
from morphz.runtime.models.openai_compat import OpenAIChatModel
from morphz.runtime.models.retry import Backoff, refused_share
from test_review11_adapters import Server, activate, in_turn

KEY = "sk-review16g-secret-90210"
FIXED = Backoff(rand=lambda: 0.5)  # 1.125, 2.25, 4.5 s
OK = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}


class Exchange:
    """An in-memory provider answering with ``answers`` in turn (the last one again when they run
    out): (status, headers, body) triples; it keeps the requests and the sleeps."""

    def __init__(self, answers: list[tuple[int, dict[str, str], Any]]) -> None:
        self.answers = answers
        self.sent: list[httpx2.Request] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        status, headers, body = self.answers[min(len(self.sent), len(self.answers)) - 1]
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx2.Response(status, headers=headers, content=content)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def openai(self, **kw: Any) -> OpenAIChatModel:
        kw.setdefault("base_url", "http://provider.test/v1")
        kw.setdefault("api_key", KEY)
        return OpenAIChatModel(
            "m",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler)),
            sleep=self.sleep,
            backoff=FIXED,
            **kw,
        )


def _failure(model: OpenAIChatModel | AnthropicMessagesModel) -> BaseException:
    try:
        request_once(model)
    except Exception as exc:
        return exc
    raise AssertionError("the request did not fail")


# -- secrets


def test_a_key_the_http_client_refuses_in_a_header_is_not_shown_nor_misread_as_unreachable(
    loopback_only: None,
) -> None:
    """An API key read with its trailing newline (a secret mounted from a file, an env file
    written by an editor: config.py passes OPENAI_API_KEY as it is) cannot go into a header: the
    HTTP client raises "Illegal header value b'Bearer sk-...\\n'", the SDK wraps it as a
    connection error, and the adapter says "cannot reach the server ... check that the server is
    running and that the base URL is right" after three retries with backoff. The text holds the
    whole key written as Python bytes, which the redaction (looking for the key with a real
    newline) never finds: `morphz exec` prints it and the activation's reason stores it.
    Expected: the key is never shown, and the error does not send the user to the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            raw = json.dumps(OK).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            return

    async def no_wait(_delay: float) -> None:
        return None

    with Loopback(Handler) as server:
        try:  # (fix 16g: refused as the adapter is made, naming where the key is set)
            model = OpenAIChatModel(
                "loop", base_url=f"{server.root}/v1", api_key=KEY + "\n", sleep=no_wait
            )
        except InputError as exc:
            error: BaseException = exc
        else:
            error = _failure(model)
    assert KEY not in str(error), str(error)
    assert "cannot reach" not in str(error), str(error)


def test_a_key_with_a_character_a_header_cannot_hold_is_a_typed_error() -> None:
    """A key pasted with a character outside ASCII (an ellipsis or a non-breaking space copied
    from a web page) makes the OpenAI SDK raise a bare UnicodeEncodeError while it builds the
    headers, inside the retried call (openai_compat.py send, via sdk.py attempt): nothing
    translates it, so the engine ends the activation "interrupted" by "an unexpected error" and
    the CLI shows a Python codec message. Expected: a typed MorphzError that says the API key
    holds a character that cannot be sent, naming where it is set (and not the key)."""
    exchange = Exchange([(200, {}, OK)])
    try:  # (fix 16g: refused as the adapter is made)
        error: BaseException = _failure(exchange.openai(api_key="sk-review16g-secret\u2026"))
    except InputError as exc:
        error = exc
    assert isinstance(error, MorphzError), repr(error)
    assert "key" in str(error).lower(), str(error)
    assert "sk-review16g-secret" not in str(error), str(error)
    assert "OPENAI_API_KEY" in str(error), str(error)
    assert not exchange.sent


def test_the_sdk_exception_chained_to_a_provider_error_does_not_hold_the_key() -> None:
    """The adapter redacts the key from the ProviderError it raises, but raises it ``from`` the
    SDK's exception (retry.py call_with_retries, ``raise given_up(...) from exc``), whose
    message and body still hold the server's words unredacted. Any traceback of the error (a
    library user's ``logging.exception``, asyncio's "exception was never retrieved", a test
    report) prints the chain, key included. Expected: nothing reachable from the raised error's
    traceback shows the key."""
    refused = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    error = _failure(Exchange([(401, {}, refused)]).openai())
    assert KEY not in str(error)  # the message itself is redacted
    shown = "".join(traceback.format_exception(error))
    assert KEY not in shown, shown[-600:]


def test_a_base_url_with_a_query_neither_breaks_the_path_nor_shows_the_secret() -> None:
    """A base URL with a query (Gemini-style ``?key=...``, Azure's ``?api-version=...``) passes
    check_base_url (sdk.py). The SDK then appends the endpoint to the raw path, query included,
    so the request goes to ``/v1/?key=SECRETchat/completions`` (a 404 from any server), and every
    error names the base URL with its query (sdk.py without_userinfo hides only user:password):
    the secret goes into the message, the activation's reason and the store. Expected: the URL
    is refused with an InputError that does not show the secret, or the request goes to
    ``.../chat/completions`` and no error shows the secret."""
    secret = "AIzaSy-review16g-url-secret"
    exchange = Exchange([(500, {}, {"error": {"message": "upstream failed"}})])
    try:
        model = exchange.openai(base_url=f"http://provider.test/v1?key={secret}", max_retries=0)
    except InputError as exc:
        assert secret not in str(exc), str(exc)
        return
    error = _failure(model)
    assert exchange.sent[0].url.path.endswith("/chat/completions"), str(exchange.sent[0].url)
    assert secret not in str(error), str(error)


# -- retries


@pytest.mark.parametrize(
    "retry_after",
    [
        "0",
        "-30",
        format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True),  # clock skew
    ],
    ids=["zero", "negative", "past-date"],
)
def test_a_retry_after_of_no_time_does_not_spend_every_retry_at_once(retry_after: str) -> None:
    """A Retry-After of 0, a negative number or an HTTP date already past (the server's clock
    behind ours) is taken as "wait 0 s" (retry.py parse_retry_after clamps to 0, and
    Backoff.delay uses any stated wait as given, without jitter): an overloaded provider gets all
    the retries within milliseconds, and concurrent activations retry in lockstep. The official
    SDKs use a stated wait only when it is above 0 and fall back to their backoff otherwise.
    Expected: every retry waits at least the backoff's first delay."""
    overloaded = {"error": {"message": "Overloaded", "type": "server_error"}}
    exchange = Exchange([(503, {"retry-after": retry_after}, overloaded)] * 3 + [(200, {}, OK)])
    response = request_once(exchange.openai())
    assert response.text == "hi"
    assert len(exchange.sleeps) == 3
    assert min(exchange.sleeps) >= 1.0, exchange.sleeps


# -- provider error shapes


def test_openrouter_an_upstream_too_long_refusal_is_context_too_long() -> None:
    """OpenRouter wraps an upstream provider's refusal as ``{"error": {"code": 400, "message":
    "Provider returned error", "metadata": {"raw": "<the upstream body>", "provider_name":
    ...}}}`` (its errors page). error_text (retry.py _body_parts) keeps only ``message``, so a
    too-long refusal from the model behind OpenRouter reads "Provider returned error [400]": the
    activation fails instead of entering maintenance, and its reason says nothing of what the
    upstream said. Expected: ContextTooLongError, the upstream's words in the message."""
    upstream = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
        },
    }
    body = {
        "error": {
            "code": 400,
            "message": "Provider returned error",
            "metadata": {"raw": json.dumps(upstream), "provider_name": "Anthropic"},
        }
    }
    error = _failure(Exchange([(400, {}, body)]).openai())
    assert isinstance(error, ContextTooLongError), str(error)
    assert "prompt is too long" in str(error)


def test_openrouter_an_error_inside_the_choice_is_reported_with_its_words(
    ctx: morphz.Context, workspace: Path
) -> None:
    """OpenRouter (and gateways copying its schema) answers HTTP 200 when the model failed after
    it started: the choice carries ``finish_reason: "error"`` and an ``error`` object (code and
    message). parse_completion (openai_compat.py) reads only the message, so the activation
    fails as "the model returned neither a reply ... nor tool calls: the provider stopped the
    reply (error)": the provider's words and its status (here 502, a retryable upstream failure)
    are lost and nothing is retried. Expected: the activation's reason carries the provider's
    message."""
    choice = {
        "index": 0,
        "finish_reason": "error",
        "native_finish_reason": "error",
        "message": {"role": "assistant", "content": ""},
        "error": {"code": 502, "message": "Upstream model crashed while generating"},
    }
    body = {
        "id": "gen-1",
        "choices": [choice],
        "usage": {"prompt_tokens": 10, "completion_tokens": 0},
    }
    server = Server(in_turn([body]))
    result = activate(ctx, server.openai(), workspace, "Say hello.")
    assert result.state == "failed"
    assert "Upstream model crashed" in (result.reason or ""), result.reason


@pytest.mark.parametrize(
    ("said", "share"),
    [
        # vLLM (current): "However, your request has N input tokens"
        (
            "This model's maximum context length is 8192 tokens. However, your request has "
            "40960 input tokens. Please reduce the length of the input messages.",
            8192 / 40960,
        ),
        # llama.cpp server (current): exceed_context_size_error
        ("request (20480 tokens) exceeds the available context size (4096 tokens)", 0.2),
        # vLLM, input plus output over the window: the input that fits is W - K
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum "
            "context length is 8192 tokens and your request has 5000 input tokens "
            "(4096 > 8192 - 5000).",
            (8192 - 4096) / 5000,
        ),
        # OpenRouter's own check: "you requested about N tokens (X of text input, K in the output)"
        (
            "This endpoint's maximum context length is 8192 tokens. However, you requested about "
            "22528 tokens (20480 of text input, 2048 in the output). Please reduce the length of "
            'either one, or use the "middle-out" transform to compress your prompt automatically.',
            (8192 - 2048) / 20480,
        ),
    ],
    ids=["vllm", "llama.cpp", "vllm-output", "openrouter"],
)
def test_the_numbers_of_current_too_long_wordings_set_the_share(said: str, share: float) -> None:
    """refused_share (retry.py _SHARE_FORMS) reads the numbers of older vLLM and OpenAI wordings
    but not those vLLM, llama.cpp's server and OpenRouter send today: each falls back to a
    quarter less, so a request five times over a local 4k or 8k window is refused five or six
    times before one fits (and one just over the window is cut by a quarter where a few percent
    would do). Expected: the share the numbers state."""
    assert refused_share(said) == pytest.approx(share, abs=0.01)


# -- usage


def test_deepseek_cached_tokens_are_recorded() -> None:
    """DeepSeek's OpenAI-compatible API reports its prefix cache hits as
    ``usage.prompt_cache_hit_tokens`` (and misses as ``prompt_cache_miss_tokens``), not as
    OpenAI's ``prompt_tokens_details.cached_tokens``. chat_usage (openai_compat.py) reads only
    OpenAI's name, so every DeepSeek reply records 0 cached tokens: `morphz context requests`
    and the evals' cached share say the cache layout never helps. Expected: the hit count."""
    usage = {
        "prompt_tokens": 3000,
        "completion_tokens": 12,
        "total_tokens": 3012,
        "prompt_cache_hit_tokens": 2816,
        "prompt_cache_miss_tokens": 184,
    }
    response = request_once(Exchange([(200, {}, {**OK, "usage": usage})]).openai())
    assert response.usage is not None
    assert response.usage.cached_input_tokens == 2816, response.usage
