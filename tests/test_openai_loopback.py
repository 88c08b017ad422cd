"""`morphz exec` and `morphz chat` against an OpenAI-compatible server on loopback: a real HTTP
server (stdlib) answering ``POST /v1/chat/completions`` with Chat Completions bodies in the wire
format of the recordings, reached through the official SDK as a user configures it
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``). Only loopback connections are allowed; the key must
reach the server and never the store."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from loopback import CALLS, REPLY, Request, Server
from morphz.interfaces.cli import main

KEY = "sk-loopback-secret-123"


def completion(message: dict[str, Any], finish: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-loop",
        "object": "chat.completion",
        "created": 1_764_460_000,
        "model": "loop-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def tool_call(number: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{number}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        "tool_calls",
        (2_900 + number, 40),
    )


ANSWERS = [
    *(tool_call(n, name, arguments) for n, (name, arguments) in enumerate(CALLS, 1)),
    completion({"role": "assistant", "content": REPLY}, "stop", (3100, 9)),
]


@pytest.fixture
def server(loopback_only: None) -> Iterator[Server]:
    answers = list(ANSWERS)
    with Server(lambda _request: answers.pop(0) if answers else None) as serving:
        yield serving


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: Server) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.root}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "production.yaml").write_text("region: cn-shanghai\n", encoding="utf-8")
    return tmp_path


def _check_store(db: Path, server: Server) -> None:
    assert len(server.requests) == 3
    for path, headers, body in server.requests:
        assert path == "/v1/chat/completions"
        assert headers["authorization"] == f"Bearer {KEY}"
        assert body["model"] == "loop-model"
        assert "(context-encoding" in json.dumps(body["messages"])
        names = {tool["function"]["name"] for tool in body["tools"]}
        assert {"context_tx", "recall", "read_file", "exec"} <= names
    # the file's content reached the model in the next request, as an observation
    assert "region: cn-shanghai" in json.dumps(server.requests[1][2]["messages"])
    with morphz.open(db) as opened:
        ctx = opened.context("context-default")
        frame = ctx.mind().frame("deployment/target")
        assert frame is not None and frame.sources == ("@e1", "@e4")
        assert ctx.calibration("openai:loop-model").samples == 3  # provider usage was learned
        assert ctx.audit().ok
        stored = json.dumps([e.to_dict() for e in ctx.events()])
    assert KEY not in stored and KEY not in db.read_bytes().decode("latin-1")


def test_exec_against_an_openai_compatible_server(project: Path, server: Server) -> None:
    db = project / "m.db"
    args = ["exec", "Prepare the deployment.", "--model", "openai:loop-model", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, "--workspace", str(project / "ws")])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Deploying to cn-shanghai."
    _check_store(db, server)


def test_chat_against_an_openai_compatible_server(project: Path, server: Server) -> None:
    db = project / "m.db"
    args = ["chat", "--model", "openai:loop-model", "--db", str(db)]
    lines = "Prepare the deployment.\n/mind\n/quit\n"
    result = CliRunner().invoke(main, [*args, "--workspace", str(project / "ws")], input=lines)
    assert result.exit_code == 0, result.output
    assert "Deploying to cn-shanghai." in result.output
    activity = result.stderr.splitlines()
    assert activity[0].startswith("@e2 activation_started")
    calls_tx = '@e5 calls context_tx({"tx": "(context-tx (base-version 0) (derive deployment/'
    assert activity[1:6] == [
        '@e3 calls read_file({"path": "production.yaml"})',
        f"@e4 read_file: {activity[2].split(': ', 1)[1]}",
        calls_tx + "target (fro...)",
        "@e7 context_tx committed tx-1 v0 -> v1",
        activity[5],
    ]
    assert "production.yaml" in activity[2] and "activation_finished" in activity[5]
    assert "deployment/target" in result.stdout.split("Deploying to cn-shanghai.")[1]  # /mind
    _check_store(db, server)


@pytest.mark.parametrize("messages", [True, False])
def test_delta_increments_reach_the_server_as_messages_of_their_own(
    project: Path, server: Server, messages: bool
) -> None:
    """With ContextDelta each request repeats the previous one's messages unchanged and adds
    one user message per increment (or, with delta_messages = false, one longer message)."""
    setting = "" if messages else "delta_messages = false\n"
    config = f'[models."openai:loop-model"]\ndelta = true\n{setting}'
    (project / "morphz.toml").write_text(config, encoding="utf-8")
    db = project / "m.db"
    args = ["exec", "Prepare the deployment.", "--model", "openai:loop-model", "--db", str(db)]
    result = CliRunner().invoke(main, [*args, "--workspace", str(project / "ws")])
    assert result.exit_code == 0, result.output
    sent = [body["messages"] for _, _, body in server.requests]
    assert [m["role"] for m in sent[0]] == ["system", "user"]
    assert sent[0][1]["content"].startswith("(context-encoding")
    for before, after in pairwise(sent):
        if messages:
            assert after[: len(before)] == before  # every earlier message, unchanged
            assert [m["role"] for m in after[len(before) :]] == ["user"]
            assert after[-1]["content"].startswith("\n(context-delta")
        else:
            assert len(after) == 2 and after[1]["content"].startswith(before[1]["content"])
    _check_store(db, server)


def test_a_server_that_wants_alternating_turns_gets_one_message_from_its_first_refusal(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict chat template refuses two user messages in a row: the adapter sends that request
    again with the encoding as one message, and every later request so, and the activation runs
    to its reply. With delta_messages = false the server never has to refuse."""
    refusal = "Conversation roles must alternate user/assistant/user/assistant/..."

    def strict(answers: list[dict[str, Any]]) -> Server:
        def answer(request: Request) -> dict[str, Any] | None:
            roles = [m["role"] for m in request[2]["messages"]]
            if any(a == b == "user" for a, b in pairwise(roles)):
                return {"error": {"message": refusal, "type": "BadRequestError", "code": 400}}
            return answers.pop(0) if answers else None

        return Server(answer, status=lambda body: 400 if "error" in body else 200)

    db = project / "m.db"
    args = ["exec", "Prepare the deployment.", "--model", "openai:loop-model", "--db", str(db)]
    args += ["--workspace", str(project / "ws")]
    for setting, refused in (("", 1), ("delta_messages = false\n", 0)):
        config = f'[models."openai:loop-model"]\ndelta = true\n{setting}'
        (project / "morphz.toml").write_text(config, encoding="utf-8")
        db.unlink(missing_ok=True)
        with strict(list(ANSWERS)) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.root}/v1")
            result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == REPLY
        note = "refused two user messages in a row, so ContextDelta increments go in one"
        assert (note in result.stderr) == bool(refused)
        sent = [[m["role"] for m in body["messages"]] for _, _, body in server.requests]
        users = [roles.count("user") for roles in sent]
        # the seed, then (when split) the refused request with its increment as a second message
        # and the same request merged; every later request merged, as with the setting
        assert users == ([1, 2, 1, 1] if refused else [1, 1, 1])
        assert len(server.requests) == len(ANSWERS) + refused


def test_the_guard_still_blocks_other_hosts(loopback_only: None) -> None:
    with pytest.raises(RuntimeError, match="must not open network connections"):
        socket.create_connection(("192.0.2.1", 80), timeout=0.1)
