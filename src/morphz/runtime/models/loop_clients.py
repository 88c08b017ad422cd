"""An SDK client per event loop: what lets one model serve a host that runs each message in its
own event loop (``asyncio.run`` per request, the README's "From Python").

An SDK's async client pools keep-alive connections, and a pooled connection belongs to the event
loop that opened it: awaited in another loop (after ``asyncio.run`` closed the first), the
OpenAI SDK raised ``Event loop is closed`` after the provider had answered, and the Anthropic
SDK sent the request again. So an adapter keeps one client for each loop that uses it, made on
that loop's first request, and closes it as that loop shuts down: an async generator started in
the loop holds the client, and the loop's ``shutdown_asyncgens`` (which ``asyncio.run`` and
``asyncio.Runner`` call before closing it) closes the generator, which closes the client and its
connections there. No client is used in two loops, so no request is sent on a connection of a
loop that has gone.

A loop closed without ``shutdown_asyncgens`` (a hand-made loop's bare ``close()``) cannot close
its connections any more: its client is dropped when another loop next makes one, and its
sockets are released when Python collects it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any


class LoopClients:
    """The clients ``make`` makes, one per event loop. ``first``, made with the adapter (so
    that a client the SDK refuses is refused then), is used by the first loop."""

    def __init__(self, make: Callable[[], Any], first: Any) -> None:
        self._make = make
        self._spare: Any = first  # made but not yet used by any loop
        self._lock = threading.Lock()  # loops in several threads may share the adapter
        self._clients: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]] = {}

    async def current(self) -> Any:
        """The client of the running loop, made (and its closing at the loop's shutdown
        arranged) on the loop's first call."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._clients.get(loop)
            if held is not None:
                return held[0]
            gone = self._forget_closed()
            client = self._spare if self._spare is not None else self._make()
            self._spare, closer = None, self._closer(loop, client)
            self._clients[loop] = (client, closer)
        for ended in gone:
            _end_unawaited(ended)
        await anext(closer)  # started in this loop: the loop closes it as it shuts down
        return client

    async def aclose(self) -> None:
        """Close the running loop's client (and the one no loop has used yet); the clients of
        other loops are closed as those loops shut down."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._clients.get(loop)
            spare, self._spare = self._spare, None
        if held is not None:
            await held[1].aclose()  # the closer's end closes the client
        if spare is not None:
            await spare.close()  # it never connected: nothing is bound to a loop

    async def _closer(
        self, loop: asyncio.AbstractEventLoop, client: Any
    ) -> AsyncGenerator[None, None]:
        """Holds ``client`` for ``loop`` until the loop shuts down (or the adapter is closed in
        it), then closes it there and forgets it."""
        try:
            yield
        finally:
            with self._lock:
                held = self._clients.get(loop)
                if held is not None and held[0] is client:
                    del self._clients[loop]
            if not loop.is_closed():
                await client.close()

    def _forget_closed(self) -> list[AsyncGenerator[None, None]]:
        """The closers of the loops closed without shutting their generators down, forgotten
        (under the lock)."""
        closed = [loop for loop in self._clients if loop.is_closed()]
        return [self._clients.pop(loop)[1] for loop in closed]


def _end_unawaited(closer: AsyncGenerator[None, None]) -> None:
    """End ``closer``, whose loop is closed, without a loop: its end awaits nothing then (the
    loop cannot run the client's close), and a closer left to the collector would ask that
    closed loop to close it (an error Python can only print). The client's sockets are
    released when it is collected."""
    ending = closer.aclose()
    try:
        ending.send(None)
    except StopIteration:
        return
    ending.close()  # not reached: the end of a closer whose loop is closed does not wait
