"""The fixes of review 14's runtime findings, beyond the reviewer's tests
(test_review14_diffruntime.py): Ctrl-C at chat's prompt stays the end of input, the key hidden
at a cut wherever text is cut, and Anthropic's error types read as their statuses."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import BadResponseError
from morphz.runtime.models.redaction import cut, hidden
from morphz.runtime.models.retry import error_text
from morphz.runtime.models.sdk import PREVIEW_LIMIT, load_json
from stores import cli_env
from test_review14_diffruntime import MORPHZ, _read_until

KEY = "sk-fix14-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_at_the_chat_prompt_is_still_the_end_of_input(tmp_path: Path) -> None:
    """Documented (docs/cli.md, chat): Ctrl-C at ``you>`` ends the chat as /quit does, exit 0;
    only SIGTERM and SIGHUP there end it by the signal."""
    (tmp_path / "home").mkdir()
    (tmp_path / "script.json").write_text('[{"reply": "hi"}]', encoding="utf-8")
    args = [*MORPHZ, "chat", "--model", "scripted:script.json", "--db", str(tmp_path / "m.db")]
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _read_until(proc, b"you> ")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err


def test_a_preview_cut_through_the_key_hides_it() -> None:
    """``load_json``'s preview of a body that is not JSON: the key is hidden before the cut."""
    body = ("x" * (PREVIEW_LIMIT - 10) + KEY + " refused").encode()
    with pytest.raises(BadResponseError) as caught:
        load_json(body, "OpenAI", KEY)
    assert KEY[:8] not in caught.value.message and "***" in caught.value.message


def test_an_error_text_cut_through_the_key_hides_it() -> None:
    message = "refused: " + "y" * 580 + KEY + "z" * 100  # the cut at 600 goes through the key
    text = error_text("", {"error": {"message": message}}, KEY)
    assert KEY[:8] not in text and "***" in text and text.endswith("…")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token {KEY[:20]}…", "token ***…"),  # the server's own cut
        (f"token '{KEY[:8]}'", "token '***'"),  # 8 characters: hidden
        (f"token {KEY[:7]}", f"token {KEY[:7]}"),  # 7: too short to matter
        (f"{KEY[:12]} is not a key", f"{KEY[:12]} is not a key"),  # not at the end: no cut
        (f"Bearer {KEY} and {KEY}", "Bearer *** and ***"),
    ],
)
def test_a_cut_key_start_is_hidden(text: str, expected: str) -> None:
    assert hidden(text, KEY) == expected


def test_a_short_key_is_hidden_only_after_bearer() -> None:
    assert hidden("Bearer none, none", "none") == "Bearer ***, none"
    assert cut("a" * 10, 4, "") == "aaaa…"


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("overloaded_error", 529),
        ("api_error", 500),
        ("rate_limit_error", 429),
        ("authentication_error", 401),
        ("permission_error", 403),
        ("not_found_error", 404),
        ("request_too_large", 413),
        ("invalid_request_error", 400),
    ],
)
def test_an_anthropic_error_type_states_its_status(kind: str, status: int) -> None:
    model = AnthropicMessagesModel("claude-x", base_url="http://127.0.0.1:9", api_key=KEY)
    assert model._stated_status({"type": "error", "error": {"type": kind}}) == status


def test_an_unknown_anthropic_error_type_falls_back_to_a_numeric_code() -> None:
    model = AnthropicMessagesModel("claude-x", base_url="http://127.0.0.1:9", api_key=KEY)
    assert model._stated_status({"error": {"type": "proxy_error", "code": 503}}) == 503
    assert model._stated_status({"error": {"type": "proxy_error"}}) is None
