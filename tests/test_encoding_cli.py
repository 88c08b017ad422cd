"""`morphz context encoding` and `morphz context budget`."""

from __future__ import annotations

import json
from pathlib import Path

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
