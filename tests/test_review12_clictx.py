"""Review 12, `morphz context encoding/status/budget/view/requests` and `ctx.encode` as a demanding
user drives them from a terminal and a program. Each test failed on the code it was written
against; its docstring says what should happen. No network, real SQLite, no sleeping."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


# no MORPHZ_DB, no real home directory, no morphz.toml of the caller; the cwd is tmp_path
pytestmark = pytest.mark.usefixtures("env")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "m.db"
    assert run("context", "create", "--db", str(db)).exit_code == 0
    done = run(
        "context", "observe", "--kind", "user_message", "--text", "prepare the deployment",
        "--db", str(db),
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return db


def _section(heading: str) -> str:
    """The text of the docs/cli.md section whose heading is exactly ``## heading``."""
    doc = DOCS.read_text(encoding="utf-8")
    start = doc.index(f"\n## {heading}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else len(doc)]


# ------------------------------------------------------------------ ctx.encode: the counter


@pytest.mark.parametrize("result", [None, -40, 1.5], ids=["none", "negative", "fraction"])
def test_encode_refuses_a_counter_that_returns_no_token_count(
    ctx: morphz.Context, result: Any
) -> None:
    """EncodeOptions.counter is "a function from text to a token count"; options.py promises a
    wrong option is "a typed InputError naming the field (never a TypeError from deep in the
    compile)". A counter returning None should be an InputError naming `counter`, not a
    TypeError from `sum`; one returning a negative or fractional count should be refused too,
    not give an encoding whose pressure is -360 or 52.5 tokens (today: TypeError, or accepted)."""
    ctx.observe("user_message", "prepare the deployment")
    with pytest.raises(morphz.InputError, match="counter"):
        ctx.encode(counter=lambda text: result)


def test_encode_budget_keys_unknown_field_names_the_budget_fields(ctx: morphz.Context) -> None:
    """`ctx.encode(budget_keys={"windw": 64000})` (a typo) is refused as it should be, but the
    message reads "the configured budget (windw 64000): Budget.__init__() got an unexpected
    keyword argument 'windw'": it calls any key "the configured budget" and leaks a Python
    signature. Like an unknown encoding option (make_options), it should name the unknown key
    and list the fields a budget has (window, output_reserve, configured, reserve, ...)."""
    with pytest.raises(morphz.InputError) as caught:
        ctx.encode(budget_keys={"windw": 64000})
    message = str(caught.value)
    assert "__init__" not in message
    assert "window" in message and "output_reserve" in message and "reserve" in message


# ------------------------------------------------------------------ the commands


def test_encoding_model_with_an_unknown_prefix_is_refused(tmp_path: Path) -> None:
    """`--model SPEC` is documented as openai:NAME or anthropic:NAME and counts tokens "the way
    the runtime does for that model"; `exec --model opnai:gpt-4o` is refused (unknown model kind,
    exit 1). `context encoding --model opnai:gpt-4o` (a typo) exits 0 today, names the model
    that does not exist in the encoding and silently falls back to the estimate. It should be
    refused the same way (exit 1, code `input`, naming the prefixes); `none`, the default, stays
    accepted."""
    db = _store(tmp_path)
    assert run("context", "encoding", "--db", str(db)).exit_code == 0  # the default, none
    done = run(
        "context", "encoding", "--model", "opnai:gpt-4o", "--db", str(db), "--format", "json"
    )
    assert done.exit_code == 1, done.stdout[:300]
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "input" and "openai:" in error["message"]


def test_requests_unknown_activation_advice_names_the_context(tmp_path: Path) -> None:
    """`morphz context requests ops --activation X` with no such activation in ops says to run
    "`morphz context requests --last 10`", which lists context-default's activations, not ops's.
    The advice should be runnable as given: name the context (`requests ops --last 10`)."""
    db = _store(tmp_path)
    assert run("context", "create", "ops", "--db", str(db)).exit_code == 0
    done = run("context", "requests", "ops", "--activation", "act-x", "--db", str(db))
    assert done.exit_code == 1
    assert "requests ops --last" in done.stderr, done.stderr


def test_a_folder_given_as_the_store_says_it_is_a_folder(tmp_path: Path) -> None:
    """`--db` naming a folder (or `--db ''`, which is the current folder; or MORPHZ_DB set to the
    folder the user keeps stores in) fails with "cannot open the store at /x: unable to open
    database file": nothing says the path is a folder or what to do. Errors should say what to
    do next, as the other store errors do: that the path is a folder and --db / MORPHZ_DB must
    name the store's file."""
    folder = tmp_path / "stores"
    folder.mkdir()
    done = run("context", "encoding", "--db", str(folder))
    assert done.exit_code == 1
    said = done.stderr.replace(str(folder), "PATH")  # the test's own path may hold the words
    assert re.search(r"folder|directory", said), said
    assert "--db" in said, said


# ------------------------------------------------------------------ docs/cli.md


def test_cli_md_encoding_json_names_every_sessions_key(tmp_path: Path) -> None:
    """docs/cli.md, `context encoding`, JSON: `"sessions": {"shown", "excluded"}`. The command
    also prints `sessions.retired_latest` (the retired sessions the directory names, which
    restore-session takes). Every key the JSON carries should be documented."""
    db = _store(tmp_path)
    out = json.loads(run("context", "encoding", "--db", str(db), "--format", "json").stdout)
    section = _section("morphz context encoding")
    undocumented = [key for key in out["sessions"] if f'"{key}"' not in section]
    assert not undocumented, f"sessions keys not in docs/cli.md: {undocumented}"


def test_cli_md_encoding_exit_codes_include_refused_values(tmp_path: Path) -> None:
    """docs/cli.md, `context encoding`: "Exit codes: 0; 1 when the store or context does not
    exist." A session id that is not an id (`--session 12345`) and a budget that makes no budget
    (`--budget 100`, below the maintenance reserve) also exit 1, with code `input`; the exit
    codes line should say so (as `context view`'s and `context budget`'s do)."""
    db = _store(tmp_path)
    for args in (["--session", "12345"], ["--budget", "100"]):
        done = run("context", "encoding", *args, "--db", str(db), "--format", "json")
        assert done.exit_code == 1 and json.loads(done.stdout)["error"]["code"] == "input"
    exits = re.search(r"Exit codes: (.*?)(?:\n\n|\Z)", _section("morphz context encoding"), re.S)
    assert exits is not None
    assert "input" in exits.group(1), exits.group(1)


def test_cli_md_documents_the_version_option() -> None:
    """`morphz --version` exists (click.version_option on the root group) but docs/cli.md,
    which documents every command and option, never mentions it. Every option the CLI has
    should be in docs/cli.md."""
    assert run("--version").exit_code == 0
    assert "--version" in DOCS.read_text(encoding="utf-8")
