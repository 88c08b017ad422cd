"""Review 16m: the documentation this session changed, checked against the behaviour."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from morphz.encoding.protocol import PROTOCOL

SRC = str(Path(__file__).resolve().parents[1] / "src")
FULL = Path("/dev/full")


def _cli(args: list[str], cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "HOME": str(cwd)}
    with FULL.open("w") as stdout:
        return subprocess.run(
            [sys.executable, "-m", "morphz", *args],
            check=False,
            cwd=cwd,
            env=env,
            input=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )


def test_protocol_does_not_call_retiring_a_retiring_frame_an_error(tmp_path: Path) -> None:
    # The protocol says "Asking for a state a target is in already is an error (retiring a
    # retiring frame keeps its window)": the parenthesis reads as an example of the error. It is
    # the exception: the retire commits (and is what the supersede fast path needs).
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True, window=3)
        ctx.commit('(context-tx (base-version 0) (reason "r") (create a (n 1)))')
        ctx.commit('(context-tx (base-version 1) (reason "r") (retire a))')
        receipt = ctx.commit('(context-tx (base-version 2) (reason "r") (retire a))')
        assert receipt.after_version == 3  # accepted, not an error
    text = " ".join(PROTOCOL.split())
    start = text.index("Asking for the state a target is in already")
    sentence = text[start : text.index(".", text.index("a retiring frame", start))]
    assert re.search(r"except|not an error|is accepted|but ", sentence), sentence


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
def test_demo_keep_on_full_stdout_does_not_claim_a_kept_store(tmp_path: Path) -> None:
    # Exit status 3 (docs/cli.md) says whether the store changed; demo's first line fails
    # before it opens the store, yet stderr says "what it changed in the store is kept".
    kept = tmp_path / "demo.db"
    done = _cli(["demo", "--keep", str(kept)], tmp_path)
    assert done.returncode == 3, done.stderr
    if not kept.exists():
        assert "is kept" not in done.stderr, done.stderr


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
def test_chat_on_full_stdout_does_not_claim_it_did_its_work(tmp_path: Path) -> None:
    # chat's first prompt fails before the typed line runs: nothing is recorded, yet stderr says
    # "`morphz chat` did its work ... do not run it again for the output".
    script = tmp_path / "steps.json"
    script.write_text('[{"reply": "ok"}]', encoding="utf-8")
    db = tmp_path / "chat.db"
    args = ["chat", "--model", f"scripted:{script}", "--workspace", str(tmp_path), "--db", str(db)]
    done = _cli(args, tmp_path, stdin="hello\n")
    assert done.returncode == 3, done.stderr
    with morphz.open(db) as store:
        events = store.context(create=True).events()
    if not events:
        assert "did its work" not in done.stderr, done.stderr
