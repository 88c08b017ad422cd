"""Review 12, usability: a demanding new user's first hour with the README, docs/cli.md, the
`morphz` command line and the Python API. Each test failed on the code it was written against;
its docstring says what should happen. No network, real SQLite, no sleeping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


# no MORPHZ_DB, no real home directory, no morphz.toml of the caller; the cwd is tmp_path
pytestmark = pytest.mark.usefixtures("env")


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def _section(heading: str) -> str:
    """The text of the docs/cli.md section whose heading is exactly ``## heading``."""
    doc = DOCS.read_text(encoding="utf-8")
    start = doc.index(f"\n## {heading}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else len(doc)]


# ------------------------------------------------------------------ scripted models


@pytest.mark.parametrize("call", [5, ["name"], "context_tx", None], ids=repr)
def test_exec_refuses_a_script_whose_tool_call_is_not_an_object(
    tmp_path: Path, call: object
) -> None:
    """docs/cli.md ("Running an agent"): a scripted model is "a JSON list of steps, each
    {"reply": ...} or {"tool_calls": [...]}", and "Everything is checked before the store is
    opened: a refused command (exit 1) creates no store and no context". ScriptedModel checks a
    step's reply and that tool_calls is a list when it loads the file, but not the calls in it:
    a call that is not an object (a number, a list, a bare tool name) reaches _call at request
    time, where `"name" not in raw` raises TypeError (or raw.get AttributeError), and
    `morphz exec` ends in a Python traceback after writing a store, a user message and an
    interrupted activation. Expected: the script is refused when it is read, an InputError
    naming the step ("script step 0: a tool call is an object {"name": ..., "arguments": ...}"),
    exit 1 with `error (input): ...`, no traceback and no store."""
    script = tmp_path / "steps.json"
    script.write_text(json.dumps([{"tool_calls": [call]}, {"reply": "done"}]), encoding="utf-8")
    db = tmp_path / "s.db"
    result = run(
        "exec", "hello", "--model", f"scripted:{script}", "--workspace", "ws", "--db", str(db)
    )  # fmt: skip
    assert not isinstance(result.exception, (TypeError, AttributeError)), (
        f"untyped {result.exception!r} escaped (a traceback for the user)"
    )
    assert result.exit_code == 1
    assert "error (input)" in result.stderr and "step 0" in result.stderr, result.stderr
    assert not db.exists(), "a refused script must create no store"


def test_cli_md_says_how_a_scripted_tool_call_is_written(tmp_path: Path) -> None:
    """README and docs/cli.md offer `morphz exec "..." --model scripted:steps.json` as the way
    to run an agent with no key and no network, and cli.md ran
    `--model scripted:demo-script.json` (a file the project does not ship). But all they said of
    the format was "each {"reply": ...} or {"tool_calls": [...]}": a user could not learn that a
    call is {"name": "context_tx", "arguments": {"tx": "..."}} nor that `{version}`,
    `{last_ref}` and `{ref:N}` fill in the live base version and refs (scripted.py's
    docstring), without which no scripted context_tx can name the right base-version.
    Expected: "Running an agent" shows a call's keys and the placeholders, and its example
    script runs as shown (under `morphz exec`)."""
    section = _section("Running an agent") + _section("morphz exec")
    assert '"name"' in section and '"arguments"' in section, "a tool call's keys are not given"
    assert "{version}" in section, "the base-version placeholder is not documented"
    script = section.split("This `steps.json`", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    (tmp_path / "steps.json").write_text(script, encoding="utf-8")
    db = str(tmp_path / "m.db")
    args = ["exec", "Please prepare the deployment", "--model", f"scripted:{tmp_path}/steps.json"]
    done = run(*args, "--workspace", str(tmp_path), "--db", db)
    assert done.exit_code == 0, done.output
    assert "Noted the request as task/request." in done.stdout
    shown = run("context", "show", "--db", db, "--format", "json")
    assert "task/request" in shown.stdout, shown.stdout


# ------------------------------------------------------------------ the Python API


def test_finish_activation_given_begin_activations_result_is_an_input_error(
    ctx: morphz.Context,
) -> None:
    """README: `ctx.begin_activation(session, prompt, objective)` starts an activation and
    `ctx.finish_activation(id)` ends one. begin_activation returns (event, activation id);
    passing that result (or the event) to finish_activation is the natural slip, and it is
    refused as a StoreError, code `store`, "read from ...db failed: Error binding parameter 2:
    type 'tuple' is not supported" — telling the user their database failed. Every other
    call of the API refuses a wrong-typed argument as an InputError naming it
    (finish_activation(5) says "activation 5 is not running"). Expected: InputError (code
    `input`), saying an activation id is text such as act-..., and the activation still
    running."""
    started = ctx.begin_activation("default", "prepare the deployment", "deploy")
    with pytest.raises(morphz.MorphzError) as caught:
        ctx.finish_activation(started)  # type: ignore[arg-type]
    assert isinstance(caught.value, morphz.InputError), (
        f"{type(caught.value).__name__} ({caught.value.code}): {caught.value}"
    )
    assert ctx.status().running_activations == 1


# ------------------------------------------------------------------ recall read of a commit


def test_recall_read_marks_every_line_of_a_multi_line_replaced_body_as_a_comment(
    ctx: morphz.Context,
) -> None:
    """decisions.md (review 12): `recall read` of a commit that replaced bodies "shows them
    after its text, one comment line each (`; replaced plan/route: BODY`)". A body may hold a
    string with a line break (the language allows one inside quotes), and then only its first
    line starts with `;`: the rest reads as transaction text (here `second (revise x) line`,
    an operation), so the page is no longer the commit's text plus comments, and an agent that
    re-reads it cannot tell where the commit ends. Expected: every line after the commit's
    text is a comment line (the body's line breaks written as `\\n`, or each continuation line
    prefixed with `;`)."""
    ctx.commit('(context-tx (base-version 0) (create note "first line\nsecond (revise x) line"))')
    receipt = ctx.commit('(context-tx (base-version 1) (revise note "new"))')
    page = ctx.recall.read(receipt.event)
    tx_text, *rest = page.text.split("\n")
    assert tx_text.startswith("(context-tx (base-version 1)")
    assert rest and all(line.startswith(";") for line in rest), page.text


# ------------------------------------------------------------------ pressure figures


def test_status_and_encoding_state_the_same_pressure_with_a_configured_profile(
    tmp_path: Path,
) -> None:
    """docs/cli.md (context budget) said status, budget and encoding "state the same figure
    (unless the configuration has a [budget] table ...)". Since review 12, `context encoding`
    also binds the configured `profile` (the evaluation-profile region, as every request of
    exec and chat does), while `context status` and `context budget` show the context's own
    state: with a morphz.toml holding only `profile = "agent.md"` their token figures differ by
    the profile's size and no [budget] table explained it. Decided: status and budget stay the
    context's own; the docs name the profile beside [budget]. Expected: status and budget agree,
    encoding counts the profile on top, and cli.md says so."""
    (tmp_path / "agent.md").write_text("You are the deployment agent. " * 40, encoding="utf-8")
    (tmp_path / "morphz.toml").write_text('profile = "agent.md"\n', encoding="utf-8")
    db = str(tmp_path / "m.db")
    assert run("context", "create", "--db", db).exit_code == 0
    status = json.loads(run("context", "status", "--db", db, "--format", "json").stdout)
    budget = json.loads(run("context", "budget", "--db", db, "--format", "json").stdout)
    encoding = json.loads(run("context", "encoding", "--db", db, "--format", "json").stdout)
    assert "You are the deployment agent." in encoding["text"]  # the profile is bound
    assert status["pressure"]["tokens"] == budget["pressure"]["tokens"]
    assert encoding["pressure"]["tokens"] > status["pressure"]["tokens"]
    said = " ".join(_section("morphz context budget").split())
    assert "a `[budget]` table, a `profile` or a `model`, which `context encoding` applies" in said
