"""Review 16k: the command line as docs/cli.md documents it, run as a user runs it (real
subprocesses, a scratch HOME and store, the scripted model). Each test fails on the defect it
names and passes once it is fixed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stores import isolated_env, run_morphz


def _env(tmp_path: Path) -> dict[str, str]:
    return isolated_env(tmp_path, MORPHZ_DB=str(tmp_path / "m.db"))


def morphz(
    tmp_path: Path, *args: str, stdin: str | None = None, stdout: Any = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return run_morphz(tmp_path, *args, stdin=stdin, stdout=stdout, env=_env(tmp_path))


def _json_error(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 1, proc.stderr
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


# ------------------------------------------------------------------ context create


@pytest.mark.parametrize(
    "args",
    [("bad id",), ("ops", "--window", "2000000")],
    ids=["invalid-context-id", "window-over-its-maximum"],
)
def test_create_refused_leaves_no_store_behind(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Exit status 1 means "the store is unchanged" (docs/cli.md, Exit codes), and `exec` and
    `chat` check everything before they create a store. `context create` opens (creates) the
    store first and only then has the id or window refused: a mistyped command leaves an empty
    store (and its folder) at the path, which later commands then treat as a real store."""
    store = tmp_path / "new" / "morphz.db"
    proc = morphz(tmp_path, "context", "create", *args, "--db", str(store))
    assert proc.returncode == 1, proc.stderr
    assert "error (input)" in proc.stderr
    assert not store.exists(), "a refused `context create` created the store file"


# ------------------------------------------------------------------ output


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_reported_not_a_traceback(tmp_path: Path) -> None:
    """`morphz context observe ... > log` on a full disk: the observation is committed, then
    printing it fails and the user gets a Python traceback (OSError: No space left on device)
    with exit status 1, which the docs reserve for "refused, the store is unchanged". The
    output failure should be a readable error (saying what was recorded), not a traceback."""
    assert morphz(tmp_path, "context", "create").returncode == 0
    with open("/dev/full", "w") as full:
        proc = morphz(
            tmp_path,
            "context",
            "observe",
            "--kind",
            "user_message",
            "--text",
            "hello",
            stdout=full,
        )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------ context import


def _import(tmp_path: Path, line: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "history.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    return morphz(tmp_path, "context", "import", str(path), "--format", "json")


def test_import_unknown_kind_offers_only_kinds_an_import_takes(tmp_path: Path) -> None:
    """A misspelt kind is refused with the list of kinds to use, and that list offers
    agent_reply, which the very next try refuses ("written by the runtime ... import an
    assistant's turn as external_event")."""
    assert morphz(tmp_path, "context", "create").returncode == 0
    error = _json_error(_import(tmp_path, '{"text": "hi", "kind": "usr_message"}'))
    assert error["code"] == "import" and error["line"] == 1
    offered = error["message"].split("use one of", 1)[1]
    assert "agent_reply" not in offered, error["message"]


def test_import_null_kind_is_not_named_in_python(tmp_path: Path) -> None:
    """`"time": null` and `"meta": null` import as their defaults, but `"kind": null` is
    refused as "unknown observation kind None" (Python's repr, not the file's JSON). It should
    take the documented default (user_message), as the other optional fields do, or at least
    name the value as the file wrote it."""
    assert morphz(tmp_path, "context", "create").returncode == 0
    proc = _import(tmp_path, '{"text": "hi", "kind": null}')
    if proc.returncode != 0:
        message = _json_error(proc)["message"]
        assert "None" not in message, message


# ------------------------------------------------------------------ chat


def _script(tmp_path: Path, steps: list[dict[str, Any]]) -> str:
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{path}"


def test_chat_mind_does_not_point_at_an_option_chat_lacks(tmp_path: Path) -> None:
    """/mind prints `Observations (active or protected; --all-observations for all)`: chat has
    no such option and /mind takes no argument, so the advice cannot be followed there."""
    model = _script(tmp_path, [{"reply": "ok"}])
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = morphz(
        tmp_path, "chat", "--model", model, "--workspace", str(ws), stdin="hello\n/mind\n/quit\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Observations" in proc.stdout
    assert "--all-observations" not in proc.stdout, proc.stdout


def test_chat_recall_does_not_offer_a_cursor_it_cannot_take(tmp_path: Path) -> None:
    """/recall QUERY prints the CLI's search page, ending with `next cursor: eJw...` when there
    are more hits, but /recall takes no cursor (the line is all query): the user is shown a
    token with no way to use it. It should say how to see more (or page itself)."""
    assert morphz(tmp_path, "context", "create").returncode == 0
    lines = "".join(json.dumps({"text": f"deploy note {i}"}) + "\n" for i in range(15))
    (tmp_path / "h.jsonl").write_text(lines, encoding="utf-8")
    assert morphz(tmp_path, "context", "import", "h.jsonl").returncode == 0
    model = _script(tmp_path, [{"reply": "ok"}])
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = morphz(
        tmp_path, "chat", "--model", model, "--workspace", str(ws), stdin="/recall deploy\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "10 hits" in proc.stdout, proc.stdout
    shown_cursor = "next cursor: " in proc.stdout
    assert not shown_cursor or "recall search" in proc.stdout, proc.stdout


# ------------------------------------------------------------------ context recover


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    proc = morphz(tmp_path, "context", "events", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    events: list[dict[str, Any]] = json.loads(proc.stdout)
    return events


def test_recover_records_the_missing_result_before_the_end_in_time_too(tmp_path: Path) -> None:
    """`context recover` appends, in one transaction, a tool_result for the dead activation's
    unanswered call and then its activation_finished. The end's time is read before the write
    (Context._runtime_event, src/morphz/contextdb.py:432) and the result's inside it
    (activating.interrupt's answer, src/morphz/activating.py:186), so the history says the
    activation ended before the result that precedes it was recorded."""
    home = tmp_path / "home"
    (home / ".morphz").mkdir(parents=True)
    (home / ".morphz" / "morphz.toml").write_text('[policies]\nexec = "allow"\n')
    model = _script(
        tmp_path,
        [{"tool_calls": [{"name": "exec", "arguments": {"command": "sleep 60"}}]}, {"reply": "x"}],
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = subprocess.Popen(
        [sys.executable, "-m", "morphz", "exec", "go", "--model", model, "--workspace", str(ws)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        for _ in range(1200):  # until the call is recorded (a safety net, not a timing)
            if (tmp_path / "m.db").exists() and any(
                e["kind"] == "model_reply" for e in _events(tmp_path)
            ):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the scripted call was never recorded")
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=60)
    proc = morphz(tmp_path, "context", "recover", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["interrupted"]) == 1
    tail = _events(tmp_path)[-2:]
    assert [e["kind"] for e in tail] == ["tool_result", "activation_finished"]
    assert tail[0]["recorded_at"] <= tail[1]["recorded_at"], tail
