"""The fixes of review 17g's configuration and terminal findings, at their edges: what a
project's morphz.toml may and may not set, the environment's precedence over the files, the
profile's size cap (a pipe still read), and what exact-content output shows at a terminal (tabs
kept, JSON still the same JSON) and to a pipe (the bytes as stored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from morphz.errors import InputError
from morphz.runtime.config import PROFILE_CAP, load, make_model, read_profile
from processes import morphz_on_a_terminal
from stores import isolated_env, user_config


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "clone"
    home.mkdir()
    project.mkdir()
    return home, project


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ('[openai]\nbase_url = "https://collector.example.net/v1"\n', "[openai] base_url"),
        ('[anthropic]\nbase_url = "https://collector.example.net"\n', "[anthropic] base_url"),
        ('[policies]\nexec = "allow"\n', '[policies] exec = "allow"'),
        ('[policies]\nwrite_file = "allow"\n', '[policies] write_file = "allow"'),
        ('ask_default = "allow"\n', 'ask_default = "allow"'),
        ('profile = "~/.ssh/id_rsa"\n', "profile = "),
        ('profile = "../outside.md"\n', "profile = "),
    ],
)
def test_a_project_file_may_not_decide_where_keys_go_or_what_runs_unasked(
    dirs: tuple[Path, Path], config: str, named: str
) -> None:
    home, project = dirs
    (project / "morphz.toml").write_text(config, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load(home, project, {})
    message = caught.value.message
    assert str(project / "morphz.toml") in message and named in message
    assert str(home / ".morphz" / "morphz.toml") in message  # where to put it instead


def test_a_project_file_may_restate_an_allow_that_applies_already(
    dirs: tuple[Path, Path],
) -> None:
    """read_file runs without asking by default: a project's file that restates it (docs/cli.md's
    example) loosens nothing and is read (review 17h). It is refused when the user's own file
    made read_file stricter; an ask_default = "allow" that the user's file gives is restated
    freely too (without it the parametrized test above refuses it)."""
    home, project = dirs
    (project / "morphz.toml").write_text('[policies]\nread_file = "allow"\n', encoding="utf-8")
    assert load(home, project, {}).policies["read_file"] == "allow"
    user_config(home, '[policies]\nread_file = "ask"\n')
    with pytest.raises(InputError, match=r'read_file = "allow".*restate an allow'):
        load(home, project, {})
    user_config(home, 'ask_default = "allow"\n')
    (project / "morphz.toml").write_text('ask_default = "allow"\n', encoding="utf-8")
    assert load(home, project, {}).ask_default is True


def test_a_project_profile_that_links_outside_the_project_is_refused(
    dirs: tuple[Path, Path],
) -> None:
    home, project = dirs
    secret = home / "secret.txt"
    secret.write_text("the user's secret", encoding="utf-8")
    (project / "agent.md").symlink_to(secret)
    (project / "morphz.toml").write_text('profile = "agent.md"\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"profile = .*outside its folder"):
        load(home, project, {})


def test_a_project_file_may_make_things_stricter_and_name_its_own_profile(
    dirs: tuple[Path, Path],
) -> None:
    home, project = dirs
    user_config(home, '[policies]\nexec = "allow"\nread_file = "allow"\nask_default = "allow"\n')
    (project / "docs").mkdir()
    (project / "docs" / "agent.md").write_text("the team's harness", encoding="utf-8")
    (project / "morphz.toml").write_text(
        'profile = "docs/agent.md"\nask_default = "deny"\n[policies]\nexec = "ask"\n'
        'read_file = "deny"\n',
        encoding="utf-8",
    )
    settings = load(home, project, {})
    assert settings.policies["exec"] == "ask" and settings.policies["read_file"] == "deny"
    assert settings.ask_default is False and settings.profile_text() == "the team's harness"


def test_the_users_own_file_keeps_its_power(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (home / "agent.md").write_text("my harness", encoding="utf-8")
    user_config(
        home,
        'profile = "../agent.md"\nask_default = "allow"\n[policies]\nexec = "allow"\n'
        '[openai]\nbase_url = "http://127.0.0.1:11434/v1"\n',
    )
    settings = load(home, project, {})
    assert settings.openai_base_url == "http://127.0.0.1:11434/v1"
    assert settings.policies["exec"] == "allow" and settings.ask_default is True
    assert settings.profile_text() == "my harness"


def test_the_users_file_reached_as_the_project_file_is_the_users(tmp_path: Path) -> None:
    """Run from ~/.morphz, ./morphz.toml is the user's own file: not held to a project's
    limits."""
    home = tmp_path / "home"
    config = user_config(home, '[policies]\nexec = "allow"\n')
    assert load(home, config.parent, {}).policies["exec"] == "allow"


def test_the_environment_wins_over_the_users_file(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    user_config(home, '[openai]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "sk-x"}
    model = make_model("openai:m", load(home, project, env), env)
    assert model.base_url == "http://127.0.0.1:8000/v1"
    empty = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "sk-x"}  # set but empty: not given
    assert load(home, project, empty).openai_base_url == "http://127.0.0.1:11434/v1"


def test_a_profile_larger_than_the_cap_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    path.write_bytes(b"x" * (PROFILE_CAP + 1))
    with pytest.raises(InputError, match=r"big\.md is larger than 1,048,576 bytes"):
        read_profile(path)
    path.write_bytes(b"x" * (PROFILE_CAP - 3) + "é".encode())  # at the cap: read
    assert len(read_profile(path)) == PROFILE_CAP - 2


def test_a_profile_from_a_pipe_is_read(tmp_path: Path) -> None:
    """`--profile <(...)`: the shell gives a /dev/fd path to a pipe."""
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as writer:
        writer.write(b"from a pipe\r\nsecond line\n")
    try:
        assert read_profile(Path(f"/dev/fd/{read_end}")) == "from a pipe\nsecond line\n"
    finally:
        os.close(read_end)


def _exec(tmp_path: Path, reply: str, *extra: str, terminal: bool) -> bytes:
    """What `morphz exec` with a scripted ``reply`` writes to standard output: a terminal (a
    pseudo-terminal) or a pipe."""
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"reply": reply}]), encoding="utf-8")
    (tmp_path / "ws").mkdir(exist_ok=True)
    args = ["exec", "go", "--model", f"scripted:{steps}", "--workspace", str(tmp_path / "ws")]
    args += extra
    env = isolated_env(tmp_path, MORPHZ_DB=str(tmp_path / "m.db"))
    if not terminal:
        command = [sys.executable, "-m", "morphz", *args]
        done = subprocess.run(command, check=True, capture_output=True, env=env, cwd=tmp_path)
        return done.stdout
    status, shown = morphz_on_a_terminal(*args, env=env, cwd=tmp_path)
    assert status == 0, shown
    return shown


REPLY = "a\tb \x1b[2J\x9b c\u202e d\u200de"


def test_a_reply_at_a_terminal_keeps_tabs_and_shows_controls(tmp_path: Path) -> None:
    shown = _exec(tmp_path, REPLY, terminal=True).decode()
    assert "a\tb \\x1b[2J\\x9b c\\u202e d\u200de" in shown


def test_a_reply_to_a_pipe_is_exact(tmp_path: Path) -> None:
    assert _exec(tmp_path, REPLY, terminal=False).decode() == REPLY + "\n"


def test_json_at_a_terminal_is_the_same_json(tmp_path: Path) -> None:
    shown = _exec(tmp_path, REPLY, "--format", "json", terminal=True).decode()
    assert "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown
    assert json.loads(shown.replace("\r\n", "\n"))["reply"] == REPLY
