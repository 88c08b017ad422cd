"""The `morphz` command line, through click's CliRunner on a store in tmp_path (and once as a real
console-script subprocess). No test touches the network or the user's home store."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from morphz.interfaces.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
ERROR_KEYS = {"code", "message", "op", "line", "column"}


class Cli:
    """Runs `morphz ARGS... --db <tmp store>` and checks the exit status."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.runner = CliRunner()

    def __call__(self, *args: str, code: int = 0, stdin: str | None = None) -> Result:
        result = self.runner.invoke(main, [*args, "--db", str(self.db)], input=stdin)
        if result.exit_code != code:
            raise AssertionError(
                f"exit {result.exit_code} != {code} for {args}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: str, code: int = 0, stdin: str | None = None) -> Any:
        return json.loads(self(*args, "--format", "json", code=code, stdin=stdin).stdout)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither MORPHZ_DB nor the real home directory leaks into a test."""
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store" / "morphz.db")


@pytest.fixture
def ready(cli: Cli) -> Cli:
    """A store with context-default holding one user message (@e1)."""
    cli("context", "create")
    cli("context", "observe", "--kind", "user_message", "--text", "prepare the deployment")
    return cli


def tx_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tx.lisp"
    path.write_text(text, encoding="utf-8")
    return str(path)


CREATE_TX = """(context-tx
  (base-version 0)
  (derive deployment/target-v1 (from @e1) (fact (region cn-hangzhou)))
  (create notes/plan (steps "build" "roll out")))"""


# ------------------------------------------------------------------ create and list


def test_create_json_and_text(cli: Cli) -> None:
    status = cli.json("context", "create", "ops", "--window", "3")
    assert status["context"] == "ops" and status["window"] == 3 and status["version"] == 0
    text = cli("context", "create").stdout
    assert "created context context-default" in text and "8 ticks" in text


def test_create_twice_is_refused(cli: Cli) -> None:
    cli("context", "create")
    out = cli.json("context", "create", code=1)
    assert out["ok"] is False and out["error"]["code"] == "exists"
    result = cli("context", "create", code=1)
    assert result.stdout == "" and "already exists" in result.stderr


def test_list_json_and_text(cli: Cli) -> None:
    missing = cli.json("context", "list", code=1)  # a mistyped --db is not silently created
    assert missing["error"]["code"] == "store" and "no store at" in missing["error"]["message"]
    assert not cli.db.exists()
    cli("context", "create", "beta")
    cli("context", "create", "alpha")
    assert [c["context"] for c in cli.json("context", "list")] == ["alpha", "beta"]
    lines = cli("context", "list").stdout.splitlines()
    assert lines[0].split()[:2] == ["context", "version"]
    assert lines[2].startswith("alpha") and lines[3].startswith("beta")


def test_missing_context_is_not_found(cli: Cli) -> None:
    cli("context", "create", "other")
    out = cli.json("context", "status", "nope", code=1)
    assert (
        out["error"]["code"] == "not-found" and "morphz context create" in out["error"]["message"]
    )


# ------------------------------------------------------------------ observe


def test_observe_json(cli: Cli) -> None:
    cli("context", "create")
    event = cli.json(
        "context",
        "observe",
        "--kind",
        "tool_result",
        "--text",
        "region: cn-shanghai",
        "--time",
        "2026-08-04T09:00:00+08:00",
        "--meta",
        '{"tool": "read_config"}',
        "--session",
        "ops-1",
    )
    assert event["ref"] == "@e1" and event["seq"] == 1 and event["kind"] == "tool_result"
    assert event["meta"] == {"tool": "read_config"} and event["session"] == "ops-1"
    assert event["time"] == "2026-08-04T09:00:00+08:00" and event["clock"] == 1


def test_observe_text_is_one_line(cli: Cli) -> None:
    cli("context", "create")
    out = cli("context", "observe", "--kind", "recall_result", "--text", "a\nb").stdout
    assert out.count("\n") == 1 and out.startswith("@e1 recall_result") and "clock=0" in out


def test_observe_bad_input(cli: Cli) -> None:
    cli("context", "create")
    base = ("context", "observe", "--kind", "user_message", "--text", "x")
    assert "not valid JSON" in cli(*base, "--meta", "{nope", code=2).stderr
    assert "JSON object" in cli(*base, "--meta", "[1]", code=2).stderr
    assert "'chat'" in cli("context", "observe", "--kind", "chat", "--text", "x", code=2).stderr
    out = cli.json(*base, "--time", "2026-08-04T09:00:00", code=1)  # no UTC offset
    assert out["error"]["code"] == "input"


# ------------------------------------------------------------------ tx


def test_tx_json_receipt(ready: Cli, tmp_path: Path) -> None:
    receipt = ready.json("context", "tx", "--file", tx_file(tmp_path, CREATE_TX))
    assert receipt["ok"] is True and receipt["tx_id"] == "tx-1" and receipt["event"] == "@e2"
    assert (receipt["before_version"], receipt["after_version"]) == (0, 1)
    assert [c["target"] for c in receipt["changes"]] == ["deployment/target-v1", "notes/plan"]


def test_tx_text_receipt_from_stdin(ready: Cli) -> None:
    out = ready("context", "tx", "--file", "-", "--session", "s2", stdin=CREATE_TX).stdout
    assert "committed tx-1 as @e2: version 0 -> 1" in out and "session s2" in out
    assert "deployment/target-v1" in out and "notes/plan" in out


def test_tx_stdin_json(ready: Cli) -> None:
    receipt = ready.json("context", "tx", "--file", "-", stdin=CREATE_TX)
    assert receipt["after_version"] == 1


@pytest.mark.parametrize(
    ("text", "code", "op", "line"),
    [
        ("(context-tx (base-version 1) (retire notes/plan))", "validation", "retire", 1),
        ('(context-tx (base-version 1) (reason "r") (retire ghost))', "not-found", "retire", 1),
        ("(context-tx (base-version 1)\n  (frob x))", "parse", "frob", 2),
        (
            '(context-tx (base-version 0) (reason "r") (rollback cp))',
            "stale-version",
            "rollback",
            1,
        ),
        ('(context-tx (base-version 0) (reason "r") (retire notes/plan))', "conflict", "retire", 1),
        ("(context-tx (base-version 9) (create x (a)))", "validation", None, 1),
    ],
)
def test_tx_refusal_json_shape_and_store_unchanged(
    *, ready: Cli, tmp_path: Path, text: str, code: str, op: str | None, line: int | None
) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    before = ready.json("context", "status")
    events_before = ready.json("context", "events")
    out = ready.json("context", "tx", "--file", tx_file(tmp_path, text), code=1)
    assert out["ok"] is False and set(out) == {"ok", "error"}
    error = out["error"]
    assert set(error) >= ERROR_KEYS and error["message"]
    assert (error["code"], error["op"], error["line"]) == (code, op, line)
    assert ready.json("context", "status") == before
    assert ready.json("context", "events") == events_before


def test_tx_conflict_names_the_changed_boundaries(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    stale = '(context-tx (base-version 0) (reason "r") (retire notes/plan))'
    out = ready.json("context", "tx", "--file", "-", stdin=stale, code=1)
    assert out["error"]["details"]["changed_boundaries"] == ["life:notes/plan"]


def test_tx_refusal_text_goes_to_stderr(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    stale = '(context-tx (base-version 0) (reason "r") (retire notes/plan))'
    result = ready("context", "tx", "--file", "-", stdin=stale, code=1)
    assert result.stdout == ""
    assert result.stderr.startswith("error: conflict") and "changed_boundaries" in result.stderr


def test_tx_missing_file_is_a_usage_error(ready: Cli, tmp_path: Path) -> None:
    assert ready("context", "tx", "--file", str(tmp_path / "nope.tx"), code=2).exit_code == 2


# ------------------------------------------------------------------ status, show, events


def test_status_json_and_text(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    status = ready.json("context", "status")
    assert status["version"] == 1 and status["clock"] == 1 and status["last_seq"] == 2
    assert status["frames"]["active"] == 2 and status["observations"]["active"] == 1
    assert re.fullmatch(r"[0-9a-f]{64}", status["head"])
    text = ready("context", "status").stdout
    assert "version              1" in text and f"head                 {status['head']}" in text


def test_show_json_and_text(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    retire = '(context-tx (base-version 1) (reason "later") (retire notes/plan) (retire @e1))'
    ready("context", "tx", "--file", "-", stdin=retire)
    mind = ready.json("context", "show")
    assert mind["order"] == ["deployment/target-v1", "notes/plan"]
    plan = mind["frames"][1]
    assert plan["lifecycle"] == "retiring" and plan["remaining_ticks"] == 8
    assert mind["frames"][0]["sources"] == ["@e1"]
    assert mind["observations"] == []  # @e1 retired: only with --all-observations
    every = ready.json("context", "show", "--all-observations")
    assert [o["lifecycle"] for o in every["observations"]] == ["retired"]
    text = ready("context", "show").stdout
    assert "retiring (8 ticks left)" in text and "(fact (region cn-hangzhou))" in text
    assert "Relations\n(none)" in text
    assert "@e1" in ready("context", "show", "--all-observations").stdout


def test_events_json_and_text(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    every = ready.json("context", "events")
    assert [e["ref"] for e in every] == ["@e1", "@e2"]
    assert every[1]["kind"] == "context_tx_committed" and every[1]["version"] == 1
    assert [e["seq"] for e in ready.json("context", "events", "--after", "1")] == [2]
    assert len(ready.json("context", "events", "--limit", "1")) == 1
    text = ready("context", "events").stdout
    assert "@e1  user_message" in text and "@e2  context_tx_committed" in text


# ------------------------------------------------------------------ audit


def test_audit_ok(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    report = ready.json("context", "audit")
    assert report["ok"] is True and report["commits"] == 1 and report["differences"] == []
    assert ready("context", "audit").stdout.startswith("audit: ok")


def test_audit_fails_on_a_tampered_store(ready: Cli) -> None:
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    with contextlib.closing(sqlite3.connect(ready.db)) as conn, conn:
        conn.execute(
            "UPDATE frames SET body = '(fact (region mars))' WHERE frame_id = ?",
            ("deployment/target-v1",),
        )
    report = ready.json("context", "audit", code=1)
    assert report["ok"] is False and report["differences"]
    assert any("deployment/target-v1" in d for d in report["differences"])
    text = ready("context", "audit", code=1).stdout
    assert text.startswith("audit: FAILED") and "deployment/target-v1" in text


def test_audit_checks_the_session_counts(ready: Cli) -> None:
    """The session directory's totals (kept by triggers) are checked against the sessions."""
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    assert ready.json("context", "audit")["ok"] is True
    with contextlib.closing(sqlite3.connect(ready.db)) as conn, conn:
        conn.execute("UPDATE session_counts SET n = n + 2 WHERE attention = 'active'")
    report = ready.json("context", "audit", code=1)
    assert report["differences"] == ["session counts: replay {'active': 1}, stored {'active': 3}"]


# ------------------------------------------------------------------ the store location


def test_morphz_db_env_is_the_default(tmp_path: Path) -> None:
    path = tmp_path / "env" / "m.db"
    runner = CliRunner(env={"MORPHZ_DB": str(path)})
    assert runner.invoke(main, ["context", "create", "envctx"]).exit_code == 0
    assert path.exists()
    listed = runner.invoke(main, ["context", "list", "--format", "json"])
    assert [c["context"] for c in json.loads(listed.stdout)] == ["envctx"]


def test_home_store_is_the_last_default(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["context", "create"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / ".morphz" / "morphz.db").exists()


def test_unknown_format_is_a_usage_error(cli: Cli) -> None:
    assert cli("context", "list", "--format", "yaml", code=2).exit_code == 2


# ------------------------------------------------------------------ demo


DEMO_ROWS = [
    r"\| Context object +\| Before commit +\| After commit +\|",
    r"\| Old frame deployment/target-v1 +\| active, revision 1 +\| retired, revision 1 +\|",
    r"\| New frame deployment/target-v2 +\| does not exist +\| active, revision 1 +\|",
    r"\| Configuration observation @e\d+ +\| active in context .*\| retired; still readable",
    r"\| Other cognition +\| deployment/plan: active, revision 1 +\| deployment/plan: unchanged",
]


def check_demo(out: str) -> None:
    for row in DEMO_ROWS:
        assert re.search(row, out), row
    assert "(fact (region cn-shanghai))" in out and "(base-version 1)" in out
    config = re.search(r"(@e\d+) tool_result", out)
    assert config is not None  # the read_file result of the agent run
    ref = config.group(1)
    assert f"(from {ref} deployment/target-v1)" in out and f"(retire {ref})" in out
    assert re.search(r"receipt: tx-2 as @e\d+, version 1 -> 2 \(not rebased\)", out)
    assert "the agent calls read_file" in out and "the agent replies" in out
    assert re.search(r"^audit: ok \(\d+ events replayed\)$", out, re.MULTILINE)


def test_demo_in_process() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    check_demo(result.stdout)
    folder = re.search(r"fresh store at (\S+)", result.stdout)
    assert folder is not None and not Path(folder.group(1)).exists()  # temp folder deleted


def test_demo_keep(tmp_path: Path) -> None:
    kept = tmp_path / "demo.db"
    result = CliRunner().invoke(main, ["demo", "--keep", str(kept)])
    assert result.exit_code == 0, result.output
    check_demo(result.stdout)
    shown = CliRunner().invoke(main, ["context", "show", "--db", str(kept), "--format", "json"])
    assert "deployment/target-v2" in json.loads(shown.stdout)["order"]
    again = CliRunner().invoke(main, ["demo", "--keep", str(kept)])
    assert again.exit_code == 2 and "already exists" in again.stderr


def _console_script() -> str:
    beside = Path(sys.executable).parent / "morphz"
    found = str(beside) if beside.exists() else shutil.which("morphz")
    if found is None:
        pytest.fail("the morphz console script is not installed: pip install -e .")
    return found


def test_demo_console_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [_console_script(), "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    check_demo(done.stdout)


# ------------------------------------------------------------------ docs


def command_paths(command: click.Command, path: str) -> Iterator[str]:
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from command_paths(sub, f"{path} {name}")
    else:
        yield path


def test_every_command_has_a_docs_heading() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    paths = list(command_paths(main, "morphz"))
    assert "morphz context tx" in paths and "morphz demo" in paths
    missing = [
        p for p in paths if not re.search(rf"^##+ .*{re.escape(p)}(\s|$)", doc, re.MULTILINE)
    ]
    assert not missing, f"docs/cli.md has no heading for {missing}"


def test_status_budget_and_encoding_state_the_same_pressure(cli: Cli) -> None:
    """The three commands compile the same default encoding at the machine's local time, so
    they agree on the figure; the budget puts critical exactly at it, so a figure off by one
    token in any of them would also show another level."""
    cli("context", "create")
    cli("context", "observe", "--kind", "user_message", "--text", "prepare the deployment")
    tokens = cli.json("context", "status")["pressure"]["tokens"]
    cli("context", "budget", "--limit", str(tokens + 100), "--reserve", "100")
    status = cli.json("context", "status")["pressure"]
    budget = cli.json("context", "budget")["pressure"]
    encoding = cli.json("context", "encoding")["pressure"]
    assert status.pop("model") is None and budget.pop("model") is None  # no calibration learnt
    assert status == budget == encoding
    assert (status["level"], status["tokens"]) == ("critical", tokens)


def test_text_output_keeps_escape_sequences_of_stored_text(cli: Cli) -> None:
    """A tool result with colour codes comes out as stored, and as a model is sent it, in the
    text output of `context encoding` and `context recall read` (click strips ANSI escape
    sequences from output that is not a terminal unless told otherwise)."""
    text = "\x1b[31mERROR\x1b[0m build failed"
    cli("context", "create")
    cli("context", "observe", "--kind", "tool_result", "--text", text)
    assert f'(text "{text}")' in cli("context", "encoding").stdout_bytes.decode()
    assert cli("context", "recall", "read", "@e1").stdout_bytes.decode().startswith(text)


@pytest.mark.parametrize(
    ("column", "value"),
    [("created_seq", "created_seq + 1"), ("last_seq", "last_seq - 1"), ("last_time", "'2001'")],
)
def test_audit_checks_each_sessions_first_and_last_event(
    ready: Cli, column: str, value: str
) -> None:
    """Where a session began, its last event and that event's time (the session directory's
    working set reads them) are compared with the log."""
    ready("context", "tx", "--file", "-", stdin=CREATE_TX)
    assert ready.json("context", "audit")["ok"] is True
    with contextlib.closing(sqlite3.connect(ready.db)) as conn, conn:
        conn.execute(f"UPDATE sessions SET {column} = {value}")
    report = ready.json("context", "audit", code=1)
    assert any("(created, last, last time)" in d for d in report["differences"])
