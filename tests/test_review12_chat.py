"""Review 12, chat: what a person sees at the terminal when they interrupt `morphz chat`.

Each test fails on the code it was written against; its docstring says what should happen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import morphz
from agents import script_spec

SRC = Path(__file__).resolve().parents[1] / "src"
ASK_EXEC = [
    {"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]},
    {"reply": "ok"},
]

pty = pytest.importorskip("pty")
select = pytest.importorskip("select")
termios = pytest.importorskip("termios")


def _read_until(master: int, proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    """What the terminal shows until ``marker`` (60 s: a safety net against a hang, not a
    timing the test relies on)."""
    seen = b""
    deadline = time.monotonic() + 60
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    assert marker in seen, seen[-2000:]
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")
def test_ctrl_c_at_an_approval_prompt_gives_the_terminal_back_as_it_was(env: Path) -> None:
    """At a terminal, `morphz chat` imports readline, and the approval question is read by
    ``input()`` in a daemon thread (cli_agent._ask), which readline puts the terminal in its
    own mode for (no ECHO, no ICANON). Ctrl-C at that prompt ends the chat ("Aborted!", by SIGINT,
    the turn recorded interrupted, all fine) but the daemon thread is simply abandoned inside
    readline, so nothing restores the terminal: the person's shell is left without echo and
    without line editing for the next program they run (bash adopts the state of a job that
    exited normally; `stty sane` fixes it). Ctrl-C at the `you>` prompt, in the main thread,
    restores it. Expected: however the chat ends, the terminal's modes are the ones it had when
    the chat started (e.g. save termios.tcgetattr(stdin) at the start and set it back in
    chat_command's finally when stdin is a terminal)."""
    (env / "home").mkdir()
    args = [sys.executable, "-m", "morphz", "chat", "--model", script_spec(env, ASK_EXEC),
            "--workspace", str(env / "ws"), "--db", str(env / "m.db")]  # fmt: skip
    child_env = {**os.environ, "PYTHONPATH": str(SRC), "HOME": str(env / "home")}
    child_env.pop("MORPHZ_DB", None)
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen(
        args, stdin=slave, stdout=slave, stderr=slave, cwd=env, env=child_env,
        start_new_session=True,
    )  # fmt: skip
    try:
        _read_until(master, proc, b"you> ")
        os.write(master, b"run it\r")
        # readline prepares the terminal before it draws its prompt (the space after the colon)
        _read_until(master, proc, b"[y/N]: ")
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        code = proc.wait(timeout=60)
        _read_until(master, proc, b"Aborted!")
        after = termios.tcgetattr(slave)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(slave)
        os.close(master)
    assert code == -signal.SIGINT  # documented: the turn recorded interrupted, "Aborted!", then
    # the chat ends by the signal, as Python does on an uncaught KeyboardInterrupt
    with morphz.open(env / "m.db") as db:
        (row,) = db.context("context-default").activations()
        assert row.state == "interrupted"
    lflag = after[3]
    assert lflag & termios.ECHO and lflag & termios.ICANON, (
        f"the terminal was left with ECHO={bool(lflag & termios.ECHO)} "
        f"ICANON={bool(lflag & termios.ICANON)}"
    )
    assert after == before
