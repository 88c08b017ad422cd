"""Review 10 (concurrency and process lifecycle): several processes and threads on one store and
one context, activations and their owners, signals. Each test fails against the code as it was
reviewed; its docstring states the behaviour expected.

Interleavings are made deterministic by doing the "other process's" step, on a second handle of
the same SQLite file, at the exact moment it would race; real processes are synchronised through
pipes and a FIFO, never by sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import morphz
from agents import make_engine
from morphz.owners import process_start
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.store.base import ActivationRow
from stores import user_config

CONTEXT = "context-default"
SRC = Path(__file__).resolve().parents[1] / "src"

# ---------------------------------------------------------------- signals


def test_sigterm_to_morphz_exec_does_not_leave_its_shell_command_running(tmp_path: Path) -> None:
    """``morphz exec`` runs the agent's ``exec`` tool commands in a process group of their own
    (``start_new_session=True``), and shell.py promises: "When the command finishes, or times
    out, or the call is cancelled, the whole group is killed, so no background process outlives
    the call." Ctrl-C (SIGINT) keeps that promise (the run is cancelled, the group killed, the
    activation recorded interrupted). But SIGTERM, the ordinary "please stop" of `kill PID`,
    `timeout`, a service manager or a CI runner (and SIGHUP when a terminal running
    `morphz chat` closes), has no handler: Python exits at once, no `finally` runs, and the
    command, in its own session so it gets neither signal itself, keeps running with no timeout
    left to stop it (the timeout was enforced by the morphz process that is gone). The
    activation also stays `running` until a later exec/chat/recover notices.

    Expected: on SIGTERM morphz stops as it does on Ctrl-C: the command's process group is
    killed before morphz exits (and the activation is recorded interrupted)."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')  # the user's: not a project's
    command = f"echo $$ > {fifo}; exec sleep 300"  # the shell's pid becomes sleep's
    script = [{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}]
    (tmp_path / "script.json").write_text(json.dumps([*script, {"reply": "done"}]))
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(SRC)}
    env.pop("MORPHZ_DB", None)
    args = ["exec", "run it", "--model", f"scripted:{tmp_path / 'script.json'}"]
    args += ["--workspace", str(ws), "--db", str(tmp_path / "morphz.db")]
    reader = os.open(fifo, os.O_RDWR)  # never blocks; the shell's write does not either
    pid = None
    proc = subprocess.Popen(
        [sys.executable, "-m", "morphz", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([reader], [], [], 120)  # a guard, not a timing
        if not ready:
            proc.kill()
            raise AssertionError(f"the command never started:\n{proc.communicate()[1]}")
        pid = int(os.read(reader, 64).decode().strip())
        assert process_start(pid) is not None  # the agent's command is running
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert process_start(pid) is None, (
            f"the exec tool's command (pid {pid}) outlived morphz exec, which was stopped with "
            "SIGTERM"
        )
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if pid is not None and process_start(pid) is not None:
            os.kill(pid, signal.SIGKILL)  # the sleep this test's child started


# ---------------------------------------------------------------- activations


def test_a_root_request_retired_before_its_activation_starts_is_not_lost(
    tmp_path: Path,
) -> None:
    """``Engine.run`` appended the user message and started the activation in two separate write
    transactions (``ctx.observe`` then ``ctx.start_activation``). In between, the message is an
    ordinary active observation: another activation (another session, another process) tidying
    its inbox can retire it. ``start_activation`` accepts a retired root without a word, so the
    activation runs with its own request out of view: the model sees only the kernel's
    200-character objective, never the rest of what the user asked. DESIGN §7: "The undelivered
    root request of a running activation is causally protected until its reply is delivered."

    Expected: the request an activation answers is in view when it runs: the message and the
    activation's start are written in one transaction (or the start, under the writer lock,
    brings a retired root back), so the model's first request carries the whole user message."""
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db, morphz.open(path) as other:
        ctx = db.context(CONTEXT, create=True)
        real_write = db.store.write

        @contextlib.contextmanager
        def write_then_tidy(context_id: str) -> Iterator[Any]:
            """After every write of this process commits, another agent retires the user
            messages it sees in view (refused for one a running activation protects)."""
            with real_write(context_id) as w:
                yield w
            tidy = other.context(CONTEXT)
            for obs in tidy.mind().observations:
                if obs.kind == "user_message" and obs.lifecycle == "active":
                    with contextlib.suppress(morphz.TxError):
                        tidy.commit(
                            f"(context-tx (base-version {tidy.version}) "
                            f'(reason "inbox tidied") (retire {obs.ref}))',
                            session="housekeeping",
                        )

        db.store.write = write_then_tidy  # type: ignore[method-assign]
        sent: list[ModelRequest] = []

        def model(request: ModelRequest) -> ModelResponse:
            sent.append(request)
            return ModelResponse("done", ())

        engine = make_engine(ctx, FunctionModel(model), tmp_path)
        prompt = "deploy the widget " + "carefully " * 30 + "and roll back if the canary fails"
        result = asyncio.run(engine.run(prompt))
        assert result.state == "delivered"
        assert "roll back if the canary fails" in sent[0].encoding, (
            "the activation's own user message was retired before it started: the model never "
            "saw the end of the request"
        )


def test_interrupt_running_skips_an_activation_finished_meanwhile(tmp_path: Path) -> None:
    """``Context.interrupt_running()`` lists the running activations, then finishes them one by
    one. When one of them is finished in between (another restarting worker runs the same
    recovery, or the owner records its end as it exits), ``finish_activation`` raises
    ``InputError: ... is not running`` and the loop stops there: the call fails, and every
    activation after that one is left running. ``interrupt_orphaned`` already tolerates this
    race (``_interrupt``: "False when another caller finished it first").

    Expected: an activation finished by someone else meanwhile is skipped (not returned); the
    others are still marked interrupted and returned, and nothing is raised."""
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db, morphz.open(path) as other:
        ctx = db.context(CONTEXT, create=True)
        first = ctx.start_activation("a")
        second = ctx.start_activation("b")
        real_activations = ctx.activations

        def listed_then_one_finished_elsewhere(running_only: bool = False) -> list[ActivationRow]:
            rows = real_activations(running_only)
            other.context(CONTEXT).finish_activation(first, "interrupted", "the other worker")
            return rows

        ctx.activations = listed_then_one_finished_elsewhere  # type: ignore[method-assign]
        marked: list[str] | None = None
        error: Exception | None = None
        try:
            marked = ctx.interrupt_running()
        except morphz.InputError as exc:
            error = exc
        ctx.activations = real_activations  # type: ignore[method-assign]
        states = {a.activation_id: a.state for a in ctx.activations()}
        assert states[second] == "interrupted", (
            f"left running: {second} (interrupt_running raised: {error})"
        )
        assert marked == [second]
