"""Review 12, docs truth: README.md, docs/ARCHITECTURE.md, docs/cli.md, docs/decisions.md's
twelfth-session entries, docs/benchmarks.md's twelfth run and the protocol text, against what
the code does after the session's changes. Each test failed on the code it was written against;
its docstring says what should happen. No network, real SQLite, no sleeping."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from morphz.interfaces.cli import main
from morphz.runtime.models.scripted import _fill

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _scripted_model_paragraph() -> str:
    doc = DOCS.read_text(encoding="utf-8")
    start = doc.index("**A scripted model**")
    return doc[start : doc.index("```", start)]


def test_cli_md_ref_placeholder_numbering_matches_the_scripted_model() -> None:
    """docs/cli.md ("A scripted model") says `{ref:N}` is replaced "by the N-th (negative from
    the end)" observation of the inbox. "The N-th" reads as counted from 1, so a user writes
    `{ref:1}` for the first observation; the code indexes from 0 (`refs[index]`): `{ref:1}` is
    the second, and with one observation in view it fails the activation as out of range.
    Expected: the two agree: either `{ref:1}` is the first observation, or cli.md says the
    count starts at 0 (`{ref:0}` is the first)."""
    encoding = (
        '(inbox\n (observation @e3 (kind user_message) "a")\n (observation @e5 (kind x) "b"))'
    )
    first_is_one = _fill("{ref:1}", encoding) == "@e3"
    paragraph = _scripted_model_paragraph()
    says_zero_based = "{ref:0}" in paragraph or re.search(r"from 0|zero-based|0-based", paragraph)
    assert _fill("{ref:0}", encoding) == "@e3"  # the code as it is: 0 is the first
    assert first_is_one or says_zero_based, (
        "cli.md calls {ref:N} 'the N-th' observation, but {ref:1} is the second one"
    )


@pytest.mark.usefixtures("env")
def test_an_out_of_range_ref_placeholder_fails_the_activation_as_the_script_ending_does(
    tmp_path: Path,
) -> None:
    """docs/cli.md ("A scripted model"): "The whole script is checked when it is read, before
    anything is written; running past its end fails the activation." A `{ref:N}` out of range
    cannot be checked when the script is read (it depends on the inbox), so it is a script
    error found mid-run, as running past the end is. Running past the end records the
    activation `failed` with a provider-bad-response reason; an out-of-range `{ref:N}` raises
    InputError inside the model, which the engine records as `interrupted` ("an unexpected
    error stopped the activation: InputError: ..."): the activation was not interrupted (no
    Ctrl-C, no cancel), and `context recover`'s wording for dead processes is reused for a bad
    script. Expected: the activation ends `failed`, its reason naming the placeholder (raise
    BadResponseError from the scripted model, as for the script's end), and exec exits 1
    printing the reason."""
    script = tmp_path / "steps.json"
    script.write_text(json.dumps([{"reply": "see {ref:7}"}]), encoding="utf-8")
    db = str(tmp_path / "s.db")
    result = run(
        "exec", "hello", "--model", f"scripted:{script}", "--workspace", "ws", "--db", db,
        "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 1
    events = json.loads(run("context", "events", "--db", db, "--format", "json").stdout)
    finished = [e["payload"] for e in events if e["kind"] == "activation_finished"]
    assert len(finished) == 1
    # actual: state 'interrupted', reason "an unexpected error stopped the activation: ..."
    assert finished[0]["state"] == "failed", finished[0]
    assert "{ref:7}" in finished[0]["reason"]
    assert "unexpected error" not in finished[0]["reason"]
