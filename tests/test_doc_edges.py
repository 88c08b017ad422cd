"""What README.md, docs/cli.md and docs/ARCHITECTURE.md promise, against what the product does
(from a review of 2026-11-30, which found each of these wrong). No network."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from morphz.interfaces.cli import main

SRC = Path(__file__).resolve().parent.parent / "src" / "morphz"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def run(*args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def test_a_read_command_refuses_a_missing_store_and_creates_nothing(tmp_path: Path) -> None:
    """docs/cli.md, "The store": only context create, exec and chat create a missing store; any
    other command exits 1 with a `store` error, so a mistyped path creates nothing."""
    db = tmp_path / "fresh" / "morphz.db"
    result = run("context", "list", "--db", str(db), "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "store"
    assert not db.exists() and not db.parent.exists()
    assert run("context", "create", "--db", str(db)).exit_code == 0 and db.exists()
    help_text = run("context", "list", "--help").stdout
    assert "create it when missing" in " ".join(help_text.split())


def test_tx_file_that_is_not_utf8_is_a_usage_error_not_a_crash(tmp_path: Path) -> None:
    """docs/cli.md:53: exit 2 for 'a `--file` that cannot be read'; :26 'Every refusal ... is mapped
    in one place'. A --file holding non-UTF-8 bytes raises an uncaught UnicodeDecodeError
    (traceback, exit 1)."""
    db = str(tmp_path / "s" / "morphz.db")
    assert run("context", "create", "--db", db).exit_code == 0
    bad = tmp_path / "bad.tx"
    bad.write_bytes(b"\xff\xfe(context-tx (base-version 0) (create a (b)))")
    result = run("context", "tx", "--file", str(bad), "--db", db, "--format", "json")
    assert not isinstance(result.exception, UnicodeDecodeError), repr(result.exception)
    assert result.exit_code == 2


def test_exec_json_event_records_hold_every_event_the_activation_produced(
    tmp_path: Path,
) -> None:
    """docs/cli.md:850-851 'JSON: the activation (...) and `event_records`, every event it
    produced.' (same in `morphz exec --help`). activation_started, context_tx_committed and
    activation_finished are left out."""
    db = str(tmp_path / "s" / "morphz.db")
    script = tmp_path / "steps.json"
    tx = "(context-tx (base-version {version}) (create plan (step one)))"
    steps = [
        {"tool_calls": [{"name": "context_tx", "arguments": {"tx": tx}}]},
        {"reply": "done"},
    ]
    script.write_text(json.dumps(steps), encoding="utf-8")
    result = run(
        "exec", "go", "--model", f"scripted:{script}", "--workspace", str(tmp_path),
        "--db", db, "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    produced = {e["kind"] for e in json.loads(result.stdout)["event_records"]}
    events = run("context", "events", "--db", db, "--format", "json")
    in_store = {e["kind"] for e in json.loads(events.stdout)}
    assert in_store - produced == set()  # actual: activation_started, context_tx_committed, ...


def test_demo_output_matches_the_documented_example() -> None:
    """Every line docs/cli.md shows of `morphz demo` (its table, receipt and audit lines) is a
    line the demo prints."""
    doc = (SRC.parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")
    block = doc[doc.index("$ morphz demo\n") : doc.index("```", doc.index("$ morphz demo\n"))]
    shown = [line for line in block.splitlines()[1:] if line and line != "..."]
    result = run("demo")
    assert result.exit_code == 0, result.output
    printed = set(result.stdout.splitlines())
    assert [line for line in shown if line not in printed] == []
    assert any(line.startswith("receipt:") for line in shown)


def test_status_keys_are_the_documented_ones(tmp_path: Path) -> None:
    db = str(tmp_path / "s" / "morphz.db")
    assert run("context", "create", "--db", db).exit_code == 0
    text = run("context", "status", "--db", db).stdout
    assert "protected            frames 0, observations 0" in text and "pressure " in text
    data: dict[str, Any] = json.loads(
        run("context", "status", "--db", db, "--format", "json").stdout
    )
    documented = {
        "context", "version", "clock", "last_seq", "window", "head", "frames", "observations",
        "protected", "sessions", "checkpoints", "running_activations", "pressure",
    }  # fmt: skip
    assert set(data) == documented and set(data["protected"]) == {"frames", "observations"}


def test_a_search_cursor_follows_its_query_not_its_limit(tmp_path: Path) -> None:
    """docs/cli.md, "Paging": a cursor passed with another query is refused; --limit may change."""
    db = str(tmp_path / "s" / "morphz.db")
    assert run("context", "create", "--db", db).exit_code == 0
    for text in ("deploy the api", "deploy the web", "deploy the worker"):
        obs = run("context", "observe", "--kind", "user_message", "--text", text, "--db", db)
        assert obs.exit_code == 0
    search = ("context", "recall", "search")
    page = run(*search, "deploy", "--limit", "1", "--db", db, "--format", "json")
    cursor = json.loads(page.stdout)["next_cursor"]
    wider = run(
        *search, "deploy", "--limit", "2", "--cursor", cursor, "--db", db, "--format", "json"
    )
    assert wider.exit_code == 0 and len(json.loads(wider.stdout)["hits"]) == 2
    other = run(*search, "api", "--cursor", cursor, "--db", db, "--format", "json")
    assert other.exit_code == 1 and json.loads(other.stdout)["error"]["code"] == "cursor"


# docs/ARCHITECTURE.md: store/ imports from above it only the pure layers, checks and owners;
# mind and txlang import only each other, errors, ids, graphemes and token_estimate.
STORE_MAY_USE = {
    "errors",
    "events",
    "ids",
    "results",
    "store",
    "mind",
    "txlang",
    "checks",
    "owners",
    "graphemes",
    "token_estimate",
}
PURE_MAY_USE = {"errors", "ids", "mind", "txlang", "graphemes", "token_estimate"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("morphz."):
            parts = node.module.split(".")
            names.add(".".join(parts[1:3]) if parts[1] == "recall" else parts[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("morphz."))
    return names


def test_the_layers_import_what_architecture_md_says() -> None:
    violations = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        top = rel.parts[0].removesuffix(".py")
        allowed = {"store": STORE_MAY_USE | {"recall.documents", "recall.tokenize"}}.get(
            top, PURE_MAY_USE if top in ("mind", "txlang") else None
        )
        if allowed is None:
            continue
        violations += [f"{rel} imports morphz.{n}" for n in sorted(_imports(path) - allowed)]
    assert violations == []
