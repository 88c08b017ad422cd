"""How an activation's end is recorded: delivered or failed by the loop, interrupted by the
engine when the loop stopped (a signal, a cancellation, an error), including when the run is
cancelled again while it writes (a second Ctrl-C) or another process holds the store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from morphz.errors import InputError, StoreBusyError, StoreError
from morphz.observe import Observation
from morphz.runtime.refusals import Refusals

if TYPE_CHECKING:
    from morphz.contextdb import Context
    from morphz.runtime.calls import Calls
    from morphz.runtime.engine import ActivationResult
    from morphz.runtime.tools.base import ToolContext

_T = TypeVar("_T")


class Ending:
    """The end of one activation (``result`` says how it ended, once recorded)."""

    def __init__(
        self,
        ctx: Context,
        activation: str,
        tc: ToolContext,
        calls: Calls,
        result: ActivationResult,
        *,
        give_up: threading.Event,
        refusals: Refusals | None = None,
    ) -> None:
        self.ctx, self.activation, self.result = ctx, activation, result
        self.refusals = refusals or Refusals()  # those no reply followed are recorded at the end
        self.tc, self.calls = tc, calls
        # the run's (store/waiting.py GIVE_UP), set when the activation is cancelled again while
        # its interruption is being recorded (a second Ctrl-C), or cancelled as it started: its
        # writes stop waiting for a store another process holds
        self.give_up = give_up

    async def deliver(self, reply: str, text: str, note: str | None) -> None:
        """End the activation delivered with ``text``, the reply of the model_reply ``reply``
        (its ref): it enters the session's inbox as an ``agent_reply`` (no tick), so later
        activations see what the agent told the user and can retire it like anything else,
        in the write that records the end. The reply and the end land together or not at all:
        a process killed between two writes left a reply in the inbox of an activation that
        recovery then recorded interrupted."""
        meta = {"reply": reply, "activation": self.activation}
        await self.finish("delivered", note, (Observation("agent_reply", text, meta=meta),))

    async def interrupted(self, reason: str) -> None:
        """End the activation as interrupted: the work still being written lands first, then
        the results of the calls that ran (never lost with the interruption), then the end.
        Cancelled again meanwhile (a second Ctrl-C), it still waits for its writes, but they
        give up waiting for a store another process holds (:attr:`give_up`): a busy store then
        leaves the activation running, for ``Context.interrupt_orphaned`` to mark, with a
        StoreBusyError that says so (a store that fails otherwise, full or failing, too, with
        its StoreError)."""
        await self.tc.settle(self.give_up.set)
        job = asyncio.ensure_future(self._interrupted(reason))
        failed = await despite_cancellation(job, self.give_up.set)
        if failed is not None and not isinstance(failed, asyncio.CancelledError):
            raise failed

    async def _interrupted(self, reason: str) -> BaseException | None:
        """Record the interruption; what kept it from being recorded is returned, for
        :meth:`interrupted` to raise: the event loop's shutdown (a second Ctrl-C) cancels
        this task too, and a task that ends there with an error is logged with a traceback."""
        try:
            await self._record_interruption(reason)
        except StoreError as exc:  # busy, full, failing: the run's earlier steps stand
            return self._left_running(exc)
        except BaseException as exc:  # raised by interrupted(), not lost
            return exc
        return None

    def _left_running(self, exc: StoreError) -> StoreError:
        """What to raise when ``exc`` kept the interruption from being recorded: what failed
        (not that nothing was changed: the run's prompt and earlier steps were recorded), and
        that the activation is still marked running, with what marks it."""
        unrecorded = type(exc)(
            f"{exc.cause}; activation {self.activation} could not be recorded interrupted, so "
            "it is still marked running (its prompt and the steps recorded before stay in the "
            f"store): `morphz context recover {self.ctx.id}` (Context.interrupt_orphaned) marks "
            "it once this process has ended, as the next exec or chat does"
        )
        unrecorded.__cause__ = exc
        return unrecorded

    def stopped(self, exc: StoreError) -> StoreError:
        """What to raise for ``exc``, a store failure that stopped the run, once the
        interruption was recorded: what failed, and what the store holds of the run (not that
        nothing was changed, as a command of one write would say)."""
        return type(exc)(
            f"{exc.cause}; activation {self.activation} was recorded interrupted, after its "
            f"prompt and the steps recorded before (`morphz context events {self.ctx.id}`)"
        )

    async def _record_interruption(self, reason: str) -> None:
        try:
            self.calls.reclaim()  # results whose write failed after a cancel: recorded now
            await self.calls.record()
        except StoreBusyError:  # the end would wait for the same store: it stays running
            await self.tc.settle(self.give_up.set)
            raise
        except BaseException:  # cancelled again meanwhile: the results being written land
            await self.tc.settle(self.give_up.set)
            await self.finish("interrupted", reason)
            raise
        await self.tc.settle(self.give_up.set)
        await self.finish("interrupted", reason)

    async def finish(
        self, state: str, reason: str | None, observations: Sequence[Observation] = ()
    ) -> None:
        """Record the activation's end, with ``observations`` appended in the same write (a
        delivered reply), then take it as ended: if the record fails, the state stays running,
        so the caller's cleanup (``interrupted``) records it again (without them). Requests no
        reply followed are recorded with the end (the payload's ``unanswered``): those the
        provider refused as too long, which the reason names, and the one being sent when a
        provider error or an interruption ended it (``failed_sent``)."""
        if self.result.state != "running":
            return
        unanswered = self.refusals.unanswered()
        reason = self.refusals.ended(reason)
        finish = partial(
            self.ctx.finish_activation, unanswered=unanswered, observations=observations
        )
        try:
            events = await asyncio.to_thread(finish, self.activation, state, reason)
            self.result.events.extend(e.ref for e in events)
        except InputError:
            # not running any more: its end is recorded already, by an earlier finish of ours
            # whose caller was cancelled as it wrote, or by another process that interrupted it.
            # The record stands, and the result says what it says.
            recorded = await asyncio.to_thread(self._recorded_end)
            if recorded is None:
                raise
            state, reason = recorded
        self.result.state, self.result.reason = state, reason

    def _recorded_end(self) -> tuple[str, str | None] | None:
        """The state and reason this activation's end was recorded with, or None (running)."""
        found = self.ctx.activation(self.activation)
        if found is None or found.finished_seq is None:
            return None
        payload = self.ctx.event(found.finished_seq).payload or {}
        return found.state, payload.get("reason")


async def despite_cancellation(
    start: asyncio.Future[_T], cancelled: Callable[[], object] | None = None
) -> _T:
    """The result of ``start`` (an activation's start or interruption being written), however
    many times the caller is cancelled meanwhile (each time calling ``cancelled``): the write
    lands either way, so what follows it must be recorded."""
    while True:
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError:
            if start.done():
                return start.result()
            if cancelled is not None:
                cancelled()
