"""Fix 14, the provider adapters: an answer with HTTP 200 whose body is an error goes through the
same translation (typed, retried by the status it states) and the same key redaction as an HTTP
error; every error an adapter raises is redacted; LM Studio's too-long refusals state numbers
that are read; an error says what to do next even when no retry was made. Provider answers come
from a real HTTP server on loopback reached through the official SDKs. No network."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapter_calls import request_once
from loopback import Request, Server
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import (
    AuthError,
    BadResponseError,
    ContextTooLongError,
    ProviderError,
    RateLimitError,
)
from morphz.runtime.models.openai_compat import OpenAIChatModel
from morphz.runtime.models.retry import (
    BACKOFF,
    Retry,
    is_context_too_long,
    refused_share,
)

KEY = "sk-fix14-secret-0815"
OK = {
    "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}
Answers = Callable[[list[Any]], Server]


async def _no_wait(_delay: float) -> None:
    return None


@pytest.fixture
def serve(loopback_only: None) -> Iterator[Answers]:
    """A loopback server answering with each of ``answers`` in turn: a JSON object or bytes sent
    as they are, with HTTP 200, or a (status, answer) pair."""
    started: list[Server] = []

    def start(answers: list[Any]) -> Server:
        queue = [a if isinstance(a, tuple) else (200, a) for a in answers]
        statuses: list[int] = []

        def answer(_request: Request) -> dict[str, Any] | bytes | None:
            if not queue:
                return None
            status, data = queue.pop(0)
            statuses.append(status)
            return data

        server = Server(answer, lambda _data: statuses[-1]).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__()


def _openai(server: Server, **settings: Any) -> OpenAIChatModel:
    settings = {"api_key": KEY, "sleep": _no_wait, **settings}
    return OpenAIChatModel("loop-model", base_url=f"{server.root}/v1", **settings)


def _fails(model: OpenAIChatModel | AnthropicMessagesModel) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        request_once(model)
    error = caught.value
    assert KEY not in error.message and KEY not in str(error)
    return error


# -- HTTP 200 with an error body


def test_a_200_error_quoting_the_key_is_redacted_and_typed_by_its_status(serve: Answers) -> None:
    """A server (a proxy) that answers HTTP 200 with an error object stating 401 and quoting the
    key it refused: an AuthError (not a bad response), the key hidden, not retried."""
    said = f"Incorrect API key provided: {KEY}."
    server = serve([{"error": {"message": said, "code": 401}}])
    error = _fails(_openai(server))
    assert type(error) is AuthError
    assert "Incorrect API key provided: ***" in error.message
    assert "HTTP 200" in error.message and "Check the API key" in error.message
    assert len(server.requests) == 1


def test_a_200_error_without_a_status_is_a_bad_response_and_still_redacted(
    serve: Answers,
) -> None:
    server = serve([{"error": {"message": f"model is loading for {KEY}", "type": "server_error"}}])
    error = _fails(_openai(server, max_retries=2))
    assert type(error) is BadResponseError
    assert "model is loading for ***" in error.message and "[server_error]" in error.message
    assert "run again" in error.message.lower()  # what to do next
    assert len(server.requests) == 1  # nothing says waiting helps


def test_a_200_error_stating_a_server_failure_is_retried_as_that_status(serve: Answers) -> None:
    """The error's numeric code is the HTTP status the server meant (llama.cpp, vLLM, OpenRouter
    and Gemini put it there): a 503 is retried as an HTTP 503 would be, and every retry's error
    reaches ``on_retry`` redacted."""
    failing = {"error": {"message": f"upstream failed ({KEY})", "code": 503}}
    retries: list[Retry] = []
    server = serve([failing, OK])
    response = request_once(_openai(server, max_retries=1, on_retry=retries.append))
    assert response.text == "hi" and len(server.requests) == 2
    (retry,) = retries
    assert KEY not in retry.error.message and "upstream failed (***)" in retry.error.message


def test_a_200_error_stating_a_rate_limit_is_a_rate_limit(serve: Answers) -> None:
    server = serve([{"error": {"message": "slow down", "code": 429}}])
    error = _fails(_openai(server, max_retries=0))
    assert type(error) is RateLimitError


@pytest.mark.parametrize(
    "error",
    [
        "The number of tokens to keep from the initial prompt is greater than the context length "
        "(n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length, or "
        "provide a shorter input.",
        {"message": "This model's maximum context length is 4096 tokens. However, your messages "
         "resulted in 5000 tokens.", "type": "invalid_request_error"},
    ],
)  # fmt: skip
def test_a_200_error_saying_too_long_is_context_too_long(serve: Answers, error: object) -> None:
    """Without a stated status, the words decide as they do for an HTTP 400: the engine enters
    maintenance instead of failing the activation."""
    server = serve([{"error": error}])
    caught = _fails(_openai(server))
    assert type(caught) is ContextTooLongError
    assert len(server.requests) == 1


def test_an_error_null_beside_the_choices_is_an_answer(serve: Answers) -> None:
    server = serve([{**OK, "error": None}])
    assert request_once(_openai(server)).text == "hi"


def test_an_anthropic_200_error_is_redacted(serve: Answers) -> None:
    """(Its ``error.type`` states the status: authentication_error is a 401.)"""
    kind = "authentication_error"
    body = {"type": "error", "error": {"type": kind, "message": f"no such key {KEY}"}}
    server = serve([body])
    model = AnthropicMessagesModel("claude-x", base_url=server.root, api_key=KEY, sleep=_no_wait)
    error = _fails(model)
    assert type(error) is AuthError and "(status 401)" in error.message
    assert "no such key ***" in error.message and "Anthropic" in error.message
    assert len(server.requests) == 1


# -- every error the adapter raises is redacted


def test_a_body_that_is_not_json_is_redacted_and_says_what_to_check(serve: Answers) -> None:
    """The preview of a body that is not JSON (an HTML page, a proxy's text) is shown: a key in
    it is hidden, and the error says where the answer came from and what to check."""
    server = serve([f"<html>proxy says: token {KEY} refused</html>".encode()])
    error = _fails(_openai(server))
    assert type(error) is BadResponseError
    assert "***" in error.message and server.root in error.message
    assert "check that the base URL" in error.message


def test_a_malformed_answer_says_where_it_came_from_and_what_to_check(serve: Answers) -> None:
    server = serve([{"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}])
    error = _fails(_openai(server))
    assert type(error) is BadResponseError
    assert "no function name" in error.message and server.root in error.message
    assert "check that the base URL" in error.message


# -- what to do next when no retry was made


def test_a_server_error_without_retries_still_says_what_to_do(serve: Answers) -> None:
    server = serve([])  # every request: HTTP 500 "no more recorded answers"
    error = _fails(_openai(server, max_retries=0))
    assert "HTTP 500" in error.message and "run again later" in error.message
    assert "gave up" not in error.message  # no retry was made, none is claimed


def test_an_exhausted_quota_says_to_check_the_plan(serve: Answers) -> None:
    quota = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    server = serve([(429, quota)])
    error = _fails(_openai(server, max_retries=3))
    assert type(error) is RateLimitError and len(server.requests) == 1
    assert "billing" in error.message


# -- LM Studio's too-long refusals

KEEP_FIRST = (
    "Trying to keep the first {n} tokens when context the overflows. However, the model is "
    "loaded with context length of only {m} tokens, which is not enough. Try to load the model "
    "with a larger context length, or provide a shorter input"
)
KEEP_FIRST_FIXED = (  # the wording with its typo fixed, as some versions print it
    "Trying to keep the first {n} tokens when context overflows. However, the model is loaded "
    "with a context length of only {m} tokens, which is not enough."
)
N_KEEP = (
    "The number of tokens to keep from the initial prompt is greater than the context length "
    "(n_keep: {n}>= n_ctx: {m}). Try to load the model with a larger context length, or provide "
    "a shorter input."
)
CANNOT_TRUNCATE = "Cannot truncate prompt with n_keep ({n}) >= n_ctx ({m})"
LM_STUDIO = [KEEP_FIRST, KEEP_FIRST_FIXED, N_KEEP, CANNOT_TRUNCATE]


@pytest.mark.parametrize("wording", LM_STUDIO)
def test_lm_studio_refusals_are_too_long(wording: str) -> None:
    assert is_context_too_long(wording.format(n=15028, m=7424))


@pytest.mark.parametrize("wording", LM_STUDIO)
def test_lm_studio_numbers_bound_the_share(wording: str) -> None:
    """The kept tokens are the start of the prompt (the system message and the first user
    message), at most the whole input: window / kept is the most the provider would take, so
    it lowers the share when it is below the default and never raises it."""
    text = wording.format(n=111490, m=32768)
    assert refused_share(text) == pytest.approx(32768 / 111490)
    assert refused_share(text, 0.99) == pytest.approx(32768 / 111490)
    near = wording.format(n=4400, m=4096)  # 0.93: more than a quarter off is not ruled out
    assert refused_share(near) == BACKOFF
    assert refused_share(near, 0.99) == pytest.approx(4096 / 4400)
    assert refused_share(wording.format(n=4000, m=4096)) == BACKOFF  # kept < window: no word
