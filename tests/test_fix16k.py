"""Fixes of review 16k beyond the reviewer's tests: the smaller findings (an empty script, the
audit's counts, the configuration file a bad key is in, arguments not in UTF-8, an event's full
identity in `recall frame`, `"kind": null` imported, /mind all in chat)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces import render
from morphz.interfaces.cli import main
from morphz.results import AuditReport
from morphz.runtime.config import load
from morphz.runtime.models.scripted import ScriptedModel


def _run(tmp_path: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "m.db")], input=stdin)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_an_empty_script_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(morphz.InputError, match="has no steps"):
        ScriptedModel.from_file(path)


def test_the_audit_counts_in_the_singular_for_one() -> None:
    report = AuditReport("c", events=1, commits=1, differences=["one"])
    text = render.audit(report)
    assert "FAILED (1 difference)" in text and "1 event replayed, 1 commit" in text


def test_an_unknown_configuration_key_names_its_file(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".morphz").mkdir(parents=True)
    project.mkdir()
    (home / ".morphz" / "morphz.toml").write_text('model = "scripted:x"\n')
    (project / "morphz.toml").write_text("surprise = 1\n")
    with pytest.raises(morphz.InputError) as caught:
        load(home, project, {})
    assert f"unknown configuration keys ['surprise'] in {project / 'morphz.toml'}" in str(
        caught.value
    )


def test_a_text_argument_not_in_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path, "context", "create", "caf\udce9")
    assert code == 1
    assert "error (input): '[CTX]' is not valid UTF-8 (caf\\xe9)" in err
    assert not (tmp_path / "m.db").exists()
    assert _run(tmp_path, "context", "create")[0] == 0
    code, _, err = _run(
        tmp_path, "context", "observe", "--kind", "user_message", "--text", "\udce9"
    )
    assert code == 1 and "'--text' is not valid UTF-8 (\\xe9)" in err


def test_recall_frame_takes_an_events_full_identity(tmp_path: Path) -> None:
    assert _run(tmp_path, "context", "create")[0] == 0
    assert _run(tmp_path, "context", "observe", "--kind", "user_message", "--text", "hi")[0] == 0
    code, out, _ = _run(
        tmp_path, "context", "recall", "frame", "context-default:@e1", "--format", "json"
    )
    assert code == 0 and json.loads(out)["root"] == "@e1"
    code, _, err = _run(tmp_path, "context", "recall", "frame", "other:@e1")
    assert code == 1 and "belongs to context 'other'" in err


def test_a_null_kind_imports_as_a_user_message(tmp_path: Path) -> None:
    with morphz.open(tmp_path / "m.db", create=True) as db:
        ctx = db.context(create=True)
        ctx.import_history(['{"text": "hi", "kind": null}'])
        assert [e.kind for e in ctx.events()] == ["user_message"]


def test_chat_mind_all_lists_the_retired_observations_too(tmp_path: Path) -> None:
    script = tmp_path / "steps.json"
    script.write_text(json.dumps([{"reply": "ok"}]), encoding="utf-8")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    code, out, _ = _run(
        tmp_path,
        "chat",
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(workspace),
        stdin="/mind all\n/mind\n/quit\n",
    )
    assert code == 0
    assert "Observations (all)" in out and "/mind all for all" in out
