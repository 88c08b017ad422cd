"""Review 15c: the exec tool's supervisor seen end to end, through the real CLI
(``python -m morphz exec``/``chat`` with a scripted model, real processes, real signals).

Checked and found sound (no test here, since those pass): SIGINT to ``morphz exec`` and to
its whole process group (a terminal's Ctrl-C), SIGTERM, SIGHUP and SIGKILL while its command
runs a ``setsid`` background process and a long foreground sleep: both end; the activation is
recorded interrupted with the "may have happened" result; the process ends by the signal
(-2/-15/-1, i.e. 130/143/129 in a shell, as docs/cli.md says), "Aborted!" and no traceback;
``context audit`` is ok. SIGKILL to the supervisor alone: the foreground group is killed, the
setsid process runs on and the tool error says so (documented). The same three signals to a
``morphz chat`` fed by a pipe, and a real Ctrl-C (``\\x03``) typed at a pty: the turn is
recorded interrupted, the chat ends by the signal (documented: no second message is read), and
nothing the command started runs on (the code before this session, 35cef4b, left the setsid
process running). Commands that need a terminal behave exactly as at 35cef4b (the shell led a
session of its own then too, so it never had a controlling terminal): ``tty`` says "not a
tty", ``cat /dev/tty`` fails at once with ENXIO, ``less`` copies its file, ``top`` fails,
``python -c input()`` gets EOF, ``vim -c :wq`` works in ~2 s, bare ``vi`` hangs to the timeout
(same before), ``kill -TSTP $$`` does not stop the command. The command's environment is
byte-for-byte the one 35cef4b gave (LANG=C coerced LC_CTYPE included; the provider keys are
not there; morphz.toml has no key for exec's environment, which docs/cli.md does not promise).
Workspaces named with spaces, CJK and accents, ``cd`` into such folders and relative paths,
under LC_ALL=C too. The engine runs a reply's calls one after another (calls.py
``run_reply``), so two exec calls of one activation never overlap; three exec calls run at once
through ``asyncio.gather`` (concurrent activations of one engine) each get their own output,
exit status and timeout, with setsid background writers producing gigabytes after their shell
exits kept within the cap and ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import morphz
from stores import cli_env, user_config

MORPHZ = [sys.executable, "-m", "morphz"]
PACKAGE = Path(morphz.__file__).resolve().parent


def _tool_results(tmp_path: Path) -> list[str]:
    events = subprocess.run(
        [*MORPHZ, "context", "events", "--db", str(tmp_path / "morphz.db"), "--format", "json"],
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [e["text"] for e in json.loads(events.stdout) if e["kind"] == "tool_result"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX exec tool")
def test_exec_runs_a_command_when_morphz_is_imported_from_a_zip(tmp_path: Path) -> None:
    """Python imports a package from a zip file (a ``python -m zipapp`` bundle, a zip on
    PYTHONPATH, an egg), and the rest of morphz works so. But the exec tool now starts
    ``sys.executable -I -S <supervisor.__file__> COMMAND`` (shell.py ``_SUPERVISOR =
    Path(supervisor.__file__)`` and ``_start``): inside a zip that path is no file, Python says
    "can't find '__main__' module in '.../morphz.zip/morphz/runtime/tools/supervisor.py'", and
    every exec call fails with "the command's supervisor ended (return code 1) without saying
    how the command ended". At 35cef4b (asyncio's ``subprocess_shell``) the same run gave
    ``[exit code 0] hi``: a regression of this session.

    Expected: the command runs. Run the supervisor from its source rather than its path
    (``python -I -S -c SOURCE``, the source read once with ``importlib.resources`` or the
    module's loader ``get_source``), or copy it out to a private temporary file."""
    archive = tmp_path / "morphz.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in PACKAGE.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                bundle.write(path, Path("morphz") / path.relative_to(PACKAGE))
    (tmp_path / "home").mkdir()
    (tmp_path / "ws").mkdir()
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')  # the user's: not a project's
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]},
        {"reply": "done"},
    ]
    (tmp_path / "script.json").write_text(json.dumps(steps), encoding="utf-8")
    env = {**cli_env(tmp_path / "home"), "PYTHONPATH": str(archive)}
    args = ["exec", "say hi", "--model", f"scripted:{tmp_path / 'script.json'}"]
    args += ["--workspace", str(tmp_path / "ws"), "--db", str(tmp_path / "morphz.db")]
    run = subprocess.run(
        [*MORPHZ, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    results = _tool_results(tmp_path)
    assert len(results) == 1 and "[exit code 0]\nhi" in results[0], results
