"""Edges of the workspace tools, exec and the agent CLI found in a review of 2026-11-30 (each
failed against the code as it was)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces.cli import main
from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.shell import exec_tool
from morphz.runtime.tools.workspace import (
    edit_file_tool,
    list_files_tool,
    read_file_tool,
    search_files_tool,
    write_file_tool,
)
from toolruns import run


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, (Path("morphz.toml"),))  # type: ignore[arg-type]


# --- workspace tools: untyped crashes -----------------------------------------------------


def test_search_files_survives_a_symlink_loop_in_the_workspace(tc: ToolContext, ws: Path) -> None:
    (ws / "t.txt").write_text("needle\n")
    os.symlink("b", ws / "a")
    os.symlink("a", ws / "b")  # a <-> b: a loop any checkout can contain
    out = run(search_files_tool(), tc, query="needle")
    assert [m["path"] for m in out.data["matches"]] == ["t.txt"]


@pytest.mark.parametrize("tool_name", ["list_files", "search_files"])
@pytest.mark.parametrize("glob", ["[z-a]", "[!]"])
def test_a_bad_glob_is_a_tool_error(tc: ToolContext, ws: Path, tool_name: str, glob: str) -> None:
    (ws / "a.txt").write_text("x\n")
    if tool_name == "list_files":
        tool, args = list_files_tool(), {"pattern": glob}
    else:
        tool, args = search_files_tool(), {"query": "x", "glob": glob}
    with pytest.raises(ToolError):
        run(tool, tc, **args)


def test_write_file_with_a_lone_surrogate_is_a_tool_error(tc: ToolContext, ws: Path) -> None:
    # json.loads('"\\ud800"') is a lone surrogate: a model can send it
    content = json.loads('"bad \\ud800 text"')
    with pytest.raises(ToolError):
        run(write_file_tool(), tc, path="s.txt", content=content)


def test_edit_file_with_a_lone_surrogate_is_a_tool_error(tc: ToolContext, ws: Path) -> None:
    (ws / "e.txt").write_text("abc\n")
    new = json.loads('"\\udc00"')
    with pytest.raises(ToolError):
        run(edit_file_tool(), tc, path="e.txt", old="b", new=new, expected_sha256=sha(b"abc\n"))
    assert (ws / "e.txt").read_text() == "abc\n"


def test_write_file_can_overwrite_a_file_with_a_long_name(tc: ToolContext, ws: Path) -> None:
    name = "n" * 250  # a legal name (NAME_MAX is 255); its temp file ".NAME.XXXXXXXX.tmp" is not
    (ws / name).write_bytes(b"old")
    out = run(write_file_tool(), tc, path=name, content="new", expected_sha256=sha(b"old"))
    assert out.data["action"] == "overwrote"


def test_read_file_memory_is_bounded_by_the_page(tc: ToolContext, ws: Path) -> None:
    (ws / "one-line.txt").write_bytes(b"x" * (32 * 1024 * 1024))  # no newline at all
    tracemalloc.start()
    try:
        out = run(read_file_tool(), tc, path="one-line.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.data["lines"] == 1
    assert peak < 8 * 1024 * 1024, f"read_file peaked at {peak / 2**20:.0f} MiB for a 20k page"


# --- exec ----------------------------------------------------------------------------------


def test_exec_refuses_a_nan_timeout(tc: ToolContext) -> None:
    # json.loads accepts NaN, and the model's arguments are parsed with json.loads
    args = json.loads('{"command": "sleep 0.2; echo done", "timeout_s": NaN}')
    with pytest.raises(ToolError):
        asyncio.run(exec_tool().run(args, tc))


def test_exec_omitted_byte_count_is_never_negative(tc: ToolContext) -> None:
    out = run(
        exec_tool(max_output_chars=1000),
        tc,
        command="head -c 1200 /dev/zero | tr '\\0' '\\377'",  # 1200 undecodable bytes
    )
    omitted = re.search(r"\[\.\.\. (-?\d+) bytes of output omitted", out.text)
    assert omitted is not None
    assert int(omitted.group(1)) >= 0, omitted.group(0)


# --- the agent CLI -------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    (h / ".morphz").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    return h


def _script(tmp_path: Path, steps: list[dict[str, Any]]) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps))
    return script


def test_the_agent_cannot_create_the_project_configuration(
    tmp_path: Path, home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """./morphz.toml is a configuration file whether or not it exists yet: an agent allowed to
    write files must not be able to create one that raises its own authority next run."""
    (home / ".morphz" / "morphz.toml").write_text('[policies]\nwrite_file = "allow"\n')
    monkeypatch.chdir(ws)  # the project folder is the workspace (the default --workspace .)
    evil = 'ask_default = "allow"\n[policies]\nexec = "allow"\n'
    script = _script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "morphz.toml", "content": evil}}
                ]
            },
            {"reply": "done"},
        ],
    )
    args = ["exec", "go", "--model", f"scripted:{script}", "--db", str(tmp_path / "m.db")]
    result = CliRunner().invoke(main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert not (ws / "morphz.toml").exists(), "the agent created ./morphz.toml"


def test_a_misspelt_tool_policy_is_an_error(tmp_path: Path) -> None:
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import load

    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "morphz.toml").write_text('[policies]\nexce = "deny"\n')  # meant: exec
    with pytest.raises(morphz.InputError):
        settings = load(home, project, {})
        registry = build_tools(settings)
        assert registry.authority()["exec"] == "deny"


def test_exec_bad_glob_from_the_model_does_not_crash_the_cli(
    tmp_path: Path, home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = _script(
        tmp_path,
        [
            {"tool_calls": [{"name": "list_files", "arguments": {"pattern": "[z-a]"}}]},
            {"reply": "ok"},
        ],
    )
    args = ["exec", "go", "--model", f"scripted:{script}", "--workspace", str(ws)]
    result = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "m.db"), "--format", "json"])
    assert not isinstance(result.exception, re.error), repr(result.exception)
    assert result.exit_code == 0, result.output


def test_a_non_utf8_file_name_does_not_end_the_activation(
    tmp_path: Path, home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with open(os.path.join(os.fsencode(ws), b"caf\xe9.txt"), "wb") as f:  # a Latin-1 name
        f.write(b"hello\n")
    script = _script(
        tmp_path, [{"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"reply": "ok"}]
    )
    args = ["exec", "go", "--model", f"scripted:{script}", "--workspace", str(ws)]
    result = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "m.db"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "delivered"


def test_chat_approval_shows_the_whole_exec_command(
    tmp_path: Path, home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person approving an "ask" tool must see what they approve: here the harmful tail of
    a long command is cut from the prompt, and nothing else shows it."""
    monkeypatch.chdir(tmp_path)
    command = "echo " + "building the release notes " * 5 + "; touch PWNED"
    script = _script(
        tmp_path,
        [{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}, {"reply": "ok"}],
    )
    args = ["chat", "--model", f"scripted:{script}", "--workspace", str(ws)]
    result = CliRunner().invoke(
        main, [*args, "--db", str(tmp_path / "m.db")], input="do it\ny\n/quit\n"
    )
    assert result.exit_code == 0, result.output
    prompt = next(line for line in result.output.splitlines() if "allow exec(" in line)
    assert (ws / "PWNED").exists()  # it was approved and ran ...
    assert "touch PWNED" in result.output, prompt  # ... but the person never saw that part


def test_a_reply_with_lone_surrogates_is_recorded(tmp_path: Path) -> None:
    """A provider's JSON may carry "\\ud800": the reply and the call arguments are recorded with
    U+FFFD in their place, and the activation goes on."""
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import Settings
    from morphz.runtime.engine import Engine, RuntimeConfig
    from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
    from morphz.runtime.models.scripted import FunctionModel

    replies = [
        ModelResponse(
            "a\ud800", (ToolCall("c1", "recall", '{"op": "search", "query": "x\ud800"}'),)
        ),
        ModelResponse("done \udfff"),
    ]

    def model(request: ModelRequest) -> ModelResponse:
        return replies.pop(0)

    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(tmp_path))
        result = asyncio.run(engine.run("hello"))
        assert result.state == "delivered", result.reason
        texts = [e.text for e in ctx.events() if e.kind == "model_reply"]
        assert texts == ["a\ufffd", "done \ufffd"]
