"""Review 13, concurrency: several processes and threads on one store. Each test fails on the
code it was written against; its docstring states the behaviour expected.

Another process holds the store's write lock as a real writer does: ``import_history`` in a
child process whose progress callback (called inside the write transaction) announces itself
with a file and waits for a release file. Ordering comes from those files, never from sleeps.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from agents import make_engine
from morphz.interfaces.cli import main
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel

SRC = str(Path(morphz.__file__).resolve().parents[1])
HANG_GUARD = 60  # seconds: only stops a hung child from hanging the suite

# Holds the write lock of the store argv[1] (an import's one write transaction) from the
# moment it creates argv[2]/holding until argv[2]/release exists.
HOLDER = """
import pathlib, sys, time
import morphz

folder = pathlib.Path(sys.argv[2])

def progress(done, total):
    (folder / "holding").touch()
    while not (folder / "release").exists():
        time.sleep(0.005)

with morphz.open(sys.argv[1]) as db:
    db.context(sys.argv[3]).import_history(str(folder / "history.jsonl"), progress=progress)
"""


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``path`` exists (the holder's announcement); fails if the holder died first."""
    deadline = time.monotonic() + HANG_GUARD
    while not path.exists():
        assert proc.poll() is None, "the lock holder exited before it held the lock"
        assert time.monotonic() < deadline, "the lock holder never took the lock"
        time.sleep(0.005)


class Holder:
    """A child process that holds the store's write lock while asked to."""

    def __init__(self, store: Path, context: str, folder: Path) -> None:
        self.store, self.context, self.folder = store, context, folder
        folder.mkdir()
        (folder / "history.jsonl").write_text('{"text": "imported"}\n', encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None

    def hold(self) -> None:
        env = {**os.environ, "PYTHONPATH": SRC}
        argv = [sys.executable, "-c", HOLDER, str(self.store), str(self.folder), self.context]
        self.proc = subprocess.Popen(argv, env=env)
        _wait_for(self.folder / "holding", self.proc)

    def release(self) -> None:
        (self.folder / "release").touch()
        if self.proc is not None:
            assert self.proc.wait(HANG_GUARD) == 0

    @contextmanager
    def holding(self) -> Iterator[None]:
        self.hold()
        try:
            yield
        finally:
            self.release()


def test_an_activation_whose_end_a_busy_store_refused_does_not_stay_running_for_good(
    tmp_path: Path, workspace: Path
) -> None:
    """A host process (a server, a notebook, any long-lived library user) runs an activation;
    while the model answers, another process takes the store's write lock for longer than
    ``busy_timeout`` twice over (a large import is one transaction: ~30,000 lines a second,
    so a 2,000,000-line history holds it for about a minute). Recording the reply fails with
    StoreBusyError; the engine then tries to record the activation's end, which fails the same
    way (engine.py:217-219 -> _Run.interrupted -> finish), and ``run`` raises. Fine so far: the
    caller gets a typed error. But once the lock is free, the activation is still ``running``
    for as long as the host lives: its root request stays causally protected (cannot be
    retired), its session cannot be retired, every later kernel lists it under
    running-activations, and `morphz context recover --activation ID` refuses it ("run by
    process N, alive on this host: stop it first (it records its own end)",
    interfaces/cli.py:423-428) although that process will never record it: nothing retries.
    Expected: the activation does not stay running for good: its end is recorded once the
    store can take it, or recover can mark it (the owner no longer runs it)."""
    store = tmp_path / "store.db"
    db = morphz.open(store, busy_timeout=0.3)
    ctx = db.context("c", create=True)
    holder = Holder(store, "c", tmp_path / "holder")

    def model(request: ModelRequest) -> ModelResponse:
        holder.hold()  # another process takes the lock while the model answers
        return ModelResponse("done", ())

    engine = make_engine(ctx, FunctionModel(model), workspace)
    try:
        with pytest.raises(morphz.StoreBusyError):
            asyncio.run(engine.run("summarise the logs", session="ops"))
    finally:
        holder.release()  # the store is free again; this host process lives on

    running = ctx.activations(running_only=True)
    if running:
        (act,) = running
        recover = CliRunner().invoke(
            main,
            ["context", "recover", "c", "--activation", act.activation_id, "--db", str(store)],
        )
        assert recover.exit_code == 0, (
            f"activation {act.activation_id} stays running after its end could not be "
            f"recorded, and recover refuses it: {recover.output}"
        )
        assert ctx.activations(running_only=True) == []
    db.close()
