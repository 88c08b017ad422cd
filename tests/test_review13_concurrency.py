"""Review 13, concurrency: several processes and threads on one store. Each test fails on the
code it was written against; its docstring states the behaviour expected.

Another process holds the store's write lock as a real writer does: ``import_history`` in a
child process whose progress callback (called inside the write transaction) announces itself
with a file and waits for a release file. Ordering comes from those files, never from sleeps.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from agents import make_engine
from morphz.interfaces.cli import main
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from stores import Holder


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
