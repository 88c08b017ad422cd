"""The fixes of review 13 beyond the reviewer's tests (tests/test_review13_adapters.py): the
OpenAI adapter's timeouts, how a failure on the way to the provider is worded, the numbers of
the new too-long forms, what the retries' end says, and the base URL checks by setting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from morphz.errors import InputError
from morphz.runtime.config import Settings, load, make_model
from morphz.runtime.models.base import ModelRequest, ProviderError, RateLimitError
from morphz.runtime.models.openai_compat import OpenAIChatModel
from morphz.runtime.models.retry import Backoff, Failure, given_up, refused_share
from morphz.runtime.models.sdk import check_base_url
from stores import user_config

Handler = Callable[[httpx2.Request], httpx2.Response]
OK = {
    "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}


async def _no_wait(_delay: float) -> None:
    return None


def _send(handler: Handler, *, api_key: str = "none", max_retries: int = 0) -> None:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    model = OpenAIChatModel(
        "m", api_key=api_key, http_client=client, max_retries=max_retries, sleep=_no_wait
    )

    async def go() -> None:
        try:
            await model.request(ModelRequest("(encoding)", ()))
        finally:
            await model.aclose()

    asyncio.run(go())


def test_the_openai_adapter_waits_long_for_the_answer_and_briefly_for_the_connection() -> None:
    timeouts: list[dict[str, float]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx2.Response(200, json=OK)

    _send(handler)
    (timeout,) = timeouts
    assert timeout["read"] == 600 and timeout["connect"] == 5


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (httpx2.ConnectError("connection refused"), "cannot reach the OpenAI-compatible server"),
        (httpx2.ConnectTimeout("timed out"), "cannot reach the OpenAI-compatible server"),
        (httpx2.ReadTimeout("timed out"), "did not answer in time"),
        (httpx2.RemoteProtocolError("Server disconnected"), "broke off"),
        (httpx2.ReadError("Connection reset by peer"), "broke off"),
    ],
)
def test_a_failure_on_the_way_says_what_happened(raised: Exception, said: str) -> None:
    """A server that was reached but did not answer in time, or whose connection was reset,
    is not said to be unreachable."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        raise raised

    with pytest.raises(ProviderError) as caught:
        _send(handler, max_retries=1)
    assert said in caught.value.message
    assert "gave up after 1 retry (" in caught.value.message  # one retry, singular
    reached = said != "cannot reach the OpenAI-compatible server"
    assert ("check that the server is running" in caught.value.message) is not reached


def test_a_short_key_is_redacted_after_bearer_only() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        said = f"bad credentials {request.headers['authorization']} (nothing else)"
        return httpx2.Response(401, json={"error": {"message": said}})

    with pytest.raises(ProviderError) as caught:
        _send(handler, api_key="abc")
    assert "Bearer ***" in caught.value.message and "Bearer abc" not in caught.value.message
    assert "bad credentials" in caught.value.message  # the rest of the words kept


@pytest.mark.parametrize(
    ("text", "share"),
    [
        # Gemini
        (
            "The input token count (2000) exceeds the maximum number of tokens allowed (1000).",
            0.5,
        ),
        # TGI: the input that fits is the window less the output budget (4096 - 96)
        (
            "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
            "Given: 5000 `inputs` tokens and 96 `max_new_tokens`",
            0.8,
        ),
        ("Input validation error: `inputs` must have less than 1000 tokens. Given: 1250", 0.8),
    ],
)
def test_the_new_too_long_forms_state_their_numbers(text: str, share: float) -> None:
    assert refused_share(text) == pytest.approx(share)


def test_retries_and_a_long_retry_after_are_both_said() -> None:
    failure = Failure(RateLimitError("rate limited: slow down.", 90.0), True, 90.0)
    error = given_up(failure, 2, 3.4, Backoff())
    assert error.message == (
        "rate limited: slow down; gave up after 2 retries (3 s); "
        "the provider asks to wait 90 s: run again after that"
    )
    assert error.args == (error.message,)


def test_an_exhausted_quota_does_not_ask_to_run_again_after_its_wait() -> None:
    failure = Failure(RateLimitError("rate limited: insufficient_quota", 900.0), False, 900.0)
    assert given_up(failure, 0, 0.0, Backoff()).message == "rate limited: insufficient_quota"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("localhost:11434/v1", "e.g. http://localhost:11434/v1"),
        ("ftp://host/v1", "not an http:// or https:// URL"),
        ("http:///v1", "names no host"),
        ("http://host:0/v1", "has no valid port: use a port from 1 to 65535"),
        ("http://host:70000/v1", "has no valid port (Port out of range"),
        ("http://[::1/v1", "is not a valid URL"),
        ("http://ho\x00st/v1", "is not a valid URL"),
        ("http://alice:s3cr3t@host:x/v1", "'http://***@host:x/v1' has no valid port"),
        ("http://alice:s3cr3t@[::1/v1", "'http://***@[::1/v1' is not a valid URL"),
        ("alice:s3cr3t@host/v1", "e.g. http://***@host/v1"),
    ],
)
def test_a_base_url_is_checked(url: str, said: str) -> None:
    with pytest.raises(InputError) as caught:
        check_base_url(url, "the setting")
    assert said in caught.value.message and "the setting" in caught.value.message
    assert "s3cr3t" not in caught.value.message


def test_a_base_url_error_names_the_setting_that_holds_it(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True)
    config = user_config(home, "")  # a base_url: the user's own file
    for table in ("openai", "anthropic"):
        config.write_text(f'[{table}]\nbase_url = "http://h:99999"\n', encoding="utf-8")
        with pytest.raises(InputError, match=rf"^\[{table}\] base_url "):
            load(home, project, {})
    env = {"OPENAI_BASE_URL": "localhost:8000/v1", "ANTHROPIC_API_KEY": "k"}
    config.write_text("", encoding="utf-8")
    settings = load(home, project, env)  # read only when the OpenAI adapter is made
    with pytest.raises(InputError, match=r"^OPENAI_BASE_URL "):
        make_model("openai:m", settings, env)
    pytest.importorskip("anthropic")
    make_model("anthropic:claude-x", Settings(), env)  # another provider is not refused
