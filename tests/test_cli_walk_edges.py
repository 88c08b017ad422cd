"""A new user's walk through README.md and docs/cli.md (review of 2026-11-30): each test failed
against the code as it was."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents import invoke as _invoke
from agents import script_spec as _script

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "cli.md"


# ------------------------------------------------------------------ context tx


def test_tx_file_with_a_utf8_byte_order_mark_commits(env: Path) -> None:
    """A transaction file saved with a UTF-8 byte-order mark (Notepad, PowerShell's
    Set-Content -Encoding utf8) is refused with "parse (line 1, column 2): stray text after the
    first S-expression": the invisible BOM is read as the first form. `context import`
    accepts a BOM (docs/cli.md); `context tx --file` should too (open it as utf-8-sig), or at
    least name the BOM."""
    db = str(env / "m.db")
    assert _invoke(["context", "create", "--db", db]).exit_code == 0
    tx = env / "bom.tx"
    tx.write_bytes("\ufeff(context-tx (base-version 0) (create plan (step one)))".encode())
    result = _invoke(["context", "tx", "--file", str(tx), "--db", db])
    assert result.exit_code == 0, result.stderr
    piped = _invoke(
        ["context", "tx", "--file", "-", "--db", db],
        stdin="\ufeff(context-tx (base-version 1) (create other (step two)))".encode(),
    )
    assert piped.exit_code == 0, piped.stderr


# ------------------------------------------------------------------ context requests


def test_unknown_activation_hint_names_a_command_that_lists_activations(env: Path) -> None:
    """`morphz context requests --activation nope` says "see `morphz context status`", but
    status shows only a count of running activations, never an id. The hint should name what
    lists activation ids (`morphz context requests --last N`)."""
    db = str(env / "m.db")
    model = _script(env, [{"reply": "ok"}])
    ran = _invoke(["exec", "hi", "--model", model, "--workspace", str(env / "ws"), "--db", db])
    assert ran.exit_code == 0, ran.output
    status = _invoke(["context", "status", "--db", db]).stdout
    assert "act-" not in status  # status lists no activation id
    result = _invoke(["context", "requests", "--activation", "nope", "--db", db])
    assert result.exit_code == 1
    assert "morphz context status" not in result.stderr, result.stderr


# ------------------------------------------------------------------ docs/cli.md


def test_cli_md_does_not_deny_the_audit_progress_display(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/cli.md, morphz context audit: "No progress display yet (the library's audit has no
    progress hook)". Both halves are stale: Context.audit takes progress=, and the command
    shows `audit: N/M events replayed` on stderr when it is a terminal (terminal_progress)."""
    from morphz.interfaces import cli

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    shown = cli.terminal_progress("audit", "events replayed")
    assert shown is not None  # the command does show progress on a terminal
    assert "No progress display yet" not in DOCS.read_text(encoding="utf-8")


def test_cli_md_says_where_the_error_details_are(env: Path) -> None:
    """docs/cli.md, Errors: 'extra details may follow, e.g. `current_version` and
    `changed_boundaries` for a conflict or a stale version' - next to an example whose keys are
    all direct members of "error", so a reader writes `.error.current_version` and gets null:
    the details are nested in `error.details`. The page should say so."""
    db = str(env / "m.db")
    _invoke(["context", "create", "--db", db])
    ahead = _invoke(
        ["context", "tx", "--file", "-", "--db", db, "--format", "json"],
        stdin="(context-tx (base-version 5) (create a (x)))",
    )
    error = json.loads(ahead.stdout)["error"]
    assert "current_version" not in error and error["details"]["current_version"] == 0
    errors = DOCS.read_text(encoding="utf-8").split("**Errors.**", 1)[1].split("**Exit codes**")[0]
    assert re.search(r'[`"]details[`"]', errors), errors  # the key is named


# ------------------------------------------------------------------ python -m morphz


def test_python_dash_m_morphz_runs_the_cli(tmp_path: Path) -> None:
    """`python -m morphz --version` fails with "No module named morphz.__main__; 'morphz' is a
    package and cannot be directly executed", though it is the way to run the CLI from a
    source checkout without installing the console script (PYTHONPATH=src python -m morphz ...,
    as the project's own review instructions say). A src/morphz/__main__.py calling
    morphz.interfaces.cli.main would do."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    env.pop("MORPHZ_DB", None)
    proc = subprocess.run(
        [sys.executable, "-m", "morphz", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "morphz, version" in proc.stdout


def test_budget_no_limit_removes_the_contexts_own_limit(env: Path) -> None:
    """`context budget --no-limit` clears a limit set earlier (there was no way back to none);
    with --limit as well it is a usage error."""
    db = str(env / "m.db")
    assert _invoke(["context", "create", "--db", db]).exit_code == 0
    _invoke(["context", "budget", "--limit", "20000", "--db", db])
    cleared = _invoke(["context", "budget", "--no-limit", "--db", db, "--format", "json"])
    assert cleared.exit_code == 0, cleared.output
    budget = json.loads(cleared.stdout)["budget"]
    assert budget["configured"] is None and budget["window"] == 128_000
    both = _invoke(["context", "budget", "--limit", "5", "--no-limit", "--db", db])
    assert both.exit_code == 2
