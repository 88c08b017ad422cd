"""Edges of `morphz chat` and `morphz exec` found in a review of 2026-11-30 (each failed
against the code as it was)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces.cli import main


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user configuration
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f.txt").write_text("hello\n")
    return tmp_path


def _run(tmp: Path, args: list[str], steps: list[dict[str, Any]], stdin: str | None = None,
         workspace: Path | None = None) -> Result:  # fmt: skip
    script = tmp / "script.json"
    script.write_text(json.dumps(steps))
    ws = str(workspace if workspace is not None else tmp / "ws")
    full = [*args, "--model", f"scripted:{script}", "--workspace", ws, "--db", str(tmp / "m.db")]
    return CliRunner().invoke(main, full, input=stdin)


def test_chat_survives_a_recall_query_that_recall_refuses(env: Path) -> None:
    """A slash command with an odd argument ends the whole chat session (exit 1) instead of
    saying what is wrong and prompting again: the InputError of ctx.recall.search escapes
    chat_commands.run and the chat loop to MorphzGroup.invoke."""
    result = _run(env, ["chat"], [{"reply": "ok"}], stdin='/recall "\n/status\n/quit\n')
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "context-default" in result.stdout.split('/recall "', 1)[1]  # /status still ran


def test_chat_end_of_input_at_an_approval_prompt_exits_0(env: Path) -> None:
    """docs/cli.md, morphz chat: 'Exit codes: 0 on /quit or end of input'. End of input while an
    "ask" tool waits for approval gives click's 'Aborted!' and exit 1: the Abort raised by
    click.confirm in the approver escapes asyncio.run, outside the try around click.prompt."""
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]},
        {"reply": "ok"},
    ]
    result = _run(env, ["chat"], steps, stdin="run it\n")  # input ends at the approval prompt
    assert result.exit_code == 0, (result.stdout, result.stderr)


def test_chat_refuses_an_invalid_session_id_at_once(env: Path) -> None:
    """--session 'a b' is accepted: the chat starts, prints its banner naming session 'a b', and
    exits 0 on /quit; the id is refused only when a first line is typed (which then ends the
    chat with exit 1). A usage error should stop it before the first prompt."""
    result = _run(env, ["chat", "--session", "a b"], [{"reply": "ok"}], stdin="/quit\n")
    assert result.exit_code != 0, result.stdout
    assert "session id 'a b' is not a valid id" in result.stderr


def test_exec_with_an_invalid_session_does_not_create_the_context(env: Path) -> None:
    """exec refuses --session @x only after _open_context has created CTX, so the refused
    command leaves a new empty context in the store."""
    result = _run(env, ["exec", "newctx", "hi", "--session", "@x"], [{"reply": "ok"}])
    assert result.exit_code == 1 and "session id '@x' is not a valid id" in result.stderr
    with morphz.open(env / "m.db") as db:
        assert "newctx" not in db.contexts()


def test_a_missing_workspace_is_refused_at_once(env: Path) -> None:
    """--workspace names a folder that does not exist (a typo): exec runs the agent anyway and
    every workspace tool fails ('nothing at '.'; use list_files to see what exists', from
    list_files itself), while a --workspace that is a file is a usage error (exit 2)."""
    steps = [{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"reply": "ok"}]
    result = _run(env, ["exec", "hi"], steps, workspace=env / "no-such-dir")
    assert result.exit_code == 2, (result.stdout, result.stderr)


def test_a_chat_command_with_leading_spaces_is_a_command(env: Path) -> None:
    """'/quit   ' (trailing spaces) quits, but '  /quit' (leading spaces) is sent to the agent as
    a prompt and starts an activation: the loop tests line.startswith('/') on the unstripped
    line, then passes line.strip() to chat_commands.run."""
    result = _run(env, ["chat"], [{"reply": "ok"}], stdin="  /quit\n")
    assert result.exit_code == 0, result.output
    assert "agent>" not in result.stdout
    with morphz.open(env / "m.db") as db:
        assert db.context("context-default").activations() == []
