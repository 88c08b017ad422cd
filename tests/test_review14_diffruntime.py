"""Review 14 (this session's runtime and interface changes, ``git diff 7f3b94f HEAD``): ending
by a signal, giving up waits on a busy store, error bodies with HTTP 200, LM Studio's numbers.
Each test fails on the code it was written against; its docstring says what is expected.

Processes and signals are real; a process is held at a known point by what it printed, never
by sleeping. Timeouts are only safety nets.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter_calls import request_once
from loopback import Request, Server, anthropic_message
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import ProviderError
from morphz.runtime.models.openai_compat import OpenAIChatModel
from stores import cli_env

MORPHZ = [sys.executable, "-m", "morphz"]


def _read_until(proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    """What ``proc`` wrote to stdout up to and including ``marker`` (120 s safety net)."""
    assert proc.stdout is not None
    fd, seen = proc.stdout.fileno(), b""
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], 120)
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            proc.kill()
            raise AssertionError(f"never printed {marker!r}: {seen!r}")
        seen += chunk
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_chat_stopped_by_a_signal_at_its_prompt_ends_by_it(tmp_path: Path, signum: int) -> None:
    """docs/cli.md (exit statuses) says ``chat`` stopped by SIGTERM or SIGHUP ends by that
    signal (143/129), so a supervisor or ``timeout`` sees it stopped. At the ``you>`` prompt it
    exits 0 instead: ``stopping._as_sigint`` turns the signal into a KeyboardInterrupt, click's
    ``prompt`` turns that into ``Abort``, ``cli_agent._read_line`` takes it as the end of input
    and the chat ends as after /quit, with status 0 ("success"): a service manager stopping an
    idle chat, or a closed terminal, is recorded as a clean exit.

    Expected: a chat stopped at its prompt by SIGTERM or SIGHUP ends by that signal, as during
    a turn (only Ctrl-C at the prompt is documented as the end of input)."""
    (tmp_path / "home").mkdir()
    (tmp_path / "script.json").write_text('[{"reply": "hi"}]', encoding="utf-8")
    args = [*MORPHZ, "chat", "--model", "scripted:script.json", "--db", str(tmp_path / "m.db")]
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        stdin=subprocess.PIPE,  # kept open: the chat waits at its prompt
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _read_until(proc, b"you> ")
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (128 + signum, -signum), (
        f"chat stopped by signal {signum} at its prompt exited {proc.returncode}: {err!r}"
    )


HOST = """
import sys
import click
from morphz.interfaces.cli import main

@main.command("wait")
def wait_command():
    click.echo("ready")
    sys.stdin.read()  # Ctrl-C arrives here

sys.argv = ["morphz", "wait"]
try:
    main()
except SystemExit as exc:
    print(f"host goes on after status {exc.code}", flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_host_calling_main_is_not_killed_by_a_ctrl_c_it_caught(tmp_path: Path) -> None:
    """``MorphzGroup.main`` (cli.py:46) ends the *process* by SIGINT when a command was
    stopped by Ctrl-C and no ``args`` were given, from inside the call. A Python host that runs
    the command line in-process (``sys.argv = [...]; main()`` inside ``try/except
    SystemExit``, as wrappers, task runners and notebooks do with click programs) used to get
    SystemExit(1) and go on; now it is killed outright by ``stopping.end_by`` (stopping.py:80),
    its own cleanup and ``finally`` blocks skipped. Python ends by SIGINT only when a
    KeyboardInterrupt reaches the interpreter's top level, never inside a call.

    Expected: ending by the signal happens only at the process's top level (the ``morphz``
    script and ``python -m morphz``: a wrapper around ``main`` there), so a host that catches
    the SystemExit goes on."""
    (tmp_path / "home").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOST],
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        seen = _read_until(proc, b"ready\n")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert b"host goes on" in seen + out, (
        f"the host process was ended by the signal (status {proc.returncode}): {err!r}"
    )


# ---------------------------------------------------------------- adapters (loopback)

KEY = "sk-review14-0123456789abcdefghijklmnopqrstuvwxyz"


async def _no_wait(_delay: float) -> None:
    return None


@pytest.fixture
def answers(loopback_only: None) -> Iterator[list[Any]]:
    """A loopback server answering HTTP 200 with each item of the list in turn (appended by
    the test); ``answers[0]`` is the server."""
    queue: list[Any] = []

    def answer(_request: Request) -> Any:
        return queue.pop(0) if queue else None

    with Server(answer) as server:
        yield [server, queue]


def test_a_key_cut_by_the_length_limit_is_still_redacted(answers: list[Any]) -> None:
    """An error body (here with HTTP 200, the path this session added) quoting the key near
    the end of a long message: ``retry.error_text`` cuts the text at 600 characters
    (retry.py:293) before ``sdk.redact`` (sdk.py:222) looks for the whole key, so a key the cut
    went through is not found and all but its last characters are shown, in the error, in the
    activation's recorded reason and in the store. (``load_json``'s 200-byte preview of a body
    that is not JSON, sdk.py:275, cuts the same way.)

    Expected: no part of the key long enough to matter is shown: redact before cutting (the
    body's text, then ``error_text``), or hide a cut key's start."""
    server, queue = answers
    message = "the proxy refused the request; " + "x" * (600 - 31 - len(KEY) + 4) + KEY
    queue.append({"error": {"message": message, "code": 401}})
    model = OpenAIChatModel("loop-model", base_url=f"{server.root}/v1", api_key=KEY, sleep=_no_wait)
    with pytest.raises(ProviderError) as caught:
        request_once(model)
    assert KEY[:-4] not in caught.value.message, caught.value.message[-120:]


def test_an_anthropic_overloaded_error_with_http_200_is_retried(answers: list[Any]) -> None:
    """Anthropic's error bodies state their status by their ``error.type`` (overloaded_error is
    529, api_error 500, rate_limit_error 429, authentication_error 401: Anthropic's errors
    page), never by a numeric ``code``. ``retry.stated_status`` (retry.py:382) reads only a
    numeric ``code``/``status``, so an Anthropic error body that came with HTTP 200 (a proxy,
    a gateway that buffers a stream) is taken by its words: an overloaded provider is a
    BadResponseError, not retried, and the activation fails at once where an HTTP 529 would
    have been waited out.

    Expected: for the Anthropic adapter, ``error.type`` gives the status (overloaded_error
    529, api_error 500, rate_limit_error 429, ...), so an overloaded answer is retried."""
    server, queue = answers
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    queue.extend([overloaded, anthropic_message([{"type": "text", "text": "hi"}])])
    model = AnthropicMessagesModel("claude-x", base_url=server.root, api_key=KEY, sleep=_no_wait)
    assert request_once(model).text == "hi"
