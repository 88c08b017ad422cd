"""An activation cancelled while one of its writes runs in a worker thread (a commit, a recall
delivery, the tools' results) records its end after that write, never before it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import make_engine
from morphz import events as ev
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

NOTE = '(create note/one (fact "written while the activation is cancelled"))'


def test_a_commit_in_flight_lands_before_the_interrupted_end(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit started in a thread goes on after the cancel; the activation's end is recorded
    once it has landed, so the log never shows a transaction of an activation after its end."""
    started, release, ended = threading.Event(), threading.Event(), threading.Event()
    commit, finish = ctx.commit, ctx.finish_activation

    def slow_commit(*args: Any, **kw: Any) -> Any:
        started.set()
        release.wait(10)
        return commit(*args, **kw)

    def finish_activation(*args: Any, **kw: Any) -> Any:
        try:
            return finish(*args, **kw)
        finally:
            ended.set()

    monkeypatch.setattr(ctx, "commit", slow_commit)
    monkeypatch.setattr(ctx, "finish_activation", finish_activation)

    async def agent(request: ModelRequest) -> ModelResponse:
        version = request.encoding.split("(mind-version ")[1].split(")")[0]
        tx = f"(context-tx (base-version {version}) {NOTE})"
        return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))

    async def scenario() -> None:
        task = asyncio.create_task(make_engine(ctx, FunctionModel(agent), workspace).run("hi"))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        # the end, if recorded without waiting for the commit, is recorded by then
        await asyncio.to_thread(ended.wait, 1)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    kinds = [e.kind for e in ctx.events()]
    assert kinds.count(ev.TX_COMMITTED) == 1
    assert kinds.index(ev.TX_COMMITTED) < kinds.index(ev.ACTIVATION_FINISHED)
    assert kinds[-1] == ev.ACTIVATION_FINISHED
    (row,) = ctx.activations()
    assert row.state == "interrupted"
    assert ctx.audit().ok
