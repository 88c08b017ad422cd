"""Review 17i: the agent runtime under process-level trouble, after the seventeenth session made
``exec`` and ``chat`` take the provider secrets out of ``os.environ`` and make the process not
dumpable while they run (runtime/secrets_env.py). Each test fails against the code as reviewed
and states the behaviour expected of it. Real subprocesses (the CLI as a user runs it), real
SQLite, temporary folders; the waits are safety nets, not timings; no network."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from loopback import Server, openai_completion
from morphz import owners
from morphz.interfaces.cli import main
from processes import MARK
from stores import isolated_env

LINUX = sys.platform.startswith("linux") and Path("/proc/self/stat").exists()
linux_only = pytest.mark.skipif(not LINUX, reason="/proc and Linux process semantics")


def _wait_for(path: Path, proc: subprocess.Popen[str] | None = None) -> None:
    """Return once ``path`` exists (a safety net of 120 s, not a timing)."""
    for _ in range(2400):
        if path.exists():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the agent ended before its command started: {proc.stderr}")
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _blocking_script(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A scripted model whose one exec call says it started, then waits for a ``go`` file; the
    script, the started file and the go file."""
    started, go = tmp_path / f"{name}.started", tmp_path / f"{name}.go"
    command = f"echo up > '{started}'; while [ ! -e '{go}' ]; do sleep 0.05; done; echo done"
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": command}}]},
        {"reply": f"{name} finished"},
    ]
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    return script, started, go


def _allow_exec(home: Path) -> None:
    (home / ".morphz").mkdir(parents=True, exist_ok=True)
    (home / ".morphz" / "morphz.toml").write_text('[policies]\nexec = "allow"\n', encoding="utf-8")


# --- 1. a live agent that /proc hides is marked interrupted by hand while it runs ---------------


@linux_only
def test_recover_by_hand_refuses_a_live_agent_of_this_host_whose_proc_entry_is_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mark: str
) -> None:
    """exec and chat now make themselves not dumpable (secrets_env.py:_not_dumpable). On a
    system whose /proc is mounted with hidepid=2 (hardened and shared hosts), a process that is
    not dumpable is invisible to the user's other processes: /proc/PID does not exist for them,
    although ``kill(pid, 0)`` finds the pid. owners.owner_alive (owners.py:99-101) then answers
    None ("cannot tell") for the user's own running agent, and `context recover --activation ID`
    marks it interrupted by hand: cli.py:_check_named (``if owner is not None and
    still_runs(...)``) treats None as "not alive", although the help promises "unless its
    process is alive on this host" and the pid exists on this host. The live agent then fails
    at its next write ("error (input): activation ... has ended (interrupted)"), its command's
    result lost. Reproduced for real (root: ``unshare -m``, ``mount -t proc -o hidepid=2``,
    both processes as one unprivileged user); here /proc's hiding is stood in for by pointing
    owners.PROC at a folder with the boot id and no entry for the agent's pid, which is what
    hidepid shows. Expected: a same-host owner whose pid exists and cannot be told apart is not
    marked by hand (refused as alive, or as "cannot tell: stop it first"), and the agent runs
    to its reply."""
    home = tmp_path / "home"
    _allow_exec(home)
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "m.db"
    script, started, go = _blocking_script(tmp_path, "agent")
    env = isolated_env(tmp_path, MORPHZ_DB=str(db), **{MARK: mark})
    args = ["exec", "c1", "go", "--model", f"scripted:{script}", "--workspace", str(ws)]
    agent = subprocess.Popen(
        [sys.executable, "-m", "morphz", *args],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(started, agent)
        with morphz.open(db) as opened:
            (running,) = opened.context("c1").activations(True)
        hidden = tmp_path / "proc"  # what hidepid=2 shows of a process that is not dumpable
        (hidden / "sys/kernel/random").mkdir(parents=True)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii")
        (hidden / "sys/kernel/random/boot_id").write_text(boot, encoding="ascii")
        monkeypatch.setattr(owners, "PROC", hidden)
        assert running.owner is not None and owners.owner_alive(running.owner) is None
        recover = ["context", "recover", "c1", "--activation", running.activation_id]
        by_hand = CliRunner().invoke(main, [*recover, "--db", str(db)])
        monkeypatch.undo()
    finally:
        go.write_text("", encoding="utf-8")
        out, err = agent.communicate(timeout=120)
    assert by_hand.exit_code != 0, f"a live agent was marked interrupted: {by_hand.output}"
    assert agent.returncode == 0, err
    assert out.strip() == "agent finished"


# --- 2. a host's other threads lose the provider key while one CLI command runs ----------------


def test_a_cli_command_in_one_thread_leaves_the_key_to_a_host_s_other_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: None
) -> None:
    """docs/cli.md: "a host calling the CLI in its own process gets them back when the command
    ends". Until it ends, though, the whole process is without OPENAI_API_KEY and
    OPENAI_BASE_URL (secrets_env.py:58, ``os.environ.pop``), so a host that serves several
    agents at once (a job runner or web service calling ``main()`` in worker threads) has every
    other exec started meanwhile refused with "set OPENAI_API_KEY", and any code of its own
    that reads the key from the environment fails the same way, for as long as any agent runs.
    The pop is what keeps morphz's own children from inheriting the secrets, but those children
    are started with an environment morphz builds (the exec tool drops HIDDEN_ENV,
    shell.py:157); the regex search's child could be given one the same way. Expected: a second
    exec, started in another thread while the first one runs, reaches the configured server
    with the key and delivers its reply."""
    home = tmp_path / "home"
    _allow_exec(home)
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    key = "sk-review17i-threads-0123456789"
    script, started, go = _blocking_script(tmp_path, "first")
    failures: list[BaseException] = []

    def first() -> None:
        args = ["exec", "c1", "go", "--model", f"scripted:{script}", "--workspace", str(ws)]
        try:
            main([*args, "--db", str(tmp_path / "one.db")], standalone_mode=False)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    with Server(lambda _request: openai_completion("second finished", 3000, 3)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", key)
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.root}/v1")
        worker = threading.Thread(target=first, name="host-worker-1")
        worker.start()
        try:
            _wait_for(started)
            args = ["exec", "c2", "hi", "--model", "openai:loop-model", "--workspace", str(ws)]
            second = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "two.db")])
        finally:
            go.write_text("", encoding="utf-8")
            worker.join(120)
        requests = list(server.requests)
    assert not worker.is_alive() and not failures, failures
    assert second.exit_code == 0, second.output
    assert [headers["authorization"] for _, headers, _ in requests] == [f"Bearer {key}"]
