"""Review 16l: the session's last changes (review 16k's fixes) with fresh eyes, run as a user
runs them (real subprocesses, a scratch HOME and store, the scripted model). Each test fails on
the defect it names and passes once it is fixed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from stores import isolated_env, run_morphz

NOT_UTF8 = b"\xe9"  # Latin-1 "é": a name made in a Latin-1 locale


_env = isolated_env
morphz = run_morphz


def _script(tmp_path: Path, name: bytes = b"script.json") -> bytes:
    path = os.fsencode(tmp_path) + b"/" + name
    with open(path, "w", encoding="utf-8") as f:
        f.write('[{"reply": "done"}]')
    return path


# ------------------------------------------------------------------ paths that are any bytes


@pytest.mark.parametrize("which", ["workspace", "scripted-path"])
def test_exec_with_a_path_that_is_not_utf8_as_documented(tmp_path: Path, which: str) -> None:
    """docs/cli.md (review 16k): "file paths (`--db`, an import's FILE, `--workspace`, a
    `scripted:` spec) may be any bytes". They are not: `exec --workspace DIR` whose name is not
    UTF-8 (or `--model scripted:PATH` with such a file name) is refused with "the encoding
    options (in the evaluation-environment region): a lone surrogate U+DCE9 ..." (the folder and
    the script's name are shown to the model in that region), which names neither option — and
    only after the store and its context were created, so exit status 1 ("refused, the store is
    unchanged") leaves a new store behind. It should run (the path shown escaped), or at least
    be refused naming the option before anything is created."""
    store = tmp_path / "new.db"
    if which == "workspace":
        folder = os.fsencode(tmp_path) + b"/w" + NOT_UTF8
        os.mkdir(folder)
        extra: list[str | bytes] = ["--model", b"scripted:" + _script(tmp_path)]
        extra += ["--workspace", folder]
        option = "--workspace"
    else:
        extra = ["--model", b"scripted:" + _script(tmp_path, b"s" + NOT_UTF8 + b".json")]
        option = "--model"
    proc = morphz(tmp_path, "exec", "--db", str(store), *extra, "hi")
    if proc.returncode == 0:
        assert "done" in proc.stdout
        return
    assert option in proc.stderr, proc.stderr
    assert not store.exists(), "a refused exec left a new store behind"


def test_exec_model_name_not_utf8_is_refused_by_name_before_the_store(tmp_path: Path) -> None:
    """interfaces/arguments.py exempts every --model value as a path (PATHS holds "model_spec"
    and "model"), but only `scripted:PATH` holds one: `--model openai:NAME` with a name that is
    not UTF-8 passes the check, a new store and context are created, and only then is the name
    refused as "the encoding options (in the evaluation-environment region) ...". It should be
    refused as the other text arguments are: naming --model, before anything is created."""
    store = tmp_path / "new.db"
    env = _env(tmp_path, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    proc = morphz(
        tmp_path, "exec", "--db", str(store), "--model", b"openai:gpt" + NOT_UTF8, "hi", env=env
    )
    assert proc.returncode == 1, proc.stderr
    assert "--model" in proc.stderr, proc.stderr
    assert not store.exists(), "a refused exec left a new store behind"


# ------------------------------------------------------------------ chat's /recall


def _chat_store(tmp_path: Path, text: str, count: int) -> tuple[Path, dict[str, str]]:
    """A store away from the default (given by --db, MORPHZ_DB unset, as a user runs it) whose
    context ops holds ``count`` observations of ``text``."""
    store = tmp_path / "project.db"
    env = _env(tmp_path)
    assert morphz(tmp_path, "context", "create", "ops", "--db", str(store), env=env).returncode == 0
    lines = "".join(f'{{"text": "{text} {i}"}}\n' for i in range(count))
    (tmp_path / "h.jsonl").write_text(lines, encoding="utf-8")
    imported = morphz(tmp_path, "context", "import", "ops", "h.jsonl", "--db", str(store), env=env)
    assert imported.returncode == 0, imported.stderr
    return store, env


def _chat(tmp_path: Path, store: Path, env: dict[str, str], *lines: str) -> str:
    script = _script(tmp_path).decode()
    proc = morphz(
        tmp_path,
        "chat",
        "ops",
        "--db",
        str(store),
        "--model",
        f"scripted:{script}",
        stdin="".join(f"{line}\n" for line in (*lines, "/quit")),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def _run_said(tmp_path: Path, said: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(said)
    assert argv[0] == "morphz", said
    return subprocess.run(
        [sys.executable, "-m", "morphz", *argv[1:]],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def _more(output: str) -> str:
    more = [line for line in output.splitlines() if "more: " in line]
    assert more, output
    return more[0].split("more: ", 1)[1]


def test_chat_recall_next_page_command_searches_the_chats_store(tmp_path: Path) -> None:
    """docs/cli.md: when /recall has more hits, chat "prints the command that shows the next
    page". The command it prints (cli_agent.py _recall) leaves out --db: a chat started with
    `--db project.db` prints `morphz context recall search ops deploy --cursor C`, which
    searches the default store (~/.morphz/morphz.db) instead: "no store at ...", or, where
    that store has a context of the same name, another history's hits. It should name the
    chat's store (--db PATH) so the printed command shows the next page of this search."""
    store, env = _chat_store(tmp_path, "deploy note", 15)
    said = _more(_chat(tmp_path, store, env, "/recall deploy"))
    proc = _run_said(tmp_path, said, env)
    assert proc.returncode == 0, f"{said}\n{proc.stderr}"
    assert "deploy note" in proc.stdout


def test_chat_recall_time_range_hint_names_the_chats_store(tmp_path: Path) -> None:
    """The same for the refusal of a /recall with nothing searchable: it says "`morphz context
    recall search ops --since T --until T` searches a time range", without the chat's --db, so
    the command it suggests looks in another store."""
    store, env = _chat_store(tmp_path, "deploy note", 2)
    output = _chat(tmp_path, store, env, "/recall the")
    hint = [line for line in output.splitlines() if "--since T --until T" in line]
    assert hint, output
    assert str(store) in hint[0], hint[0]


def test_chat_recall_next_page_command_for_a_query_beginning_with_a_dash(tmp_path: Path) -> None:
    """A search for an option written in the history (`/recall --force`) has hits, and the
    next-page command chat prints is `morphz context recall search ops --force --cursor C`:
    click reads the query as an option ("No such option '--force'", exit status 2). The
    printed command should keep the query a positional argument (options first, then `--`)."""
    store, env = _chat_store(tmp_path, "pushed with --force", 15)
    said = _more(_chat(tmp_path, store, env, "/recall --force"))
    proc = _run_said(tmp_path, said + f" --db {shlex.quote(str(store))}", env)
    if proc.returncode == 0:
        assert "pushed with --force" in proc.stdout
    else:
        # the printed command itself is the defect (any --db placed by the fix is taken too)
        proc = _run_said(tmp_path, said, env)
        assert proc.returncode == 0, f"{said}\n{proc.stderr}"


# ------------------------------------------------------------------ output that cannot be written


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [("--version",), ("context", "observe", "--help")])
def test_help_and_version_on_a_full_disk_are_reported_without_a_traceback(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """docs/decisions.md (review 16k): output that cannot be written is reported on stderr
    without a traceback. `morphz --version > log` or `morphz context observe --help > log` on a
    full disk still prints a Python traceback (OSError: [Errno 28] No space left on device from
    click's own echo, which bypasses cli.out()). It should be the same one-line error (these
    change nothing, so exit status 3 with "run it again", or click's usage status)."""
    with open("/dev/full", "w") as full:
        proc = morphz(tmp_path, *args, stdout=full)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "No space left on device" in proc.stderr, proc.stderr
