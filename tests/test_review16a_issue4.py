"""Review 16a: conformance to issue 4 (the Context Encoding and capacity).

Each test fails on the code reviewed because of the gap it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import morphz
from histories import Clock
from stores import SRC

LOCAL_TIME = "2026-08-04T10:00:00+00:00"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m morphz ARGS`` in ``cwd``, with a home folder of its own (no user config),
    running the Morphz under test (a relative PYTHONPATH would not reach it from ``cwd``)."""
    env = {**os.environ, "HOME": str(cwd / "home"), "PYTHONPATH": str(SRC)}
    env.pop("MORPHZ_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_encoding_cli_counts_for_the_configured_model(tmp_path: Path) -> None:
    """Issue 4 item 4: the kernel states whether its figure is estimated or calibrated, and
    `morphz context encoding` reads the configuration "as exec and chat read it". With
    `model = "openai:gpt-x"` in morphz.toml and a calibration learnt for that model, an agent's
    requests (exec, chat) and `context tx`'s budget check count calibrated, but `context
    encoding` without --model compiles for model "none" and states the estimated figure: the
    user sees another pressure than the agent does."""
    path = tmp_path / "m.db"
    db = morphz.open(path, now=Clock())
    ctx = db.context("ctx", create=True)
    ctx.observe("user_message", "prepare the deployment " * 40)
    for _ in range(3):  # the provider reports half what we estimate
        ctx.calibrate("openai:gpt-x", 10_000, 5_000)
    db.close()
    (tmp_path / "home").mkdir()
    (tmp_path / "morphz.toml").write_text('model = "openai:gpt-x"\n', encoding="utf-8")
    done = _cli(tmp_path, "context", "encoding", "ctx", "--db", str(path), "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert '(model "openai:gpt-x")' in out["text"]
    assert out["pressure"]["kind"] == "calibrated"


def test_inbox_shows_an_observations_meta(tmp_path: Path) -> None:
    """Issue 4 item 2 (DESIGN §9): the inbox shows each observation's immutable content. An
    observation's meta is immutable content (docs/cli.md's import example keeps the speaker
    there: {"speaker": "ana"}; the runtime records each tool result's tool and call there), but
    no region of the encoding shows it: the model cannot tell who said what in an imported
    conversation, nor which call a result such as "exec was not approved" answers."""
    db = morphz.open(tmp_path / "m.db", now=Clock())
    ctx = db.context("ctx", create=True)
    ctx.observe("user_message", "ship it on friday", meta={"speaker": "ana"})
    ctx.observe("user_message", "no, monday", meta={"speaker": "bo"})
    inbox = ctx.encode(local_time=LOCAL_TIME).region("inbox")
    db.close()
    assert "ana" in inbox and "bo" in inbox
