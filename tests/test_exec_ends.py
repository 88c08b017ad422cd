"""``exec_ends = "group"``: exec ends only the command's process group, so a process the command
started in a session of its own (a dev server the agent means to use in its next calls) runs
on; the tool's description says so. The default, "all", ends it with the call."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings, _settings
from morphz.runtime.tools.base import ToolContext
from morphz.runtime.tools.shell import WHAT_DIES_ELSEWHERE, WHAT_DIES_LINUX, exec_tool
from processes import alive, gone

LINUX = sys.platform.startswith("linux") and Path("/proc/self/stat").exists()
SERVER = "setsid sh -c 'echo $$ > server.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &"
READY = "while [ ! -s server.pid ]; do sleep 0.01; done"


def test_the_setting_reaches_the_exec_tool_and_its_description() -> None:
    assert _settings({}, {}, ()).exec_ends_all is True
    assert _settings({"exec_ends": "group"}, {}, ()).exec_ends_all is False
    group = build_tools(Settings(exec_ends_all=False)).get("exec")
    assert group is not None and group.schema.description.endswith(WHAT_DIES_ELSEWHERE)
    default = build_tools(Settings()).get("exec")
    assert default is not None
    expected = WHAT_DIES_LINUX if sys.platform.startswith("linux") else WHAT_DIES_ELSEWHERE
    assert default.schema.description.endswith(expected)
    assert len(default.schema.description.encode()) == len(group.schema.description.encode())


@pytest.mark.skipif(not LINUX, reason="the subreaper's kill is Linux's")
@pytest.mark.parametrize("end_all", [True, False])
def test_a_setsid_server_runs_on_only_with_exec_ends_group(ws: Path, end_all: bool) -> None:
    tc = ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed
    out = asyncio.run(exec_tool(end_all=end_all).run({"command": f"{SERVER} {READY}"}, tc))
    assert out.data["exit_code"] == 0, out.text
    pid = int((ws / "server.pid").read_text())
    try:
        if end_all:
            assert gone(pid)
        else:
            assert alive(pid), "the server ended with the call"
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
