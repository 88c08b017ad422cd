"""Review 17h: a new user's first hour, end to end, through the command line only, as README.md
and docs/cli.md tell it: a fresh home, no API key, no network, the scripted model and the
configuration files. These are the findings about the configuration (the profile, a project's
morphz.toml, the model spec) and about a profile too large for the budget; the review's
findings about output and chat are tested elsewhere. Each test failed against the code as
reviewed and states the behaviour expected of it. Real subprocesses (the CLI as a user runs it),
real stores, temporary folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stores import isolated_env, run_morphz, user_config


def _script(tmp_path: Path, steps: list[dict[str, Any]], name: str = "steps.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{path}"


# --- 1. --profile does not replace a configured profile that cannot be read ----------------------


def test_profile_option_replaces_a_configured_profile_that_is_missing(tmp_path: Path) -> None:
    """docs/cli.md: `--profile FILE` "replaces the configured one". But prepare() loads the
    settings first (interfaces/cli_agent.py:135), and load reads the configured profile
    (runtime/config.py:230, read_profile), so a `profile = "agent.md"` in
    ~/.morphz/morphz.toml whose file is missing (or over 1 MiB) fails every run, even one that
    gives its own `--profile`: "cannot read the profile ~/.morphz/agent.md" (or "give a
    shorter harness definition", for a file the option replaced). Read the configured profile
    only when no --profile is given."""
    user_config(tmp_path / "home", 'profile = "agent.md"\n')  # agent.md was never written
    (tmp_path / "mine.md").write_text("You are a careful release engineer.\n", encoding="utf-8")
    model = _script(tmp_path, [{"reply": "ready"}])
    proc = run_morphz(
        tmp_path,
        *("exec", "hi", "--model", model, "--db", str(tmp_path / "s.db")),
        *("--profile", "mine.md"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ready\n"


def test_a_configured_profile_that_cannot_be_read_names_the_file_that_sets_it(
    tmp_path: Path,
) -> None:
    """A repository's morphz.toml says `profile = "agent.md"` and agent.md is not in the clone
    (ignored by git, say). Every exec and chat fails with "cannot read the profile
    /path/agent.md: [Errno 2] ..." (runtime/config.py:329-330), which names neither the
    configuration file that asks for it nor what to do; and `--profile` cannot get past it (the
    test above). The refusal should name the morphz.toml that sets `profile`."""
    (tmp_path / "morphz.toml").write_text('profile = "agent.md"\n', encoding="utf-8")
    model = _script(tmp_path, [{"reply": "ready"}])
    proc = run_morphz(tmp_path, "exec", "hi", "--model", model, "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 1
    assert str(tmp_path / "morphz.toml") in proc.stderr, proc.stderr


# --- 2. a profile too large for the budget is blamed on the frames and the budget ---------------


def _large_profile(tmp_path: Path) -> Path:
    """A harness definition under the 1 MiB cap whose tokens alone pass the default critical
    level (about 150,000 estimated tokens of 116,000)."""
    path = tmp_path / "conventions.md"
    path.write_text("You are a careful agent. " * 24_000, encoding="utf-8")
    return path


def test_exec_failing_for_a_large_profile_says_the_profile_is_what_fills_the_request(
    tmp_path: Path,
) -> None:
    """A 600 KB profile is accepted (under the 1 MiB cap) and every activation then fails with
    "the protocol, the frames in view, the kernel and the tool schemas alone take about
    153443 ...: raise the budget" (runtime/batches.py:99-104; mind_share names the mind, nothing
    names the evaluation-profile region). There are no frames; the profile is what takes the
    room, and the one remedy the message leaves out is a shorter profile. It should name the
    profile (its tokens, and `--profile` / `profile =` to shorten)."""
    profile = _large_profile(tmp_path)
    model = _script(tmp_path, [{"reply": "ready"}])
    proc = run_morphz(
        tmp_path,
        *("exec", "hi", "--model", model, "--db", str(tmp_path / "s.db")),
        *("--profile", str(profile)),
    )
    assert proc.returncode == 1
    said = proc.stdout + proc.stderr
    assert "activation failed" in said
    assert "profile" in said, said


def test_context_tx_refused_for_a_large_profile_does_not_blame_frames(tmp_path: Path) -> None:
    """With `profile = "conventions.md"` in the project's morphz.toml (inside its folder:
    allowed), `morphz context tx` of one tiny frame on an empty context is refused with code
    budget: "this transaction would leave frames in view that make even the smallest
    maintenance request about 153380 tokens ... Make the frames smaller instead: derive a short
    summary and supersede ..." (committing.py:237-249). The context has no frames; the
    profile is the whole excess, and the refusal never says so."""
    _large_profile(tmp_path)
    (tmp_path / "morphz.toml").write_text('profile = "conventions.md"\n', encoding="utf-8")
    db = str(tmp_path / "s.db")
    assert run_morphz(tmp_path, "context", "create", "--db", db).returncode == 0
    proc = run_morphz(
        tmp_path,
        *("context", "tx", "--file", "-", "--db", db),
        stdin='(context-tx (base-version 0) (create note "short"))',
    )
    assert proc.returncode == 1
    assert "budget" in proc.stderr
    assert "profile" in proc.stderr, proc.stderr


# --- 3. README's `--model builtin` -------------------------------------------------------------


def test_model_builtin_on_exec_points_at_the_scripted_model(tmp_path: Path) -> None:
    """README.md: "`--model builtin` runs offline" (of the evaluation scripts). A user who tries
    it on `morphz exec` is told "e.g. openai:builtin" (runtime/config.py:385-388), which then
    asks for OPENAI_API_KEY: advice that cannot work. The refusal should say that builtin is the
    evaluation scripts' agent and that `scripted:PATH` runs exec offline."""
    proc = run_morphz(tmp_path, "exec", "hi", "--model", "builtin", "--db", "s.db")
    assert proc.returncode == 1
    assert "openai:builtin" not in proc.stderr, proc.stderr
    assert "scripted:" in proc.stderr


# --- 4. a project file restating a default --------------------------------------------------


def test_a_project_file_restating_the_default_read_policy_is_not_refused(tmp_path: Path) -> None:
    """docs/cli.md's configuration example lists the policies' defaults, `read_file = "allow"`
    among them. A repository's morphz.toml that restates it (or copies the example's
    [policies] table) is refused: "may not set what runs without asking"
    (runtime/config.py:141-143), though nothing runs without asking that did not before. The
    rule guards the user's own stricter choice; refuse "allow" only where it loosens what the
    user's file (or the default) gives. (tests/test_fix17cfg.py's case for read_file asserts
    the refusal with no user file: it would change with this.)"""
    model = _script(tmp_path, [{"reply": "ready"}])
    (tmp_path / "morphz.toml").write_text(
        f'model = "{model}"\n[policies]\nlist_files = "allow"\nread_file = "allow"\n'
        'exec = "deny"\n',
        encoding="utf-8",
    )
    proc = run_morphz(tmp_path, "exec", "hi", "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 0, proc.stderr


# --- 5. "or set OPENAI_BASE_URL": already set, still refused, saying so ---------------------


def test_a_project_base_url_refused_when_openai_base_url_is_set_says_so(tmp_path: Path) -> None:
    """A repository's morphz.toml with `[openai] base_url` (a local Ollama the author used) was
    refused with "put it in your own ~/.morphz/morphz.toml or set OPENAI_BASE_URL, or remove
    it", also for a user who has OPENAI_BASE_URL set already, which wins over every file
    (docs/cli.md "Precedence"): the advice was what they had done. The reviewer asked for no
    refusal then; the decision taken is to refuse still (the file tried to say where the
    user's keys go, and ignoring it in silence would hide a hostile file) but to say that
    OPENAI_BASE_URL is set, that the file's value would be ignored anyway, and to remove the
    setting from the file, with no advice to set the variable."""
    model = _script(tmp_path, [{"reply": "ready"}])
    config = tmp_path / "morphz.toml"
    config.write_text('[openai]\nbase_url = "http://localhost:11434/v1"\n', encoding="utf-8")
    env = isolated_env(tmp_path, OPENAI_BASE_URL="http://127.0.0.1:11434/v1")
    proc = run_morphz(
        tmp_path, "exec", "hi", "--model", model, "--db", str(tmp_path / "s.db"), env=env
    )
    assert proc.returncode == 1
    said = " ".join(proc.stderr.split())
    assert "OPENAI_BASE_URL is set" in said and "ignored" in said, said
    assert f"remove [openai] base_url from {config}" in said, said
    assert "or set OPENAI_BASE_URL" not in said, said
    config.unlink()  # once removed, the run goes on
    proc = run_morphz(
        tmp_path, "exec", "hi", "--model", model, "--db", str(tmp_path / "s.db"), env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ready\n"
