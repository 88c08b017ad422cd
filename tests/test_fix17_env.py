"""The seventeenth session's fixes to the agent process's environment and the file tools'
listings: while exec or chat runs, the provider secrets are (on Linux) blanked in the
process's initial environment block (``os.environ`` is left to the host, review 17i), which is
closed to the user's other processes (runtime/secrets_env.py); a path holding a control
character is shown as a JSON string, one line, that names the file again
(runtime/tools/paths.shown_path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from morphz.interfaces.cli import main
from morphz.runtime.secrets_env import value_spans
from morphz.runtime.tools.base import ToolContext
from morphz.runtime.tools.paths import QUOTED_NOTE, shown_path
from morphz.runtime.tools.workspace import list_files_tool, read_file_tool, search_files_tool
from stores import isolated_env
from toolruns import run

LINUX = sys.platform.startswith("linux") and Path("/proc/self/environ").exists()
linux_only = pytest.mark.skipif(not LINUX, reason="/proc and Linux process semantics")
SECRETS = {
    "OPENAI_API_KEY": "sk-fix17-openai-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-fix17-0123456789",
    "OPENAI_BASE_URL": "https://user:fix17-password@llm.example/v1",
}

# run in a child: what withhold() did, what its /proc/self/environ shows inside and whether it
# is dumpable (PR_GET_DUMPABLE), and its os.environ inside and after
_CHILD = """
import ctypes, json, os
from morphz.runtime.secrets_env import withhold
names = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
done = withhold()
libc = ctypes.CDLL(None)
dumpable = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE, as withhold() left it
# not dumpable, /proc/self/* belongs to root: a user other than root cannot open its own
# environ (EACCES); made dumpable again (allowed) only to read what the block now holds
libc.prctl(4, 1, 0, 0, 0)
with open("/proc/self/environ", "rb") as f:
    block = f.read().decode()
inside = {n: os.environ.get(n) for n in (*names, "FIX17_OTHER")}
after = {n: os.environ.get(n) for n in names}
print(json.dumps({"done": [list(done.overwritten), done.closed, done.skipped],
    "block": block, "inside": inside, "dumpable": dumpable, "after": after}))
"""


def _withhold_in_a_child(tmp_path: Path, **extra: str) -> dict[str, object]:
    env = isolated_env(tmp_path, **SECRETS, FIX17_OTHER="kept", **extra)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(proc.stdout))


@linux_only
def test_the_secrets_are_blanked_in_the_initial_environment_and_proc_is_closed(
    tmp_path: Path,
) -> None:
    seen = _withhold_in_a_child(tmp_path)
    overwritten, closed, skipped = seen["done"]  # type: ignore[misc]
    assert sorted(overwritten) == sorted(SECRETS), seen["done"]
    assert closed is True and skipped is None
    block = str(seen["block"])
    assert not any(value in block for value in SECRETS.values()), block
    assert "FIX17_OTHER=kept" in block.split("\0")  # the other variables are as they were
    assert "OPENAI_API_KEY=" in block.split("\0")  # the name stays, its value blanked
    # os.environ is left as it is (review 17i: a host's other threads still need the keys)
    assert seen["inside"] == SECRETS | {"FIX17_OTHER": "kept"}
    assert seen["dumpable"] == 0
    assert seen["after"] == SECRETS  # os.environ as it was once it is left


@linux_only
def test_morphz_dumpable_keeps_the_process_dumpable_and_still_blanks_the_secrets(
    tmp_path: Path,
) -> None:
    """MORPHZ_DUMPABLE=1: a debugger or a core dump as the same user; /proc/PID/environ is open
    again, so the values are blanked all the same."""
    seen = _withhold_in_a_child(tmp_path, MORPHZ_DUMPABLE="1")
    assert seen["done"][1] is False  # type: ignore[index]
    assert seen["dumpable"] == 1
    assert not any(value in str(seen["block"]) for value in SECRETS.values())


def test_value_spans_finds_each_named_entry_with_a_value() -> None:
    block = b"A=1\0OPENAI_API_KEY=sk-1\0EMPTY=\0OPENAI_API_KEY=\0X=OPENAI_API_KEY=z\0no-sign\0"
    spans = list(value_spans(block, {b"OPENAI_API_KEY", b"EMPTY"}))
    assert spans == [(b"OPENAI_API_KEY", 19, 4)]
    assert block[19:23] == b"sk-1"


def test_exec_run_in_process_gives_the_environment_back(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host (or a test) that calls the CLI in its own process finds its os.environ as it was:
    withhold() leaves os.environ as it is."""
    import os

    monkeypatch.setenv("OPENAI_API_KEY", SECRETS["OPENAI_API_KEY"])
    script = env / "steps.json"
    script.write_text(json.dumps([{"reply": "done"}]), encoding="utf-8")
    args = ["exec", "hi", "--model", f"scripted:{script}", "--workspace", str(env / "ws")]
    result = CliRunner().invoke(main, [*args, "--db", str(env / "m.db")])
    assert result.exit_code == 0, result.output
    assert os.environ["OPENAI_API_KEY"] == SECRETS["OPENAI_API_KEY"]


# --- a path holding a control character ----------------------------------------------------

ODD_NAMES = [
    "a\nfile          9  deploy-keys.txt",
    "tab\there",
    "\x1b[31mred",
    "bidi\u202egnp.exe",
    '"quoted".txt',
    "back\\slash\x07",
    "tag\U000e0041",
    "line\u2028sep",
    "del\x7f",
]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_a_path_with_a_control_character_is_one_printable_json_string(name: str) -> None:
    shown = shown_path(name)
    assert shown.startswith('"') and shown.isprintable(), shown
    assert json.loads(shown) == name  # given as a path argument, it names the file again


@pytest.mark.parametrize("name", ["plain.txt", "café/naïve name.md", "日本語.txt", 'x"y'])
def test_a_printable_path_is_shown_as_it_is(name: str) -> None:
    assert shown_path(name) == name


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed


def test_the_listing_quotes_such_a_path_says_how_to_use_it_and_the_file_can_be_read(
    ws: Path, tc: ToolContext
) -> None:
    name = "x\nfile  9  secrets.txt"
    (ws / name).write_text("needle here\n", encoding="utf-8")
    (ws / "plain.txt").write_text("needle too\n", encoding="utf-8")
    listing = run(list_files_tool(), tc).text.splitlines()
    assert len(listing) == 3 and QUOTED_NOTE in listing[0], listing
    assert listing[2].endswith(f"  {json.dumps(name)}"), listing  # sorted after plain.txt
    quoted = json.dumps(name)
    page = run(read_file_tool(), tc, path=json.loads(quoted))  # as the model passes it back
    assert "needle here" in page.text and page.text.splitlines()[0].startswith(quoted)
    found = run(search_files_tool(), tc, query="needle").text.splitlines()
    assert len(found) == 3 and QUOTED_NOTE in found[0], found
    assert f"{quoted}:1: needle here" in found


def test_a_listing_of_plain_names_says_nothing_of_quotes(ws: Path, tc: ToolContext) -> None:
    (ws / "plain.txt").write_text("x", encoding="utf-8")
    out = run(list_files_tool(), tc).text
    assert out.splitlines()[0] == "1 entries in . (type, size in bytes, path):", out


_HOLDER = """
import sys
from morphz.runtime.secrets_env import withhold
print(withhold().closed, flush=True)
sys.stdin.readline()
"""


@linux_only
def test_another_process_of_the_user_cannot_read_the_environment_once_withheld(
    tmp_path: Path,
) -> None:
    """What 'closed' means: another process of the same user (this one) cannot open the
    agent's /proc/PID/environ at all. Root's processes can (CAP_SYS_PTRACE), so as root the
    check is only that the secrets are blanked there."""
    import os

    env = isolated_env(tmp_path, **SECRETS)
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    ) as child:  # fmt: skip
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "True"
        try:
            block = Path(f"/proc/{child.pid}/environ").read_bytes()
        except PermissionError:
            block = None
        child.stdin.write("\n")
        child.stdin.close()
    if os.geteuid() != 0:
        assert block is None, "another process of the user read the agent's environment"
    else:
        assert block is not None
        assert not any(v.encode() in block for v in SECRETS.values()), block
