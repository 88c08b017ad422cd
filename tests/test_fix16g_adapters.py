"""Fix 16g: the provider adapters' secrets, retries and provider error shapes, beyond the
reviewer's cases (tests/test_review16g_adapters.py): the key read from the environment without
its blanks, refused when a header cannot carry it; its escaped forms redacted; a base URL's query
refused and hidden; what the SDK's exception said kept as a note; Retry-After values that state
no wait; OpenRouter's upstream words; llama.cpp's token fields; DeepSeek's cache field. No
network: an in-memory transport."""

from __future__ import annotations

import json
import math
import traceback

import pytest

from adapter_calls import request_once
from morphz.errors import InputError
from morphz.runtime.config import Settings, make_model
from morphz.runtime.models.base import BadResponseError, ContextTooLongError, ProviderError
from morphz.runtime.models.redaction import hidden
from morphz.runtime.models.retry import Backoff, parse_retry_after, refused_share
from morphz.runtime.models.sdk import check_base_url, check_key, without_userinfo
from test_review16g_adapters import KEY, OK, Exchange, _failure

# -- secrets


def test_a_key_read_from_the_environment_loses_the_blanks_around_it() -> None:
    model = make_model("openai:m", Settings(), {"OPENAI_API_KEY": f"  {KEY}\n"})
    assert model._key == KEY  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="set OPENAI_API_KEY"):
        make_model("openai:m", Settings(), {"OPENAI_API_KEY": " \n"})


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (KEY + "\n", "a line break at character 26 of 26"),
        (KEY[:5] + "\t" + KEY[5:], "a control character (U+0009) at character 6"),
        (KEY + "\u00a0", "a character outside ASCII (U+00A0)"),
        (KEY + " ", "a space at its start or end"),
    ],
)
def test_a_key_a_header_cannot_carry_is_refused_naming_its_variable(key: str, said: str) -> None:
    with pytest.raises(InputError) as caught:
        check_key(key, "ANTHROPIC_API_KEY")
    message = str(caught.value)
    assert said in message and "ANTHROPIC_API_KEY" in message, message
    assert KEY[:8] not in message
    assert check_key(KEY, "X") == KEY


def test_the_key_is_hidden_in_its_escaped_forms() -> None:
    said = f"Illegal header value b'Bearer {KEY}\\n'; json: \"{KEY}\\n\"; repr: '{KEY}\\n'"
    shown = hidden(said, KEY + "\n")
    assert KEY not in shown and shown.count("***") == 3, shown
    said = f"bytes: b'{KEY}\\xe2\\x80\\xa6'; json: \"{KEY}\\u2026\"; as is: {KEY}\u2026"
    shown = hidden(said, KEY + "\u2026")
    assert KEY not in shown and shown.count("***") == 3, shown


def test_the_error_is_not_chained_to_the_sdk_exception_but_notes_what_it_said() -> None:
    refused = {"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}}
    error = _failure(Exchange([(401, {}, refused)]).openai())
    assert error.__cause__ is None and error.__context__ is None
    notes = getattr(error, "__notes__", [])
    assert notes and "openai.AuthenticationError: Error code: 401" in notes[0], notes
    assert KEY not in "".join(traceback.format_exception(error))


def test_a_base_url_with_a_query_or_fragment_is_refused_without_showing_it() -> None:
    for url in ("https://h.test/v1?key=SECRET1", "https://h.test/v1#SECRET1", "h.test/v1?SECRET1"):
        with pytest.raises(InputError) as caught:
            check_base_url(url, "OPENAI_BASE_URL")
        assert "SECRET1" not in str(caught.value) and "OPENAI_BASE_URL" in str(caught.value)
    assert "api-version" in _refusal("https://r.openai.azure.com/openai?api-version=2024-10-21")
    assert (
        without_userinfo("https://u:p@h.test/v1?key=S&flag") == "https://***@h.test/v1?key=***&***"
    )
    assert without_userinfo("https://h.test/v1") == "https://h.test/v1"


def _refusal(url: str) -> str:
    with pytest.raises(InputError) as caught:
        check_base_url(url, "[openai] base_url")
    return str(caught.value)


# -- retries


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_a_retry_after_stating_no_wait_is_no_wait(value: str) -> None:
    assert parse_retry_after({"retry-after": value}) is None
    assert parse_retry_after({"retry-after-ms": value}) is None
    backoff = Backoff(rand=lambda: 0.5)
    assert backoff.delay(0, float(value)) == 1.125  # the backoff's own delay


def test_a_retry_after_ms_of_zero_gives_way_to_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "0", "retry-after": "3"}) == 3.0


def test_a_huge_retry_after_is_raised_at_once_saying_the_wait_in_short() -> None:
    limited = {"error": {"message": "Slow down", "type": "rate_limit_exceeded"}}
    exchange = Exchange([(429, {"retry-after": "1e12"}, limited)])
    error = _failure(exchange.openai())
    assert len(exchange.sent) == 1 and not exchange.sleeps
    assert "the provider asks to wait 1e+12 s" in str(error), str(error)
    assert math.isfinite(float("1e12"))


# -- provider error shapes


def test_openrouter_an_upstream_text_refusal_is_shown_with_its_provider() -> None:
    body = {
        "error": {
            "code": 502,
            "message": "Provider returned error",
            "metadata": {"raw": "upstream connect error", "provider_name": "Fireworks"},
        }
    }
    error = _failure(Exchange([(502, {}, body)]).openai(max_retries=0))
    assert "Provider returned error (Fireworks said: upstream connect error) [502]" in str(error)


def test_openrouter_an_upstream_openai_code_is_context_too_long() -> None:
    upstream = {"error": {"message": "Too many tokens", "code": "context_length_exceeded"}}
    body = {
        "error": {"code": 400, "message": "Provider returned error", "metadata": {"raw": upstream}}
    }
    error = _failure(Exchange([(400, {}, body)]).openai())
    assert isinstance(error, ContextTooLongError), str(error)
    assert "upstream: Too many tokens [context_length_exceeded]" in str(error)


def test_a_choice_error_without_a_status_is_a_bad_response_with_its_words() -> None:
    choice = {
        "index": 0,
        "finish_reason": "error",
        "message": {"role": "assistant", "content": ""},
        "error": {"code": "server_error", "message": "Generation aborted"},
    }
    exchange = Exchange([(200, {}, {**OK, "choices": [choice]})])
    error = _failure(exchange.openai())
    assert isinstance(error, BadResponseError) and "Generation aborted" in str(error)
    assert len(exchange.sent) == 1  # nothing says waiting helps


def test_a_choice_error_with_a_retryable_status_is_retried() -> None:
    choice = {
        "index": 0,
        "finish_reason": "error",
        "message": {"role": "assistant", "content": ""},
        "error": {"code": 503, "message": "Upstream overloaded"},
    }
    exchange = Exchange([(200, {}, {**OK, "choices": [choice]}), (200, {}, OK)])
    assert request_once(exchange.openai()).text == "hi"
    assert len(exchange.sleeps) == 1


LLAMA_CPP = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 20480,
        "n_ctx": 4096,
    }
}


@pytest.mark.parametrize(
    ("body", "share"),
    [
        (LLAMA_CPP, 0.2),  # its older message states no numbers: the fields do
        (
            {
                "error": {
                    **LLAMA_CPP["error"],
                    "message": "request (20480 tokens) exceeds the available context size "
                    "(4096 tokens), try increasing it",
                }
            },
            0.2,
        ),
        (
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "your request has 40960 input tokens. Please reduce the length of the input "
                    "messages.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
            0.2,
        ),
        (
            {
                "error": {
                    "message": "This endpoint's maximum context length is 131072 tokens. However, "
                    "you requested about 139521 tokens (120000 of text input, 18021 of tool input, "
                    "1500 in the output). Please reduce the length of either one, or use the "
                    '"middle-out" transform to compress your prompt automatically.',
                    "code": 400,
                }
            },
            (131072 - 1500) / (139521 - 1500),
        ),
    ],
    ids=["llama.cpp-fields", "llama.cpp", "vllm", "openrouter-tools"],
)
def test_too_long_bodies_of_local_servers_and_gateways_state_their_share(
    body: dict[str, object], share: float
) -> None:
    error = _failure(Exchange([(400, {}, json.dumps(body))]).openai())
    assert isinstance(error, ContextTooLongError), str(error)
    assert refused_share(str(error)) == pytest.approx(share, abs=0.005), str(error)


def test_a_provider_error_note_never_holds_a_key_the_server_quotes_cut() -> None:
    said = "x" * 400 + KEY
    error = _failure(Exchange([(500, {}, {"error": {"message": said}})]).openai(max_retries=0))
    assert isinstance(error, ProviderError)
    assert KEY[:8] not in "".join(getattr(error, "__notes__", []))
