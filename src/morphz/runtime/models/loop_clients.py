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

The loop holds its clients, not the adapter (review 18e): a client's pooled connections refer
to their loop, so a table of clients kept by the adapter would keep every loop it ever served
alive, with its selector and sockets, as long as the model, even a loop its host dropped without
closing it (``new_event_loop().run_until_complete(...)`` per message). Each loop keeps a table
of its clients in an attribute (keyed weakly by the adapter's :class:`LoopClients`, so a loop
does not keep a model alive either); a loop that is dropped is collected with its clients, and
the collector closes their sockets. A loop closed without ``shutdown_asyncgens`` (a bare
``close()``) cannot close its connections any more: they go when the loop is collected. A loop
that takes no attribute (none of asyncio's or uvloop's) has its table kept by the adapter until
it is closed.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any

# the attribute of an event loop that holds its clients
ATTRIBUTE = "_morphz_loop_clients"

Held = tuple[Any, AsyncGenerator[None, None]]  # a client and the closer that holds it
Table = weakref.WeakKeyDictionary["LoopClients", Held]


class LoopClients:
    """The clients ``make`` makes, one per event loop. ``first``, made with the adapter (so
    that a client the SDK refuses is refused then), is used by the first loop."""

    def __init__(self, make: Callable[[], Any], first: Any) -> None:
        self._make = make
        self._spare: Any = first  # made but not yet used by any loop
        self._lock = threading.Lock()  # loops in several threads may share the adapter
        # the tables of the loops that take no attribute, kept until the loop is closed
        self._pinned: dict[asyncio.AbstractEventLoop, Table] = {}

    async def current(self) -> Any:
        """The client of the running loop, made (and its closing at the loop's shutdown
        arranged) on the loop's first call."""
        loop = asyncio.get_running_loop()
        table = self._table(loop)
        held = table.get(self)  # no await until it is set: one client per loop
        if held is not None:
            return held[0]
        with self._lock:
            client = self._spare if self._spare is not None else self._make()
            self._spare = None
        closer = _closer(loop, table, weakref.ref(self), client)
        table[self] = (client, closer)
        await anext(closer)  # started in this loop: the loop closes it as it shuts down
        return client

    async def aclose(self) -> None:
        """Close the running loop's client (and the one no loop has used yet); the clients of
        other loops are closed as those loops shut down."""
        loop = asyncio.get_running_loop()
        table: Table | None = getattr(loop, ATTRIBUTE, None) or self._pinned.get(loop)
        held = None if table is None else table.get(self)
        with self._lock:
            spare, self._spare = self._spare, None
        if held is not None:
            await held[1].aclose()  # the closer's end closes the client
        if spare is not None:
            await spare.close()  # it never connected: nothing is bound to a loop

    def _table(self, loop: asyncio.AbstractEventLoop) -> Table:
        """``loop``'s table of clients, made on first use: the loop's attribute, or, for a
        loop that takes none, the one this adapter pins."""
        table: Table | None = getattr(loop, ATTRIBUTE, None)
        if table is not None:
            return table
        pinned = self._pinned.get(loop)
        if pinned is not None:
            return pinned
        table = weakref.WeakKeyDictionary()
        try:
            setattr(loop, ATTRIBUTE, table)
        except (AttributeError, TypeError):  # a loop with no room for it: pinned until closed
            with self._lock:
                closed = [pinned for pinned in self._pinned if pinned.is_closed()]
                gone = [self._pinned.pop(pinned) for pinned in closed]
                table = self._pinned.setdefault(loop, table)
            del gone  # their closers, collected outside the lock (they do not wait)
        return table


async def _closer(
    loop: asyncio.AbstractEventLoop,
    table: Table,
    owner: weakref.ref[LoopClients],
    client: Any,
) -> AsyncGenerator[None, None]:
    """Holds ``client`` in ``loop``'s ``table`` until the loop shuts down (or the adapter is
    closed in it), then closes it there and forgets it. It refers to the adapter weakly: the
    loop, which holds it, does not keep the model alive."""
    try:
        yield
    finally:
        adapter = owner()
        held = None if adapter is None else table.get(adapter)
        if adapter is not None and held is not None and held[0] is client:
            del table[adapter]
        # the close awaits in its own loop; a closer the collector finalizes runs in no loop,
        # and awaiting there is refused (the sockets go with the client)
        if not loop.is_closed() and _running() is loop:
            await client.close()


def _running() -> asyncio.AbstractEventLoop | None:
    """The running event loop, or None (a closer finalized by the collector runs in none)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = ["ATTRIBUTE", "LoopClients"]
