"""A reply's tool calls run (DESIGN §11): each call refused before its tool runs (unknown,
withdrawn in maintenance, arguments malformed or invalid, not approved) or run guarded; an
``ask`` tool's approval asked and recorded (the request as an event, the answer as an
observation); each outcome kept as its call ends and staged in the store in a write of its
own (:mod:`morphz.staging`: a killed process's recovery records it), then all of them recorded
as one batch of results (:mod:`morphz.runtime.outcomes`), which deletes the staged rows in the
same write, also when the activation is interrupted.
"""

from __future__ import annotations

import asyncio
from asyncio import Future
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz import staging
from morphz.errors import MorphzError
from morphz.ids import ref_seq
from morphz.observe import Observation
from morphz.runtime.models.base import ToolCall
from morphz.runtime.outcomes import Ran, result_batch, result_of
from morphz.runtime.replies import stopped_call
from morphz.runtime.tools.base import (
    ArgumentError,
    Tool,
    ToolContext,
    ToolOutcome,
    parse_arguments,
    result_json,
    run_guarded,
    valid_text,
)

if TYPE_CHECKING:
    from morphz.runtime.engine import Engine


class Calls:
    """The tool calls of one activation: runs them and records their outcomes. ``events``:
    the activation's list of the refs of the events it made, which this extends."""

    def __init__(self, engine: Engine, tc: ToolContext, session: str, events: list[str]) -> None:
        self.e = engine
        self.tc = tc
        self.session = session
        self.events = events
        self.ran: list[Ran] = []  # the calls of the current reply that ended, not yet recorded
        self.reply = 0  # the seq of the current reply (its model_reply event)
        # the writes staging the outcomes of the current reply's calls, by position: each True
        # when it staged its row (see staging.stage), read once they have ended
        self.staged: dict[int, Future[bool]] = {}
        # a results write its caller was cancelled from, with what it writes (see reclaim)
        self.writing: tuple[list[Ran], Future[Any]] | None = None

    async def run_reply(
        self, reply: str, calls: Sequence[ToolCall], note: str | None, maintenance: bool
    ) -> None:
        """Run the ``calls`` of the reply ``reply`` (its event's ref) in order and record their
        outcomes. ``note``: why the response did not end as meant (a cut or a provider's stop):
        its last call is then not run, and its result says why."""
        self.reply, self.staged = ref_seq(reply), {}
        *whole, last = calls  # a cut or stopped response's last call: partial?
        for position, call in enumerate(whole):  # each outcome kept (and staged) as it ends
            await self.ended(Ran(position, call, *await self.run(position, call, maintenance)))
        if note:
            outcome: tuple[Tool | None, ToolOutcome] = (None, stopped_call(last, note))
        else:
            outcome = await self.run(len(whole), last, maintenance)
        await self.ended(Ran(len(whole), last, *outcome))
        await self.record()

    async def ended(self, ran: Ran) -> None:
        """Keep the outcome of a call that ended (an interruption records it), and stage it in
        the store (a killed process's recovery records it). A failed staging write raises (the
        outcome is kept: the interruption that follows records it)."""
        self.ran.append(ran)
        result = result_of(ran)
        if result is None:  # its tool appended its result itself
            return
        stage = partial(staging.stage, self.e.ctx, self.session, self.tc.activation, self.reply)
        job = self.tc.start_thread(stage, result)
        self.staged[ran.position] = job
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:  # the write goes on in its thread: settle waits for it
            self.tc.cancelled.set()
            raise

    async def run(
        self, position: int, call: ToolCall, maintenance: bool
    ) -> tuple[Tool | None, ToolOutcome]:
        """The call's outcome; ``ran`` is False for a call refused before its tool ran (unknown,
        withdrawn in maintenance, malformed arguments, not approved): no real tool result."""
        tool: Tool | None = None
        try:
            tool = self.e.tools.get(call.name)
            if tool.external and maintenance:
                return tool, ToolOutcome(
                    f"{call.name} is withdrawn during maintenance: only context_tx and recall "
                    "are available until your commits bring pressure below warning (the "
                    "kernel's pressure level; critical if even an empty context is at warning)",
                    error=True,
                    ran=False,
                )
            args = parse_arguments(call.name, call.arguments)
            tool.check_arguments(args)  # a call that can never run is refused, never asked about
            if not await self._authorised(tool, call, args):
                return tool, ToolOutcome(f"{call.name} was not approved", error=True, ran=False)
        except MorphzError as exc:
            said = result_json({"ok": False, "error": exc.to_dict()})
            return tool, ToolOutcome(said, error=True, ran=False)
        try:
            return tool, await run_guarded(tool, args, replace(self.tc, call=valid_text(call.id)))
        except (asyncio.CancelledError, KeyboardInterrupt):  # stopped while the tool ran
            if tool.external:  # its effect (the workspace) is nowhere else in the context;
                # context_tx and recall record their own events, which show what landed
                self.ran.append(Ran(position, call, tool, _stopped_while_running(call.name)))
            raise
        except MorphzError as exc:  # the tool refused: its arguments (it never ran) or its work
            said = result_json({"ok": False, "error": exc.to_dict()})
            return tool, ToolOutcome(said, True, ran=not isinstance(exc, ArgumentError))

    async def _authorised(self, tool: Tool, call: ToolCall, args: dict[str, Any]) -> bool:
        if tool.policy == "allow":
            return True
        if tool.policy == "deny":
            return False
        request = {"tool": tool.name, "arguments": args, "call": valid_text(call.id)}
        request["activation"] = self.tc.activation  # recovery: asked, and never answered
        asked = await self.tc.in_thread(
            self.e.ctx.record, ev.APPROVAL_REQUEST, None, payload=request, session=self.session
        )
        approver = self.e.config.approver
        decision = await approver(tool, args) if approver else self.e.config.ask_default
        answer = Observation(
            "approval_result",
            f"{tool.name}: {'approved' if decision else 'denied'}",
            meta={"request": asked.ref, "approved": decision, "tool": tool.name},
        )
        result = await self.tc.in_thread(
            self.e.ctx.observe_batch, [answer], session=self.session, activation=self.tc.activation
        )
        self.events.extend([asked.ref, result[0].ref])
        return decision

    def reclaim(self) -> None:
        """After the work in flight settled: the results of a write whose caller was cancelled
        and which then failed (rolled back) are pending again, for the interruption to record;
        one that landed, or has not ended, is left as it is."""
        if self.writing is None:
            return
        ran, job = self.writing
        self.writing = None
        if _failed(job):
            self.ran = ran + self.ran

    async def record(self) -> None:
        """Record the outcomes of the calls that ended (:attr:`ran`) as one batch of results:
        the reply's, or when the activation is interrupted, those of the calls that ran before
        (a batch that ticks at most once, and only for a real external tool result). It runs
        once the writes staging them have ended (``run_reply`` awaits each; an interruption
        settles first), and deletes their staged rows in its own write."""
        ran, self.ran = self.ran, []  # taken first: never recorded twice
        batch = result_batch(ran)
        if batch.results:
            outcomes = [(r, self._was_staged(r.position)) for r in batch.results]
            ctx, activation = self.e.ctx, self.tc.activation
            job = self.tc.start_thread(
                staging.record, ctx, self.session, activation, self.reply, outcomes
            )
            try:
                events = await asyncio.shield(job)
            except asyncio.CancelledError:  # the write goes on in its thread: it may land
                self.tc.cancelled.set()
                self.writing = (ran, job)
                raise
            except BaseException:  # it failed and rolled back: an interruption records them
                self.ran = ran + self.ran
                raise
            self.events.extend(batch.delivered)
            self.events.extend(e.ref for e in events)
        else:
            self.events.extend(batch.delivered)

    def _was_staged(self, position: int) -> bool:
        """Whether the outcome of the call at ``position`` was staged (its write ended having
        written the row; one that failed rolled back, one that found the activation ended
        wrote nothing)."""
        job = self.staged.get(position)
        if job is None or not job.done() or job.cancelled() or job.exception() is not None:
            return False
        return bool(job.result())


def _failed(job: Future[Any]) -> bool:
    """Whether ``job`` (a results write) ended by failing: it rolled back, nothing landed."""
    return job.done() and not job.cancelled() and job.exception() is not None


def _stopped_while_running(name: str) -> ToolOutcome:
    """The result of a call whose tool was running when the activation was stopped: its work
    may have landed (the engine waits for it before recording this), so the context says so."""
    return ToolOutcome(
        f"{name} was interrupted while it ran: its effect may have happened; check before "
        "running it again",
        error=True,
    )


__all__ = ["Calls"]
