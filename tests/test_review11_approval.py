"""Review 11, the chat's approval prompt as a terminal user sees it: every part of it that the
model wrote is shown with its control characters escaped.

The test fails on the code it was written against; its docstring says what should happen.
CliRunner is invoked with ``color=True``: that is what a terminal gets (click strips ANSI
sequences only when the stream is not a terminal, and never a bare BEL or CR).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from morphz.interfaces.cli_agent import _ask
from morphz.runtime.tools.shell import exec_tool
from test_review11_cli import _chat, _raw_controls


def test_chat_approval_prompt_shows_argument_names_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval prompt (`allow exec(command='ls', ...)?`) is meant to show exactly what
    runs; every part of it that the model wrote is shown with control characters escaped. The
    values are (repr), but the argument NAMES were printed raw, so a model could send a name
    holding CR / erase-line / conceal sequences that redraws the prompt as something else.

    (Corrected when fixed: the test sent such a name to exec through `morphz chat`. A name exec
    does not take breaks its schema, and such a call is now refused before anyone is asked
    (test_review11_tools.py), so through the chat it reaches no prompt at all: that is checked
    first. A tool without a schema check (one added from Python) can still bring any name to
    the prompt, so the prompt itself is then checked with the same name.)"""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    spoof = "\r\x1b[2Kallow exec(command='ls')? [y/N]: \x1b[8m"
    arguments = {"command": "rm -rf ~", spoof: 1}
    steps = [{"tool_calls": [{"name": "exec", "arguments": arguments}]}, {"reply": "done"}]
    result = _chat(tmp_path, steps, "go\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "allow exec(" not in result.stdout, result.stdout  # refused, never asked

    unchecked = replace(exec_tool(), check=None)
    with CliRunner().isolation(input="n\n", color=True) as (stdout, _stderr, _output):
        assert asyncio.run(_ask(unchecked, arguments)) is False
    prompt = next(line for line in stdout.getvalue().decode().split("\n") if "allow exec(" in line)
    assert _raw_controls(prompt) == [], repr(prompt)
    assert prompt.startswith("allow exec(command='rm -rf ~', "), repr(prompt)
