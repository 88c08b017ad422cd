"""`morphz exec` against an Anthropic Messages server on loopback: a real HTTP server (stdlib)
reached through the official SDK as a user configures it (``[anthropic] base_url``,
``ANTHROPIC_API_KEY``). The server keeps a prompt cache by Anthropic's rules (entries only at
blocks marked ``cache_control``, found only at block boundaries, 20 back from a mark) and reports
its reads and writes in ``usage``, so the test follows the cache layout from the configuration
through the engine, the adapter and the wire, and back into the runtime's token accounting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from loopback import CALLS, REPLY, Request, Server
from morphz.encoding.blocks import CacheLayout
from morphz.encoding.prefix import BlockCacheMeter
from morphz.interfaces.cli import main
from stores import user_config

KEY = "sk-ant-loopback-456"
MODEL = "claude-loop"


def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_loop",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {},  # filled in by the cache
    }


def tool_use(number: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    block = {"type": "tool_use", "id": f"toolu_{number}", "name": name, "input": arguments}
    return message([block], "tool_use")


ANSWERS = [
    *(tool_use(n, name, arguments) for n, (name, arguments) in enumerate(CALLS, 1)),
    message([{"type": "text", "text": REPLY}], "end_turn"),
]


class CachingServer:
    """Answers with ANSWERS in order; usage from a simulated prompt cache over what was sent
    (four bytes a token), recorded per request as (read, written, uncached) bytes."""

    def __init__(self) -> None:
        self.answers = list(ANSWERS)
        self.cache = BlockCacheMeter()
        self.usage: list[tuple[int, int, int]] = []
        self.server = Server(self.answer)

    def answer(self, request: Request) -> dict[str, Any] | None:
        _, _, body = request
        if not self.answers:
            return None
        # tools, then system, then the first user turn's blocks (the tools and the system join
        # the first block); a mark ends a block marked cache_control
        text = json.dumps(body["tools"], sort_keys=True) + body["system"]
        cuts: list[int] = []
        marks: list[int] = []
        for index, block in enumerate(body["messages"][0]["content"]):
            if index:
                cuts.append(len(text))
            text += block["text"]
            if "cache_control" in block:
                marks.append(len(text))
        read = self.cache.add(text, CacheLayout(len(text), tuple(cuts), tuple(marks)))
        written = max(0, (marks[-1] if marks else 0) - read)  # ASCII: characters are bytes
        self.usage.append((read, written, len(text) - read - written))
        answer = dict(self.answers.pop(0))
        answer["usage"] = {
            "input_tokens": (len(text) - read - written) // 4,
            "cache_read_input_tokens": read // 4,
            "cache_creation_input_tokens": written // 4,
            "output_tokens": 20,
        }
        return answer


@pytest.fixture
def caching(loopback_only: None) -> Iterator[CachingServer]:
    serving = CachingServer()
    with serving.server:
        yield serving


def run_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    user_config(tmp_path / "home", config)  # a base_url: the user's own file
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "production.yaml").write_text("region: cn-shanghai\n", encoding="utf-8")
    db = tmp_path / "m.db"
    args = ["exec", "Prepare the deployment.", "--model", f"anthropic:{MODEL}", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, "--workspace", str(workspace)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == REPLY
    return db


@pytest.mark.parametrize("delta", [False, True])
def test_the_marks_make_anthropic_reuse_the_stable_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caching: CachingServer, delta: bool
) -> None:
    base = f'[anthropic]\nbase_url = "{caching.server.root}"\n'
    models = f'[models."anthropic:{MODEL}"]\ndelta = true\n' if delta else ""
    db = run_exec(tmp_path, monkeypatch, base + models)
    sent = caching.server.requests
    assert len(sent) == 3
    for path, headers, body in sent:
        assert path == "/v1/messages"
        assert KEY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
        blocks = body["messages"][0]["content"]
        assert "".join(b["text"] for b in blocks).startswith("(context-encoding")
        assert 2 <= sum("cache_control" in b for b in blocks) <= 4
    (read1, written1, _), *later = caching.usage
    assert read1 == 0 and written1 > 0  # the first request fills the cache
    for (read, _, uncached), (_, _, body) in zip(later, sent[1:], strict=True):
        protocol = "".join(b["text"] for b in body["messages"][0]["content"]).index("(inbox")
        assert read > protocol  # the protocol and the inbox that was already sent
        if delta:  # everything the previous request held
            assert uncached < read / 10
    with morphz.open(db) as opened:
        ctx = opened.context("context-default")
        # usage counted cache reads and writes as input: the calibration learned from all three
        assert ctx.calibration(f"anthropic:{MODEL}").samples == 3
        assert ctx.audit().ok


def test_prompt_cache_off_sends_no_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caching: CachingServer
) -> None:
    config = f'[anthropic]\nbase_url = "{caching.server.root}"\nprompt_cache = "off"\n'
    run_exec(tmp_path, monkeypatch, config)
    for _, _, body in caching.server.requests:
        assert body["messages"][0]["content"][0]["text"].startswith("(context-encoding")
        assert len(body["messages"][0]["content"]) == 1
        assert "cache_control" not in json.dumps(body)
    assert [read for read, _, _ in caching.usage] == [0, 0, 0]
