"""Review 13 (the provider adapters and the model-request path, end to end). Each test fails
against the code as it was reviewed and states the behaviour expected of it. Provider answers
come from a real HTTP server on loopback (stdlib, raw status, headers and bytes) reached through
the official SDKs, or from an in-memory transport where only the request the SDK builds matters;
`morphz exec` runs as a user runs it (configuration file, environment). No network."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner

from loopback import Loopback
from morphz.interfaces.cli import main
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ProviderError
from morphz.runtime.models.openai_compat import OpenAIChatModel
from stores import user_config

KEY = "sk-review13-secret-4711"
JSON = {"Content-Type": "application/json"}
# what the answer function gets (path, lower-case headers, JSON body) and returns (status,
# headers, body bytes)
Answer = Callable[[str, dict[str, str], dict[str, Any]], tuple[int, dict[str, str], bytes]]


class RawServer(Loopback):
    """A loopback HTTP server answering each POST with ``answer(...)`` as given, byte for byte."""

    def __init__(self, answer: Answer) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append(body)
                status, extra, data = answer(self.path, headers, body)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        super().__init__(Handler)


@pytest.fixture
def serve(loopback_only: None) -> Iterator[Callable[[Answer], RawServer]]:
    started: list[RawServer] = []

    def start(answer: Answer) -> RawServer:
        server = RawServer(answer).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__()


async def _no_wait(_delay: float) -> None:
    return None


def _openai(server: RawServer) -> OpenAIChatModel:
    return OpenAIChatModel("loop-model", base_url=f"{server.root}/v1", api_key=KEY, sleep=_no_wait)


def _request(model: OpenAIChatModel | AnthropicMessagesModel) -> None:
    async def go() -> None:
        try:
            await model.request(ModelRequest("(context-encoding)", ()))
        finally:
            await model.aclose()

    asyncio.run(go())


def _exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, config: str) -> Any:
    """`morphz exec` in a fresh project folder with ``config`` as the user's morphz.toml (it
    names base URLs, which a project's may not)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    user_config(tmp_path / "home", config)
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    args = ["exec", "Say hello.", "--model", spec, "--db", str(tmp_path / "m.db")]
    return CliRunner().invoke(main, [*args, "--workspace", str(workspace)])


# -- timeouts


def test_anthropic_keeps_a_short_connect_timeout() -> None:
    """The Anthropic adapter passes ``timeout=REQUEST_TIMEOUT`` (a bare float, 600) on every
    request so the SDK does not refuse a large output budget; a float sets every phase, so
    the connect timeout goes from the SDK's 5 seconds to 10 minutes. An endpoint that drops
    packets (a wrong base_url, a firewall) then hangs each attempt for 10 minutes, 40 with the
    retries, before "cannot reach". Only the read may need 10 minutes."""
    timeouts: list[dict[str, float]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        timeouts.append(request.extensions["timeout"])
        content = [{"type": "text", "text": "hello"}]
        usage = {"input_tokens": 10, "output_tokens": 1}
        body = {"type": "message", "content": content, "stop_reason": "end_turn", "usage": usage}
        return httpx2.Response(200, json=body)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    _request(AnthropicMessagesModel("claude-x", api_key=KEY, http_client=client))
    (timeout,) = timeouts
    assert timeout["read"] >= 600  # the long read stays
    assert timeout["connect"] <= 60, timeout  # the SDK's own connect timeout is 5 seconds


# -- too-long refusals of OpenAI-compatible servers


TOO_LONG = {
    # Gemini (its OpenAI-compatible endpoint, as LiteLLM-style proxies forward it)
    "gemini": (
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (1200293) exceeds the maximum number of "
                "tokens allowed (1048576).",
                "status": "INVALID_ARGUMENT",
            }
        },
    ),
    # Hugging Face text-generation-inference (its Messages API answers HTTP 422)
    "tgi": (
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
            "Given: 4000 `inputs` tokens and 200 `max_new_tokens`",
            "error_type": "validation",
        },
    ),
    # LM Studio's server
    "lmstudio": (
        400,
        {
            "error": "Trying to keep the first 15857 tokens when context the overflows. However, "
            "the model is loaded with context length of only 4096 tokens, which is not enough. "
            "Try to load the model with a larger context length, or provide a shorter input"
        },
    ),
}


@pytest.mark.parametrize("server_kind", sorted(TOO_LONG))
def test_too_long_refusals_of_common_compatible_servers_are_context_too_long(
    serve: Callable[[Answer], RawServer], server_kind: str
) -> None:
    """The engine shrinks the request (maintenance, a ceiling) only on ContextTooLongError; the
    phrasings in retry._CONTEXT_TOO_LONG miss Gemini's, TGI's (which also answers 422, and only
    400 and 413 are read for it) and LM Studio's, so the activation fails with "the provider
    refused the request" where it should enter maintenance."""
    status, body = TOO_LONG[server_kind]
    server = serve(lambda _p, _h, _b: (status, JSON, json.dumps(body).encode()))
    with pytest.raises(ContextTooLongError):
        _request(_openai(server))
    assert len(server.requests) == 1  # not retried


def test_an_error_body_sent_as_a_list_keeps_the_providers_words(
    serve: Callable[[Answer], RawServer],
) -> None:
    """Gemini's OpenAI-compatible endpoint sends its errors as a one-element JSON list
    (``[{"error": {...}}]``). retry._body_parts reads only an object or a string, and the SDK's
    message for such a body is "Error code: 400", so every Gemini error (a bad key, a bad
    argument, a too-long input) reaches the user as "answered HTTP 400: Error code: 400"."""
    said = "API key not valid. Please pass a valid API key."
    body = [{"error": {"code": 400, "message": said, "status": "INVALID_ARGUMENT"}}]
    server = serve(lambda _p, _h, _b: (400, JSON, json.dumps(body).encode()))
    with pytest.raises(ProviderError) as caught:
        _request(_openai(server))
    assert said in caught.value.message


# -- what reaches the CLI and the store


def test_an_api_key_the_server_echoes_is_kept_out_of_the_output_and_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[[Answer], RawServer]
) -> None:
    """A gateway that quotes the credential it refused ("invalid token Bearer sk-...") has the
    key copied into the error message, the activation's recorded reason (the event log) and the
    CLI's output. The adapter knows its key: it should never let it out."""

    def refuse(_path: str, headers: dict[str, str], _body: dict[str, Any]) -> Any:
        said = f"invalid token: {headers.get('authorization', '')}"
        return 401, JSON, json.dumps({"error": {"message": said, "type": "auth"}}).encode()

    server = serve(refuse)
    config = f'[openai]\nbase_url = "{server.root}/v1"\n'
    result = _exec(tmp_path, monkeypatch, "openai:loop-model", config)
    assert result.exit_code == 1
    assert "provider-auth" in result.output  # the failure is typed and reaches the user
    assert KEY not in result.output
    assert KEY.encode() not in (tmp_path / "m.db").read_bytes()


def test_a_failure_after_retries_says_they_were_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[[Answer], RawServer]
) -> None:
    """retry.call_with_retries notes "gave up after N retries" on the error it raises, but the
    engine records and prints only ``exc.message`` (engine.py, the ProviderError branch of
    loop), so an overloaded provider retried three times reads as one refusal: the user cannot
    tell that waiting was already tried."""
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    # a short stated wait keeps the test quick (since fix 16g a Retry-After of 0 means the backoff)
    server = serve(
        lambda _p, _h, _b: (529, {**JSON, "retry-after": "0.01"}, json.dumps(overloaded).encode())
    )
    config = f'[anthropic]\nbase_url = "{server.root}"\n'
    result = _exec(tmp_path, monkeypatch, "anthropic:claude-x", config)
    assert result.exit_code == 1
    assert len(server.requests) == 4  # three retries were made
    assert "3 retries" in result.output, result.output


def test_a_rate_limit_too_long_to_wait_says_how_long_the_provider_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: Callable[[Answer], RawServer]
) -> None:
    """A 429 whose Retry-After is over Backoff.max_retry_after is raised at once (by design),
    but the message drops the wait the provider asked for (RateLimitError.retry_after is never
    shown), so the user is told "rate limited" with no idea when to run again."""
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}
    server = serve(
        lambda _p, _h, _b: (429, {**JSON, "retry-after": "120"}, json.dumps(limited).encode())
    )
    config = f'[anthropic]\nbase_url = "{server.root}"\n'
    result = _exec(tmp_path, monkeypatch, "anthropic:claude-x", config)
    assert result.exit_code == 1
    assert "provider-rate-limit" in result.output
    assert "120" in result.output, result.output


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:1143a/v1",  # a typo in the port: httpx2.InvalidURL from the SDK client
        "http://127.0.0.1:99999/v1",  # a port out of range: OverflowError from connect()
        "127.0.0.1:11434/v1",  # no scheme: retried as a connection error, then "cannot reach"
    ],
)
def test_a_base_url_that_is_not_a_url_is_refused_before_the_store_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: None, base_url: str
) -> None:
    """cli.md: "Everything is checked before the store is opened: a refused command (exit 1)
    creates no store and no context." A base_url is only text to config._text_table: a bad
    port crashes `morphz exec` with a traceback (httpx2.InvalidURL from building the SDK
    client, or OverflowError from the socket, which the SDK does not wrap, so the activation
    is recorded as interrupted by "an unexpected error"), and a URL without http:// is retried
    three times with backoff before failing the activation."""
    result = _exec(
        tmp_path, monkeypatch, "openai:loop-model", f'[openai]\nbase_url = "{base_url}"\n'
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # no traceback
    assert "base_url" in result.output
    assert not (tmp_path / "m.db").exists()
