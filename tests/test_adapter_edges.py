"""Edges of the model adapters and the configuration found in a review of 2026-11-30 (each
failed against the code as it was). No network: replayed exchanges through the same mock transport
as tests/test_model_adapters.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from morphz.errors import InputError, MorphzError
from morphz.runtime.config import _settings, load, make_model
from morphz.runtime.models.base import ContextTooLongError, ModelRequest
from morphz.runtime.models.scripted import ScriptedModel
from test_model_adapters import (
    ENCODING,
    REQUEST,
    TOOLS,
    Replay,
    anthropic_model,
    openai_model,
    run,
)

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"


def exchange(
    url: str, model: str, status: int, answer: dict[str, Any] | str, content_type: str
) -> dict[str, Any]:
    response: dict[str, Any] = {"status": status, "headers": {"content-type": content_type}}
    response["json" if isinstance(answer, dict) else "text"] = answer
    request = {"method": "POST", "url": url, "body": {"model": model}}
    return {"request": request, "response": response}


ANTHROPIC_OK = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 1},
}


# -- retry.py: context-too-long classification


def test_anthropic_input_plus_max_tokens_over_the_window_is_context_too_long() -> None:
    """Anthropic's 400 when input + max_tokens exceed the window (the wording its API sends)
    must be a ContextTooLongError (the runtime then enters maintenance), not a plain refusal."""
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 178959 + 64000 > "
            "200000, decrease input length or `max_tokens` and try again",
        },
    }
    replay = Replay([exchange(ANTHROPIC_URL, "claude-sonnet-4-6", 400, body, "application/json")])
    with pytest.raises(ContextTooLongError):
        run(anthropic_model(replay), REQUEST)


def test_a_413_payload_too_large_from_a_proxy_is_context_too_long() -> None:
    """HTTP 413 means the request body is too large: only a shorter request helps. A reverse
    proxy in front of a local server (nginx) says so in HTML without Anthropic's wording."""
    html = (
        "<html><head><title>413 Request Entity Too Large</title></head><body><center>"
        "<h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>"
    )
    replay = Replay([exchange(OPENAI_URL, "gpt-4o-mini", 413, html, "text/html")])
    with pytest.raises(ContextTooLongError):
        run(openai_model(replay), REQUEST)


# -- anthropic_messages.py: an untyped error from the SDK


def test_anthropic_a_large_output_budget_does_not_escape_as_a_value_error() -> None:
    """With max_output_tokens above ~21k the anthropic SDK refuses a non-streaming call with a
    ValueError before sending (its default timeout): the adapter must send the request (an
    explicit timeout) or at least raise a typed error, not a bare ValueError."""
    replay = Replay(
        [exchange(ANTHROPIC_URL, "claude-sonnet-4-6", 200, ANTHROPIC_OK, "application/json")]
    )
    try:
        response = run(
            anthropic_model(replay), ModelRequest(ENCODING, TOOLS, max_output_tokens=32_000)
        )
    except MorphzError:
        return  # typed: acceptable
    assert response.text == "ok"


# -- openai_compat.py: a refusal is dropped


def test_openai_a_refusal_is_not_dropped() -> None:
    """OpenAI reports a safety refusal in ``message.refusal`` with ``content: null``; the adapter
    returns text None and no tool calls, so the runtime fails with "the model returned neither a
    reply nor tool calls" and the model's own words are lost."""
    refusal = "I'm sorry, but I can't help with that request."
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": refusal},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 12},
    }
    replay = Replay([exchange(OPENAI_URL, "gpt-4o-mini", 200, body, "application/json")])
    response = run(openai_model(replay), REQUEST)
    assert response.text is not None and refusal in response.text


# -- scripted.py: untyped errors from a malformed script


def test_scripted_a_ref_placeholder_out_of_range_is_a_typed_error() -> None:
    model = ScriptedModel([{"reply": "see {ref:3}"}])
    with pytest.raises(MorphzError):
        asyncio.run(model.request(REQUEST))  # the encoding holds one observation: @e3


def test_scripted_a_reply_that_is_not_text_is_refused_as_input() -> None:
    with pytest.raises(MorphzError):
        model = ScriptedModel([{"reply": 5}])
        asyncio.run(model.request(REQUEST))


def test_scripted_a_script_file_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_bytes('[{"reply": "caf\u00e9"}]'.encode("latin-1"))
    with pytest.raises(InputError):
        ScriptedModel.from_file(path)


# -- config.py


def test_an_openai_base_url_that_is_not_text_is_an_input_error() -> None:
    """Accepted by the configuration, then a TypeError from deep in the SDK."""
    with pytest.raises(InputError):
        settings = _settings({"openai": {"base_url": 5}}, {}, ())
        make_model("openai:gpt-4o-mini", settings, {"OPENAI_API_KEY": "sk-test"})


def test_unknown_keys_in_the_openai_table_are_refused() -> None:
    """[anthropic] and [budget] refuse unknown keys; [openai] ignores them, so a typo of
    base_url silently sends the whole context to api.openai.com instead of the local server."""
    with pytest.raises(InputError, match="unknown keys"):
        _settings({"openai": {"base-url": "http://localhost:11434/v1"}}, {}, ())


def test_model_sections_merge_key_by_key_across_files(tmp_path: Path) -> None:
    """[budget] keys from ~/.morphz/morphz.toml and ./morphz.toml merge key by key; the keys of a
    [models."SPEC"] section do not: the project's section drops the home file's delta = true."""
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".morphz").mkdir(parents=True)
    project.mkdir()
    (home / ".morphz" / "morphz.toml").write_text(
        '[models."openai:m"]\ndelta = true\n[budget]\nwindow = 32000\n', encoding="utf-8"
    )
    (project / "morphz.toml").write_text(
        '[models."openai:m"]\ndelta_messages = false\n[budget]\nlimit = 20000\n',
        encoding="utf-8",
    )
    settings = load(home, project, {})
    assert settings.budget == {"window": 32000, "configured": 20000}  # merged per key
    assert settings.delta_for("openai:m")  # ... but this is lost
    assert not settings.delta_messages_for("openai:m")


def test_review_e_helpers_are_sound() -> None:
    """Sanity check of this file's exchange helper: a plain reply is parsed."""
    replay = Replay(
        [exchange(ANTHROPIC_URL, "claude-sonnet-4-6", 200, ANTHROPIC_OK, "application/json")]
    )
    assert run(anthropic_model(replay), REQUEST).text == "ok"
    assert json.loads(replay.sent[0].content)["max_tokens"] == 4096


# -- sdk.py: the SDKs still read the environment


def test_openai_adapter_sends_no_headers_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adapter "reads no environment variables", yet the SDK picks up OPENAI_ORG_ID and
    OPENAI_PROJECT_ID and sends them to whatever base URL is configured (vLLM, a hosted one)."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-from-the-environment")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_from_the_environment")
    replay = Replay.load("openai_chat_text.json")
    run(openai_model(replay), REQUEST)
    headers = replay.sent[0].headers
    assert "openai-organization" not in headers and "openai-project" not in headers


def test_anthropic_adapter_sends_no_headers_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-From-Environment: yes")
    replay = Replay.load("anthropic_text.json")
    run(anthropic_model(replay), REQUEST)
    assert "x-from-environment" not in replay.sent[0].headers


def test_the_share_of_an_input_plus_output_refusal_leaves_room_for_the_output() -> None:
    from morphz.runtime.models.retry import refused_share

    said = "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000"
    assert refused_share(said) == pytest.approx((200_000 - 64_000) / 178_959)
