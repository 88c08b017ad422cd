"""Orphaned activations: an activation whose process died is found by its recorded owner and
marked interrupted; activations of live processes and of other hosts are left alone.

The orphans are real: a child process (the virtualenv's interpreter) opens the store, starts
activations and is killed with SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import morphz
from morphz import activating, owners
from morphz import events as ev
from morphz.errors import InputError
from morphz.interfaces.cli import main
from morphz.owners import Owner, current_owner, host_name, owner_alive, process_start

CONTEXT = "context-default"
LINUX_PROC = Path("/proc/self/stat").exists() and Path("/proc/sys/kernel/random/boot_id").exists()
needs_proc = pytest.mark.skipif(not LINUX_PROC, reason="needs Linux /proc")

# Opens the store, starts COUNT activations (each on its own user message) and reports them;
# then waits for a line on stdin (or its end) before it exits normally.
STARTER = """
import json, os, sys
import morphz
db = morphz.open(sys.argv[1])
ctx = db.context(sys.argv[2])
ids = []
for i in range(int(sys.argv[3])):
    root = ctx.observe("user_message", f"request {i}")
    ids.append(ctx.start_activation(f"s{i % 3}", root.ref))
print(json.dumps({"pid": os.getpid(), "activations": ids}), flush=True)
sys.stdin.readline()
db.close()
"""

# Waits for a line on stdin, then recovers the context and prints the ids it marked.
RECOVERER = """
import json, sys
import morphz
db = morphz.open(sys.argv[1])
ctx = db.context(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(ctx.interrupt_orphaned()), flush=True)
db.close()
"""


@dataclass
class Child:
    proc: subprocess.Popen[str]
    pid: int
    activations: list[str]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(f"the child did not start:\n{proc.stderr.read()}")
    return line


@contextlib.contextmanager
def starter(path: Path, count: int = 1) -> Iterator[Child]:
    """A child process with ``count`` running activations; it ends with the block (a clean
    exit unless the test killed it)."""
    with _spawn(STARTER, str(path), CONTEXT, str(count)) as proc:
        try:
            info = json.loads(_first_line(proc))
            yield Child(proc, info["pid"], info["activations"])
        finally:
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.write("\n")
                proc.stdin.flush()
                proc.wait(timeout=30)


def orphans(path: Path, count: int = 1) -> list[str]:
    """``count`` activations left running by a process killed with SIGKILL."""
    with starter(path, count) as child:
        child.kill()
    return child.activations


@pytest.fixture
def path(tmp_path: Path) -> Path:
    store = tmp_path / "morphz.db"
    with morphz.open(store) as db:
        db.create_context(CONTEXT)
    return store


def _finished(ctx: morphz.Context) -> dict[str, list[dict[str, Any]]]:
    """activation id -> the payloads of its activation_finished events."""
    out: dict[str, list[dict[str, Any]]] = {}
    for event in ctx.events():
        if event.kind == ev.ACTIVATION_FINISHED:
            assert event.payload is not None
            out.setdefault(event.payload["activation"], []).append(event.payload)
    return out


def _states(ctx: morphz.Context) -> dict[str, str]:
    return {a.activation_id: a.state for a in ctx.activations()}


# ------------------------------------------------------------------ owners


def test_the_current_process_is_its_own_live_owner() -> None:
    me = current_owner()
    assert (me.host, me.pid) == (host_name(), os.getpid())
    assert owner_alive(me) is True


@needs_proc
def test_a_recycled_pid_with_another_start_time_is_not_the_owner() -> None:
    me = current_owner()
    assert me.started is not None and me.started == process_start(os.getpid())
    boot, _, start = me.started.rpartition(":")
    assert owner_alive(Owner(me.host, me.pid, f"{boot}:{int(start) + 1}")) is False
    assert owner_alive(Owner(me.host, me.pid, f"another-boot:{start}")) is False


@needs_proc
def test_a_process_that_exited_is_dead_even_before_it_is_reaped() -> None:
    with _spawn("import sys; sys.stdin.readline()") as proc:
        owner = Owner(host_name(), proc.pid, process_start(proc.pid))
        assert owner.started is not None and owner_alive(owner) is True
        os.kill(proc.pid, signal.SIGKILL)  # not waited for: a zombie for now
        deadline = time.monotonic() + 30
        while process_start(proc.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert owner_alive(owner) is False
        proc.wait(timeout=30)
    assert owner_alive(owner) is False  # reaped: the pid is gone


def test_another_host_cannot_be_told() -> None:
    assert owner_alive(Owner(f"not-{host_name()}", os.getpid(), None)) is None
    assert owner_alive(Owner(f"not-{host_name()}", 2**22 + 7, None)) is None


def test_another_users_live_process_is_alive() -> None:
    assert owner_alive(Owner(host_name(), 1, process_start(1))) is True


def test_without_proc_the_pid_alone_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _spawn("pass") as proc:
        proc.wait(timeout=30)
    monkeypatch.setattr(owners, "PROC", tmp_path / "no-proc")
    me = current_owner()
    assert me.started is None and owner_alive(me) is True
    assert owner_alive(Owner(me.host, me.pid, "recorded-where-proc-existed:1")) is True
    assert owner_alive(Owner(me.host, proc.pid, None)) is False
    assert owner_alive(Owner(me.host, 0, None)) is False


def test_the_start_time_is_read_after_a_command_name_with_spaces_and_parentheses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("b00t\n")
    (proc / "4242").mkdir()
    fields = " ".join(str(n) for n in range(4, 30))  # fields 4.. of the line
    (proc / "4242/stat").write_text(f"4242 (a) (b c)) S {fields}\n")
    (proc / "4243").mkdir()
    (proc / "4243/stat").write_text(f"4243 (zombie) Z {fields}\n")
    monkeypatch.setattr(owners, "PROC", proc)
    assert process_start(4242) == "b00t:22"
    assert process_start(4243) is None
    assert process_start(4244) is None


# ------------------------------------------------------------------ interrupt_orphaned


def test_a_killed_process_leaves_an_orphan_that_is_marked_interrupted(path: Path) -> None:
    with starter(path, count=2) as child:
        pid = child.pid
        child.kill()
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        running = ctx.activations(running_only=True)
        assert [a.activation_id for a in running] == child.activations
        recorded = {a.owner for a in running}
        assert len(recorded) == 1
        (owner,) = recorded
        assert owner is not None and (owner.host, owner.pid) == (host_name(), pid)
        assert (owner.started is not None) == LINUX_PROC
        assert ctx.interrupt_orphaned() == child.activations
        assert set(_states(ctx).values()) == {"interrupted"}
        finished = _finished(ctx)
        for activation in child.activations:
            (payload,) = finished[activation]
            assert payload["state"] == "interrupted"
            assert f"owner pid {pid} on {host_name()} is gone" in payload["reason"]
        assert ctx.interrupt_orphaned() == []
        assert ctx.audit().ok


def test_the_root_request_is_no_longer_protected_after_recovery(path: Path) -> None:
    (activation,) = orphans(path)
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)

        def retire_root() -> morphz.Receipt:
            tx = f'(context-tx (base-version {ctx.version}) (reason "done") (retire @e1))'
            return ctx.commit(tx)

        with pytest.raises(morphz.ProtectedError):
            retire_root()
        assert ctx.interrupt_orphaned() == [activation]
        assert retire_root().after_version == 1


def test_a_live_process_keeps_its_activations(path: Path) -> None:
    dead = orphans(path)
    with starter(path, count=2) as live, morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        mine = ctx.start_activation("here", ctx.observe("user_message", "mine").ref)
        assert ctx.interrupt_orphaned() == dead
        states = _states(ctx)
        assert [states[a] for a in [*live.activations, mine]] == ["running"] * 3
        assert set(_finished(ctx)) == set(dead)


def test_other_hosts_and_unowned_rows(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        with monkeypatch.context() as m:
            m.setattr(owners, "current_owner", lambda: Owner("elsewhere", 4242, None))
            remote = ctx.start_activation("remote")
        unowned = ctx.start_activation("old")
        with db.store.write(CONTEXT) as w:  # as a row from before owners were recorded
            row = w.activation(unowned)
            assert row is not None and row.owner == current_owner()
            w.put_activation(replace(row, owner=None))
        assert ctx.interrupt_orphaned() == []
        assert ctx.interrupt_orphaned(include_unowned=True) == [unowned]
        assert _states(ctx) == {remote: "running", unowned: "interrupted"}
        assert "no owner was recorded" in _finished(ctx)[unowned][0]["reason"]


def test_rows_from_before_the_migration_have_no_owner(path: Path) -> None:
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        old = ctx.start_activation("default")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for column in ("owner_host", "owner_pid", "owner_started"):
            conn.execute(f"ALTER TABLE activations DROP COLUMN {column}")
        conn.execute("DELETE FROM schema_migrations WHERE number = 4")
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        (row,) = ctx.activations()
        assert (row.activation_id, row.state, row.owner) == (old, "running", None)
        assert ctx.interrupt_orphaned() == []
        assert ctx.interrupt_orphaned(include_unowned=True) == [old]


# ------------------------------------------------------------------ races


def test_two_processes_recovering_at_once_finish_each_orphan_once(path: Path) -> None:
    dead = orphans(path, count=24)
    procs = [_spawn(RECOVERER, str(path), CONTEXT) for _ in range(2)]
    try:
        for proc in procs:
            assert _first_line(proc) == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [json.loads(_first_line(proc)) for proc in procs]
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)
    first, second = results
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(dead)
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        assert {a: len(p) for a, p in _finished(ctx).items()} == dict.fromkeys(dead, 1)
        assert ctx.audit().ok


def test_losing_the_race_to_another_recoverer_is_not_an_error(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (activation,) = orphans(path)
    with morphz.open(path) as db, morphz.open(path) as other:
        real = owners.owner_alive

        def judged_then_finished_elsewhere(owner: Owner) -> bool | None:
            verdict = real(owner)
            other.context(CONTEXT).finish_activation(activation, "interrupted", "the other one")
            return verdict

        monkeypatch.setattr(owners, "owner_alive", judged_then_finished_elsewhere)
        ctx = db.context(CONTEXT)
        assert ctx.interrupt_orphaned() == []
        (payload,) = _finished(ctx)[activation]
        assert payload["reason"] == "the other one"


def test_finish_activation_checks_the_state_under_the_writer_lock(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with morphz.open(path) as db, morphz.open(path) as other:
        ctx = db.context(CONTEXT)
        activation = ctx.start_activation("default")
        write = ctx._runtime_event

        def finished_elsewhere_first(*args: Any, **kwargs: Any) -> ev.Event:
            other.context(CONTEXT).finish_activation(activation, "failed", "won")
            return write(*args, **kwargs)

        monkeypatch.setattr(ctx, "_runtime_event", finished_elsewhere_first)
        with pytest.raises(InputError, match="is not running"):
            ctx.finish_activation(activation, "delivered")
        assert [p["state"] for p in _finished(ctx)[activation]] == ["failed"]


def test_other_input_errors_are_not_swallowed(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    orphans(path)
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise InputError("something else went wrong")

        monkeypatch.setattr(activating, "finish", refuse)
        with pytest.raises(InputError, match="something else"):
            ctx.interrupt_orphaned()


# ------------------------------------------------------------------ command line


def _cli(path: Path, *args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--db", str(path)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_context_recover_marks_orphans_and_lists_what_still_runs(path: Path) -> None:
    dead = orphans(path, count=2)
    with starter(path) as live:
        out = json.loads(_cli(path, "context", "recover", "--format", "json").stdout)
        assert out["context"] == CONTEXT and out["interrupted"] == dead
        (running,) = out["running"]
        assert running["activation"] == live.activations[0] and running["alive"] is True
        assert running["owner"]["pid"] == live.pid and running["owner"]["host"] == host_name()
        text = _cli(path, "context", "recover").stdout
    assert text.startswith("nothing to recover\n")
    assert live.activations[0] in text and f"pid {live.pid} on {host_name()}" in text
    assert "yes" in text


def test_context_recover_text_names_what_it_marked(path: Path) -> None:
    (activation,) = orphans(path)
    text = _cli(path, "context", "recover").stdout
    assert text.splitlines() == [
        "interrupted 1 orphaned activation(s)",
        f"  {activation}",
        "no activations are running",
    ]


def test_exec_recovers_orphans_when_it_starts(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (activation,) = orphans(path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"reply": "done"}]))
    args = ["exec", "hello", "--model", f"scripted:{script}", "--format", "json"]
    result = _cli(path, *args, "--workspace", str(tmp_path))
    assert json.loads(result.stdout)["state"] == "delivered"
    assert f"marked 1 orphaned activation(s) of {CONTEXT} interrupted: {activation}" in (
        result.stderr
    )
    with morphz.open(path) as db:
        states = _states(db.context(CONTEXT))
    assert states[activation] == "interrupted"
    assert sorted(states.values()) == ["delivered", "interrupted"]


def test_chat_recovers_orphans_when_it_starts(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (activation,) = orphans(path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.json"
    script.write_text('[{"reply": "unused"}]')  # (an empty script is refused)
    args = ["chat", "--model", f"scripted:{script}", "--db", str(path)]
    result = CliRunner().invoke(main, [*args, "--workspace", str(tmp_path)], input="/quit\n")
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"interrupted: {activation}" in result.stderr
    with morphz.open(path) as db:
        assert _states(db.context(CONTEXT)) == {activation: "interrupted"}


def test_recover_marks_a_named_activation_of_another_host(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recover --activation ID` ends an activation no host can prove gone (its owner is on
    another host); it refuses one whose owner is alive on this host, and one not running."""
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        with monkeypatch.context() as m:
            m.setattr(owners, "current_owner", lambda: Owner("elsewhere", 4242, None))
            remote = ctx.start_activation("remote")
        mine = ctx.start_activation("here")  # owned by this live process
    runner = CliRunner()
    done = runner.invoke(
        main, ["context", "recover", CONTEXT, "--activation", remote, "--db", str(path)]
    )
    assert done.exit_code == 0, done.output
    assert remote in done.stdout
    alive = runner.invoke(
        main, ["context", "recover", CONTEXT, "--activation", mine, "--db", str(path)]
    )
    assert alive.exit_code == 1 and "alive on this host" in alive.stderr
    again = runner.invoke(
        main, ["context", "recover", CONTEXT, "--activation", remote, "--db", str(path)]
    )
    assert again.exit_code == 1 and "no running activation" in again.stderr
    with morphz.open(path) as db:
        states = _states(db.context(CONTEXT))
        assert states[remote] == "interrupted" and states[mine] == "running"
        assert "by hand" in _finished(db.context(CONTEXT))[remote][0]["reason"]
