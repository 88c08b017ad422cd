"""An adapter used from several event loops (review 18c, runtime/models/loop_clients.py): each
loop gets its own SDK client, closed as that loop shuts down, and no request is sent twice."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from loopback import Server, answer_ok, keep_alive
from morphz.runtime.models.base import ModelRequest
from morphz.runtime.models.openai_compat import OpenAIChatModel

REQUEST = ModelRequest("(context-encoding)", ())


@pytest.fixture
def server(loopback_only: None) -> Iterator[Server]:
    with keep_alive(Server(answer_ok)) as running:
        yield running


def _model(server: Server) -> tuple[OpenAIChatModel, list[Any]]:
    """A model of ``server`` and the SDK clients it makes (the first with the model)."""
    model = OpenAIChatModel("m", base_url=f"{server.root}/v1", api_key="sk-loops")
    clients = model._clients
    assert clients is not None
    made, make = [clients._spare], clients._make

    def recording() -> Any:
        made.append(make())
        return made[-1]

    clients._make = recording
    return model, made


async def _text(model: OpenAIChatModel) -> str | None:
    return (await model.request(REQUEST)).text


def test_each_loops_client_is_closed_as_asyncio_run_ends_it(server: Server) -> None:
    model, made = _model(server)
    replies = [asyncio.run(_text(model)) for _ in range(3)]
    assert replies == ["ok", "ok", "ok"]
    assert len(server.requests) == 3  # none sent twice
    assert len(made) == 3  # the one made with the model served the first loop
    assert all(client.is_closed() for client in made)  # their connections closed with the loop
    assert model._clients is not None and not model._clients._pinned  # the model keeps none


def test_a_loop_kept_running_keeps_its_client_while_another_loop_comes_and_goes(
    server: Server,
) -> None:
    model, made = _model(server)
    with asyncio.Runner() as runner:
        assert runner.run(_text(model)) == "ok"
        assert asyncio.run(_text(model)) == "ok"  # another loop, in between
        assert runner.run(_text(model)) == "ok"
        assert len(made) == 2 and not made[0].is_closed()  # the runner's client, kept
        assert made[1].is_closed()  # asyncio.run's, closed as its loop shut down
        runner.run(model.aclose())
        assert made[0].is_closed()
    assert len(server.requests) == 3


def test_closing_in_a_loop_that_made_no_request_makes_no_client(server: Server) -> None:
    model, made = _model(server)
    assert asyncio.run(_text(model)) == "ok"
    asyncio.run(model.aclose())
    assert len(made) == 1 and made[0].is_closed()


# the dropped client's transport, collected, says it was not closed (its loop could not)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_loop_closed_without_shutting_down_its_generators(server: Server) -> None:
    """A hand-made loop closed bare cannot close its client's connections: the next loop makes
    its own, and the closed loop's client goes with the loop, without touching it (no "Event
    loop is closed" from the closer's finalizer); the collector closes the old socket."""
    model, made = _model(server)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(_text(model)) == "ok"
    finally:
        loop.close()
    assert asyncio.run(_text(model)) == "ok"
    assert len(server.requests) == 2 and len(made) == 2
    assert model._clients is not None and not model._clients._pinned
    del loop, made, model
    gc.collect()  # the dropped client's transport is collected here, its socket closed


def test_loops_in_two_threads_at_once_each_use_their_own_client(loopback_only: None) -> None:
    """A thread-per-request host: two requests in flight at once (the server answers neither
    before it has both), each in its own thread's loop."""
    both = threading.Barrier(2, timeout=60)  # a failure, not a hang, if one never arrives

    def answer(request: Any) -> dict[str, Any]:
        both.wait()
        return answer_ok(request)

    with keep_alive(Server(answer)) as server:
        model, made = _model(server)
        replies: list[str | None] = []
        threads = [
            threading.Thread(target=lambda: replies.append(asyncio.run(_text(model))))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert replies == ["ok", "ok"] and len(server.requests) == 2
        assert len(made) == 2 and all(client.is_closed() for client in made)
