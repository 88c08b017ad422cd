"""The loop holds its clients, not the model (review 18e, runtime/models/loop_clients.py): a
loop its host drops is collected with its client; a loop kept and run again keeps its client; a
model dropped leaves no client in a loop that goes on; a loop that takes no attribute still
gets one client."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopback import Server, answer_ok, keep_alive
from morphz.runtime.models import loop_clients
from morphz.runtime.models.base import ModelRequest
from morphz.runtime.models.openai_compat import OpenAIChatModel
from stores import SRC

REQUEST = ModelRequest("(context-encoding)", ())


@pytest.fixture
def server(loopback_only: None) -> Iterator[Server]:
    with keep_alive(Server(answer_ok)) as running:
        yield running


def _model(server: Server) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=f"{server.root}/v1", api_key="sk-18e-loops")


async def _text(model: OpenAIChatModel) -> str | None:
    return (await model.request(REQUEST)).text


def _client(table: Any) -> Any:
    """The one client in ``table`` (a loop's), without holding its closer."""
    [held] = table.values()
    return held[0]


async def _settled() -> None:
    """Once the callbacks already scheduled have run: every other task of the loop ended."""
    await asyncio.sleep(0)
    others = asyncio.all_tasks() - {asyncio.current_task()}
    assert others  # the closer's end
    await asyncio.gather(*others)


def _shut(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def test_a_loop_run_again_keeps_its_one_client(server: Server) -> None:
    model = _model(server)
    loop = asyncio.new_event_loop()
    try:
        assert [loop.run_until_complete(_text(model)) for _ in range(3)] == ["ok"] * 3
        client = _client(getattr(loop, loop_clients.ATTRIBUTE))
        assert not client.is_closed()
    finally:
        _shut(loop)
    assert client.is_closed() and len(server.requests) == 3


_DROPPING_HOST = """
import asyncio, gc, sys, warnings, weakref
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")  # Python warns of the unclosed loops and sockets: the host's
from loopback import Server, answer_ok, keep_alive
import test_fix18e_loops as t
with keep_alive(Server(answer_ok)) as server:
    model = t._model(server)
    dropped = []
    for _ in range(5):
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(t._text(model)) == "ok"
        dropped.append(weakref.ref(loop))
        del loop
    gc.collect()
    print(sum(ref() is not None for ref in dropped), len(server.requests))
"""


def test_loops_dropped_unclosed_go_with_their_clients(loopback_only: None) -> None:
    """A host that drops each message's loop unclosed: none of them outlives the collection.
    Run in a process of its own: pytest keeps what its unraisable-exception hook saw (the SDK's
    own finalizers report the closed loops) until the test ends, and with it a loop."""
    proc = subprocess.run(
        [sys.executable, "-c", _DROPPING_HOST, str(Path(__file__).parent)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(SRC)),
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "5"], proc.stdout + proc.stderr


def test_a_model_dropped_leaves_no_client_in_a_loop_that_goes_on(server: Server) -> None:
    """A loop does not keep a model alive: once the model is collected, its client is closed
    in the loop as the loop runs next."""
    model = _model(server)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(_text(model)) == "ok"
        client = _client(getattr(loop, loop_clients.ATTRIBUTE))
        gone = weakref.ref(model)
        del model
        gc.collect()
        assert gone() is None
        assert not getattr(loop, loop_clients.ATTRIBUTE)
        loop.run_until_complete(_settled())  # the closer's end, scheduled by collection
        assert client.is_closed()
    finally:
        _shut(loop)


class _Bare(asyncio.SelectorEventLoop):
    """A loop that takes no attribute of Morphz's."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == loop_clients.ATTRIBUTE:
            raise AttributeError(name)
        super().__setattr__(name, value)


def test_a_loop_that_takes_no_attribute_gets_one_client_held_until_it_closes(
    server: Server,
) -> None:
    model = _model(server)
    clients = model._clients
    assert clients is not None
    loop = _Bare()
    try:
        assert [loop.run_until_complete(_text(model)) for _ in range(2)] == ["ok", "ok"]
        assert list(clients._pinned) == [loop]
        client = _client(clients._pinned[loop])
    finally:
        _shut(loop)
    assert client.is_closed()
    assert asyncio.run(_text(model)) == "ok"  # another loop: a closed one's table is let go
    assert len(server.requests) == 3


def test_a_closed_loop_s_table_is_let_go_by_the_next_loop_that_takes_no_attribute(
    server: Server,
) -> None:
    model = _model(server)
    clients = model._clients
    assert clients is not None
    first = _Bare()
    try:
        assert first.run_until_complete(_text(model)) == "ok"
    finally:
        _shut(first)
    second = _Bare()
    try:
        assert second.run_until_complete(_text(model)) == "ok"
        assert list(clients._pinned) == [second]
    finally:
        _shut(second)
