"""`morphz exec` and `morphz chat` with the scripted model (no key, no network)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces.cli import main
from stores import user_config

STEPS = [
    {
        "tool_calls": [
            {
                "name": "context_tx",
                "arguments": {
                    "tx": "(context-tx (base-version {version}) (derive deployment/target-v1 "
                    "(from {last_ref}) (fact (region cn-hangzhou))))"
                },
            }
        ]
    },
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "production.yaml"}}]},
    {
        "tool_calls": [
            {
                "name": "context_tx",
                "arguments": {
                    "tx": '(context-tx (base-version {version}) (reason "production says so") '
                    "(derive deployment/target-v2 (from {last_ref} deployment/target-v1) "
                    "(fact (region cn-shanghai))) "
                    "(relate deployment/target-v2 supersedes deployment/target-v1) "
                    "(retire deployment/target-v1) (retire {last_ref}))"
                },
            }
        ]
    },
    {"reply": "The deployment targets cn-shanghai."},
]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user configuration
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "production.yaml").write_text("region: cn-shanghai\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(STEPS))
    return tmp_path / "m.db", workspace, script


def test_exec_runs_one_activation_and_prints_the_reply(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    args = ["exec", "prepare the deployment", "--model", f"scripted:{script}"]
    result = CliRunner().invoke(main, [*args, "--workspace", str(workspace), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "The deployment targets cn-shanghai."
    with morphz.open(db) as opened:
        ctx = opened.context("context-default")
        target = ctx.mind().frame("deployment/target-v2")
        old = ctx.mind().frame("deployment/target-v1")
        assert target is not None and target.lifecycle == "active"
        assert old is not None and old.lifecycle == "retired"
        assert ctx.activations()[0].state == "delivered"
        assert ctx.audit().ok


def test_exec_json_lists_the_events_it_produced(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    args = ["exec", "ops", "prepare the deployment", "--model", f"scripted:{script}"]
    result = CliRunner().invoke(
        main, [*args, "--workspace", str(workspace), "--db", str(db), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["state"] == "delivered" and out["steps"] == 4
    kinds = [e["kind"] for e in out["event_records"]]
    assert kinds[0] == "user_message" and "tool_result" in kinds and "tx_receipt" in kinds


def test_exec_fails_visibly_when_the_script_runs_out(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    script.write_text(json.dumps(STEPS[:1]))
    args = ["exec", "prepare", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    result = CliRunner().invoke(main, [*args, "--db", str(db)])
    assert result.exit_code == 1
    assert "activation failed" in result.stdout and "script has only 1 step" in result.stdout


def test_chat_slash_commands_and_one_turn(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    lines = "/status\nprepare the deployment\n/mind\n/recall region\n/requests\n/quit\n"
    args = ["chat", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    result = CliRunner().invoke(main, [*args, "--db", str(db)], input=lines)
    assert result.exit_code == 0, result.output
    assert "agent> The deployment targets cn-shanghai." in result.stdout
    assert "deployment/target-v2" in result.stdout  # /mind
    assert "ranked by relevance" in result.stdout  # /recall
    # /requests: the turn's activation, its four requests (the first of the process unmeasured)
    assert "prefix reuse: bytes of each request that began the previous one" in result.stdout
    row = re.search(
        r"act-[a-z]{12}\s+default\s+delivered\s+(\d+)\s+([\d,]+)\s+([\d.]+)%", result.stdout
    )
    assert row is not None and row.group(1) == "4" and float(row.group(3)) > 50


def test_chat_encoding_shows_what_the_agent_would_see(setup: tuple[Path, Path, Path]) -> None:
    """/encoding compiles as the engine does: the chat's session, its model and budget, the
    tool schemas counted in the figure (not the context's default view)."""
    db, workspace, script = setup
    (Path.cwd() / "morphz.toml").write_text("[budget]\nlimit = 50000\n")
    args = ["chat", "--model", f"scripted:{script}", "--session", "ops", "--workspace"]
    lines = "/encoding\n/status\n/quit\n"
    result = CliRunner().invoke(main, [*args, str(workspace), "--db", str(db)], input=lines)
    assert result.exit_code == 0, result.output
    assert " (session ops)\n" in result.stdout
    assert f'(model "scripted:{script.name}")' in result.stdout
    assert "(hard 50000)" in result.stdout
    assert "(authority (context_tx allow) (edit_file ask) (exec ask)" in result.stdout
    with morphz.open(db) as opened:
        plain = opened.context("context-default").encode(session="ops")
    shown = int(result.stdout.split("(tokens ", 1)[1].split(")", 1)[0])
    assert shown > plain.tokens + 500  # the eight tool schemas are counted
    # /status states the same pressure: that of the request the agent would be sent
    assert f"{shown:,} tokens (estimated) of 50,000 hard" in result.stdout


def test_bad_model_spec_is_a_clear_error(setup: tuple[Path, Path, Path]) -> None:
    db, _, _ = setup
    result = CliRunner().invoke(main, ["exec", "hi", "--model", "gpt4", "--db", str(db)])
    assert result.exit_code == 1 and "names no provider" in result.stderr
    assert "openai:, anthropic:, scripted:" in result.stderr and "openai:gpt4" in result.stderr


def test_activity_lines_say_what_happened(setup: tuple[Path, Path, Path]) -> None:
    from morphz.interfaces.render import activity_line

    db, _, _ = setup
    with morphz.open(db) as opened:
        ctx = opened.context("context-default", create=True)
        refused = '{"ok": false, "error": {"code": "stale_version", "message": "base 3 < 5"}}'
        receipt = ctx.observe("tx_receipt", refused, meta={"tool": "context_tx"})
        failed = ctx.observe(
            "tool_result", "exit 2\nno such file", meta={"tool": "exec", "error": True}
        )
        line = activity_line(ctx.event(receipt.ref))
        assert line == f"{receipt.ref} context_tx refused (stale_version): base 3 < 5"
        assert (
            activity_line(ctx.event(failed.ref))
            == f"{failed.ref} exec (error): exit 2 no such file"
        )
        odd = ctx.observe("tx_receipt", "not json")
        assert activity_line(ctx.event(odd.ref)) == f"{odd.ref} context_tx not json"


def test_a_bound_profile_and_the_workspace_reach_the_encoding(
    setup: tuple[Path, Path, Path],
) -> None:
    """The configuration's profile (a file relative to morphz.toml) is the evaluation-profile
    region; --profile replaces it; the workspace is a binding of the evaluation environment."""
    db, workspace, script = setup
    (Path.cwd() / "agent.md").write_text("You are the deployment agent of team blue.\n")
    (Path.cwd() / "morphz.toml").write_text('profile = "agent.md"\n')
    args = ["chat", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    result = CliRunner().invoke(main, [*args, "--db", str(db)], input="/encoding\n/quit\n")
    assert result.exit_code == 0, result.output
    assert '(evaluation-profile "You are the deployment agent of team blue.\n")' in result.stdout
    assert f'(bindings (workspace "{workspace.resolve()}"))' in result.stdout
    other = Path.cwd() / "other.md"
    other.write_text("You review changes.")
    again = [*args, "--profile", str(other), "--db", str(db)]
    result = CliRunner().invoke(main, again, input="/encoding\n/quit\n")
    assert '(evaluation-profile "You review changes.")' in result.stdout
    assert "team blue" not in result.stdout


def test_a_profile_that_cannot_be_read_is_a_clear_error(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    args = ["exec", "hi", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    missing = CliRunner().invoke(main, [*args, "--profile", "nope.md", "--db", str(db)])
    assert missing.exit_code == 1 and "cannot read the profile nope.md" in missing.stderr
    (Path.cwd() / "empty.md").write_text("  \n")
    empty = CliRunner().invoke(main, [*args, "--profile", "empty.md", "--db", str(db)])
    assert empty.exit_code == 1 and "the profile empty.md is empty" in empty.stderr
    (Path.cwd() / "morphz.toml").write_text('profile = "gone.md"\n')
    configured = CliRunner().invoke(main, [*args, "--db", str(db)])
    assert configured.exit_code == 1 and "gone.md" in configured.stderr


def test_a_profile_path_is_relative_to_the_file_that_names_it(tmp_path: Path) -> None:
    from morphz.runtime.config import load

    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".morphz").mkdir(parents=True)
    project.mkdir()
    (home / ".morphz" / "agent.md").write_text("home harness")
    (home / ".morphz" / "morphz.toml").write_text('profile = "agent.md"\n')
    assert load(home, project, {}).profile_text() == "home harness"
    (project / "team.md").write_text("project harness")
    (project / "morphz.toml").write_text('profile = "team.md"\n')  # the later file wins
    assert load(home, project, {}).profile_text() == "project harness"
    (project / "morphz.toml").write_text("profile = 5\n")
    with pytest.raises(morphz.InputError, match="profile must be a file path"):
        load(home, project, {})


def test_the_agent_cannot_rewrite_its_own_profile(setup: tuple[Path, Path, Path]) -> None:
    db, workspace, script = setup
    profile = workspace / "agent.md"
    profile.write_text("You deploy to cn-shanghai only.")
    (Path.cwd() / "morphz.toml").write_text('profile = "ws/agent.md"\n')
    user_config(Path.home(), '[policies]\nwrite_file = "allow"\n')  # a project's may not allow
    steps = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "agent.md", "content": "x"}}]},
        {"reply": "tried"},
    ]
    script.write_text(json.dumps(steps))
    args = ["exec", "go", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    result = CliRunner().invoke(main, [*args, "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert profile.read_text() == "You deploy to cn-shanghai only."
    assert "is protected" in result.stdout
