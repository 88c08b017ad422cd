"""Regressions in fd30e7a and the two commits before it, found by a review of them; each failed
on that code."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel

# --- engine.finish: an activation finished by someone else ---------------------------------------


def test_an_activation_interrupted_elsewhere_reports_the_recorded_reason(
    ctx: morphz.Context, workspace: Path
) -> None:
    """finish() now swallows InputError whenever the row is no longer running and takes the
    stored state, but keeps its own reason: an activation another process marked interrupted
    (interrupt_running / interrupt_orphaned) while it ran is returned normally as
    'interrupted' with reason None, which no record says (the stored reason is another)."""

    def model(request: ModelRequest) -> ModelResponse:
        ctx.interrupt_running("operator stopped it")  # another process, meanwhile
        return ModelResponse("all done")

    engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(workspace))
    result = asyncio.run(engine.run("hello"))
    finished = [e for e in ctx.events() if e.kind == "activation_finished"]
    (record,) = [e.payload for e in finished if e.payload["activation"] == result.activation]
    assert (result.state, result.reason) == (record["state"], record["reason"])


# --- database.open: the rebuild of an index a migration left stale --------------------------------


def _pre_recall_store(path: Path) -> None:
    from test_recall_edges import _schema_0001_store

    _schema_0001_store(path, "2023-05-01T00:00:00+00:00")


def test_an_interrupted_rebuild_of_a_pre_recall_store_is_done_at_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stale_recall counts a context with events as stale only while it has no recall_meta
    row. The rebuild's first transaction (begin_rebuild -> table() -> ensure()) creates that row
    with indexed_seq 0 and commits; when a later batch fails (the store busy, the process
    stopped), the next open no longer sees the context as stale and its whole old history stays
    unsearchable, although the rebuild never completed."""
    from morphz.errors import StoreBusyError
    from morphz.recall import maintain

    path = tmp_path / "old.db"
    _pre_recall_store(path)

    def busy(*args: Any, **kw: Any) -> Any:
        raise StoreBusyError("the store is locked: try again")

    monkeypatch.setattr(maintain, "event_docs", busy)
    with pytest.raises(StoreBusyError):
        morphz.open(path)
    monkeypatch.undo()
    with morphz.open(path) as db:
        ctx = db.context("context-default")
        assert [h.ref for h in ctx.recall.search("kiwi", limit=10).hits] == ["@e1"]


def test_two_openers_of_an_upgraded_store_both_open_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes opening a store 0008 marked stale (two `morphz exec` right after an
    upgrade) both rebuild at open, in short write transactions. With one shared building table
    the second's begin_rebuild dropped the first's, and the first's open raised."""
    from morphz.store.sqlite import SqliteStore
    from test_regression_edges import _store_before_0008

    path = tmp_path / "m.db"
    _store_before_0008(path, ["context-default"])
    real_write = SqliteStore.write
    state = {"calls": 0, "nested": False}

    @contextmanager
    def write(self: SqliteStore, context_id: str) -> Any:
        if not state["nested"]:
            state["calls"] += 1
            if state["calls"] == 2:  # the first opener, between its rebuild's transactions
                state["nested"] = True
                morphz.open(path).close()  # the second process opens the store whole
        with real_write(self, context_id) as w:
            yield w

    monkeypatch.setattr(SqliteStore, "write", write)
    db = morphz.open(path)  # the first process
    try:
        hits = db.context("context-default").recall.search("resume", limit=10).hits
        assert [h.ref for h in hits] == ["@e1"]
    finally:
        db.close()
