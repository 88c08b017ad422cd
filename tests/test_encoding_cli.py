"""`morphz context encoding` and `morphz context budget`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from morphz.interfaces.cli import main
from morphz.txlang import read_one

REGIONS = [
    "protocol",
    "evaluation-profile",
    "inbox",
    "observation-state",
    "mind",
    "session-directory",
    "kernel",
    "evaluation-environment",
    "evaluate",
]


def _run(db: Path, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(main, [*args, "--db", str(db)])
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result.stdout


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "m.db"
    _run(db, "context", "create")
    _run(db, "context", "observe", "--kind", "user_message", "--text", "prepare the deployment")
    return db


def test_encoding_text_is_the_encoding(tmp_path: Path) -> None:
    db = _store(tmp_path)
    text = _run(db, "context", "encoding")
    form = read_one(text)
    assert form == read_one(text)  # one well-formed S-expression
    assert '(text "prepare the deployment")' in text
    assert "(pressure (level normal)" in text


def test_encoding_json_gives_region_ranges_and_tokens(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = json.loads(_run(db, "context", "encoding", "--format", "json"))
    assert [r["name"] for r in out["regions"]] == REGIONS
    data = out["text"].encode()
    for region in out["regions"]:
        chunk = data[region["start"] : region["end"]].decode()
        assert chunk.startswith("(" + region["name"])
        assert region["tokens"] > 0
    assert out["pressure"]["level"] == "normal" and out["tokens"] == out["pressure"]["tokens"]
    # the cache layout, in bytes: the fixed prefix and the inbox's end are marked
    ends = {r["name"]: r["end"] for r in out["regions"]}
    inbox_end = ends["inbox"] - 1  # before the ")" that closes the inbox
    assert out["cache"]["marks"] == [ends["evaluation-profile"], inbox_end]
    assert set(out["cache"]["marks"]) <= set(out["cache"]["cuts"]) and out["cache"]["turns"] == []
    assert data[:inbox_end].decode().endswith('"))')  # the end of the last inbox item


def test_budget_sets_levels_shown_in_status_and_encoding(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = json.loads(
        _run(db, "context", "budget", "--limit", "1000", "--reserve", "100", "--format", "json")
    )
    assert out["budget"]["configured"] == 1000
    assert out["pressure"]["hard"] == 1000 and out["pressure"]["critical"] == 900
    assert out["pressure"]["level"] == "critical"  # the protocol alone is ~1,500 tokens
    status = json.loads(_run(db, "context", "status", "--format", "json"))
    assert status["pressure"]["level"] == "critical"
    assert "(pressure (level critical)" in _run(db, "context", "encoding")
    bigger = json.loads(_run(db, "context", "encoding", "--budget", "50000", "--format", "json"))
    assert bigger["pressure"]["level"] == "normal"


def test_impossible_budget_is_refused(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = json.loads(_run(db, "context", "budget", "--limit", "100", "--format", "json", code=1))
    assert out["error"]["code"] == "input" and "reserve" in out["error"]["message"]


def test_encoding_applies_the_configured_budget_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration's [budget] keys apply over the context's budget as they apply to an
    agent's requests; --budget replaces their limit."""
    db = _store(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "morphz.toml").write_text("[budget]\nlimit = 1000\nreserve = 100\n", "utf-8")
    monkeypatch.chdir(project)
    out = json.loads(_run(db, "context", "encoding", "--format", "json"))
    assert out["pressure"]["hard"] == 1000 and out["pressure"]["critical"] == 900
    given = json.loads(_run(db, "context", "encoding", "--budget", "50000", "--format", "json"))
    assert given["pressure"]["hard"] == 50000 and given["pressure"]["level"] == "normal"
    status = json.loads(_run(db, "context", "status", "--format", "json"))
    assert status["pressure"]["hard"] == 120000  # the context's own budget, unchanged


def test_encoding_model_is_a_spec_as_exec_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name without a prefix is refused as exec refuses it; a scripted spec is named."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    db = _store(tmp_path)
    out = json.loads(
        _run(db, "context", "encoding", "--model", "gpt-4o", "--format", "json", code=1)
    )
    assert out["error"]["code"] == "input" and "openai:gpt-4o" in out["error"]["message"]
    assert '(model "scripted:replies.json")' in _run(
        db, "context", "encoding", "--model", "scripted:replies.json"
    )
