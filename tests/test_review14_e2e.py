"""Review 14, end to end: `python -m morphz exec` with a scripted model on a context whose content
is Russian and Chinese, then the inspection commands, as a user meets them (real subprocesses,
a fresh store and workspace in a temporary folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from stores import user_config

SRC = Path(__file__).resolve().parents[1] / "src"


def _morphz(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "HOME": str(cwd / "home")}
    env.pop("MORPHZ_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


def _exec(tmp_path: Path, steps: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """One `exec` on a fresh store; the events it recorded."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (tmp_path / "steps.json").write_text(json.dumps(steps, ensure_ascii=False), "utf-8")
    user_config(tmp_path / "home", 'ask_default = "allow"\n')  # the user's: not a project's
    done = _morphz(
        tmp_path,
        "exec",
        "ctx",
        prompt,
        "--model",
        "scripted:steps.json",
        "--workspace",
        "ws",
        "--db",
        "s.db",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)["event_records"]


def test_context_tx_receipt_shows_a_cjk_frame_id_as_written(tmp_path: Path) -> None:
    """The agent's receipt (a tx_receipt observation, in every later request's inbox) must name
    the frame it created as the agent wrote it: `task/目标`, not `task/\\u76ee\\u6807`, which the
    agent cannot copy into its next transaction, which recall cannot find by its words, and which
    the token estimate charges 1.5 tokens a character instead of one."""
    tx = (
        '(context-tx (base-version {version}) (reason "записать цель") '
        '(derive task/目标 (from {last_ref}) (goal "部署")))'
    )
    steps = [
        {"tool_calls": [{"name": "context_tx", "arguments": {"tx": tx}}]},
        {"reply": "готово"},
    ]
    records = _exec(tmp_path, steps, "Подготовьте развёртывание 请准备部署")
    receipt = next(r for r in records if r["kind"] == "tx_receipt")
    assert json.loads(receipt["text"])["ok"] is True
    assert "task/目标" in receipt["text"], receipt["text"]
    assert "\\u" not in receipt["text"]


def test_tool_refusal_shows_a_russian_file_name_as_written(tmp_path: Path) -> None:
    """A tool's refusal (here: write_file on a read-only file named in Russian) reaches the agent
    as a tool_result whose text must name the file as it is named, as a successful call's result
    does (`created new/итог.txt ...`), not as `\\u043e\\u0442\\u0447\\u0451\\u0442.txt`."""
    records = _refused_write(tmp_path, "Перепишите отчёт")
    result = next(r for r in records if r["kind"] == "tool_result")
    assert result["meta"]["error"] is True
    assert "отчёт.txt" in result["text"], result["text"]


def test_recall_finds_a_refusal_by_the_russian_file_name_it_names(tmp_path: Path) -> None:
    """Recall indexes a tool_result by its text; a refusal escaped to \\uXXXX is indexed as
    `u043e u0442 ...` and a search for the file's name finds nothing."""
    records = _refused_write(tmp_path, "Перепишите файл")
    refused = next(r["ref"] for r in records if r["kind"] == "tool_result")
    found = _morphz(
        tmp_path, "context", "recall", "search", "ctx", "отчёт", "--db", "s.db", "--format", "json"
    )
    assert found.returncode == 0, found.stderr
    hits = [h["ref"] for h in json.loads(found.stdout)["hits"]]
    assert refused in hits, hits


def _refused_write(tmp_path: Path, prompt: str) -> list[dict[str, Any]]:
    """An exec whose agent calls write_file on the read-only file отчёт.txt, then replies."""
    ws = tmp_path / "ws"
    ws.mkdir()
    ro = ws / "отчёт.txt"
    ro.write_text("только чтение\n", "utf-8")
    ro.chmod(0o444)
    call = {"name": "write_file", "arguments": {"path": "отчёт.txt", "content": "x"}}
    return _exec(tmp_path, [{"tool_calls": [call]}, {"reply": "не вышло"}], prompt)
