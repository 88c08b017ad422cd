"""The engine: activations, the model-tool loop, capacity maintenance (DESIGN §10-§11).

A user message starts an activation whose root request is causally protected until its reply
is delivered. Each step compiles the encoding, calls the model, records its reply and tool calls
as events, runs the tools and records their results as observations (:mod:`morphz.runtime.calls`;
external tool results tick the clock; ``context_tx`` receipts and approvals do not; ``recall``
delivers its own observation), until a reply is delivered or the step limit is reached.

At critical pressure, or after the provider refuses an input as too long, the activation is in
maintenance: only ``context_tx`` and ``recall`` are offered, and pressure is measured again after
each step; work resumes when the request with the external tools would be below the warning level
(below critical when even an empty context's work request, :mod:`morphz.runtime.floor`, is at
warning; pressure never starts maintenance when that request is at critical). The
mode is decided before the encoding a request carries is final, so its kernel states the mode of
the request, and its pressure figure counts the work tool set (in maintenance: the pressure that
resuming work would meet). When what the whole request sends exceeds the hard limit, the model is
shown a batch of the inbox (so a batch always leaves something out), measured on exactly what it
sends: the root request, what the activation's steps produced (only the previous step's when all of
it does not fit), protected observations, then the oldest that fit. When even the previous step's
results do not all fit, the batch holds the root and the protected observations, then as many of
those results as fit (first, in their order), then the oldest; only when the root and the
protected observations alone cannot fit does the activation fail, with a recorded reason. The
figure counts what the adapters send beside the encoding (their system preamble and message
framing), and a request asks for no more output than its budget leaves in the model's window
above the hard limit.

With ``RuntimeConfig.delta`` (ContextDelta) each request of an activation is the previous one plus
an increment (:mod:`morphz.runtime.requests`); every request carries its cache layout
(:mod:`morphz.encoding.blocks`), anchored on the last request answered in the session. Several
activations may run at once (asyncio); the database work runs in threads and every commit meets
the rebase rules.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz import owners
from morphz.capacity import Budget, budget_over
from morphz.encoding.compile import Encoding
from morphz.encoding.options import EncodeOptions
from morphz.encoding.prefix import PrefixMeter, request_text
from morphz.encoding.tokens import Calibration, Counter, count, exact_counter
from morphz.errors import StoreBusyError, StoreError
from morphz.runtime.ending import despite_cancellation
from morphz.runtime.floor import Floors, store_folder
from morphz.runtime.models.base import Model, ModelRequest
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.requests import FRAMING, Answered
from morphz.runtime.run_config import Approver, RuntimeConfig, check_run
from morphz.runtime.stepping import ActivationResult, Run
from morphz.runtime.tools.base import ApprovalEnded, ToolRegistry, thread_job
from morphz.store.waiting import GIVE_UP

if TYPE_CHECKING:
    from morphz.contextdb import Context


class Engine:
    """Runs activations of one context with one model and a tool registry."""

    def __init__(
        self, ctx: Context, model: Model, tools: ToolRegistry, config: RuntimeConfig
    ) -> None:
        self.ctx = ctx
        self.model = model
        self.tools = tools
        self.config = config
        self.calibration: Calibration = ctx.calibration(model.name)  # what earlier runs learned
        self.counter: Counter | None = exact_counter(model.name) if config.exact_tokens else None
        self._runs = 0  # activations running on this engine now (see _take_counter)
        self.meter = PrefixMeter()  # every request this engine sent, across activations
        # per session, the last request a provider answered (its text and cache layout): each
        # new request sequence (an activation, a batch, a new seed after a refusal) anchors its
        # first layout on it. Activations share one event loop and no await falls between
        # reading and writing an entry, so concurrent ones never see half an update.
        self.answered: Answered = {}
        # the local time each request states (the kernel's local-time, the end of the session
        # window): the store's clock (morphz.open(now=...)), which times the events it shows
        self.clock: Callable[[], str] = ctx.db.local_time
        self.measured = Floors(store_folder(ctx))

    def options(
        self, session: str, *, batch: bool = False, maintenance: bool = False, **fields: Any
    ) -> EncodeOptions:
        """How this engine compiles for ``session``: its model, clock, authority (the tools of
        ``maintenance`` or work), budget and token figures, counting what the adapters send
        beside the encoding (the system preamble, the framing of both messages) and the schemas
        of the tools a request offers (the maintenance set for a ``batch`` or a maintenance
        request measured as sent, else the work set, with the work kernel's authority entries a
        maintenance kernel lacks: a maintenance figure is never below the work request that
        put the activation in maintenance); ``fields`` add the activation's own."""
        tools = self.tools.offered(maintenance=batch)
        authority = self.tools.authority(maintenance or batch)
        parts = [PREAMBLE, *(t.schema.text for t in tools)]
        if maintenance and not batch:  # the work kernel's authority too: what resuming sends
            withdrawn = sorted(self.tools.authority(False).items() - authority.items())
            parts.append("".join(f" ({k} {v})" for k, v in withdrawn))
        return EncodeOptions(
            session=session,
            model=self.model.name,
            local_time=self.clock(),
            bindings={"workspace": str(self.config.workspace)},
            profile=self.config.profile,
            authority=authority,
            budget=self.config.budget,  # None: the one stored in the compile's snapshot
            budget_keys=self.config.budget_keys,
            calibration=self.calibration,
            counter=self.counter,
            extra_parts=tuple(part for part in parts if part),
            framing=FRAMING,
            **fields,
        )

    def budget(self) -> Budget | None:
        """What requests are measured against: ``config.budget_keys`` (a configuration's
        ``[budget]`` table) over ``config.budget`` or else the context's stored budget, read
        again for each request, so `morphz context budget` applies to a running chat. None
        (neither given): each compile reads the stored budget in its own snapshot."""
        keys = self.config.budget_keys
        if not keys:
            return self.config.budget
        return budget_over(self.config.budget or self.ctx.budget(), keys)

    def floors(self) -> tuple[int, int]:
        """The figures of this engine's smallest work and maintenance requests (an empty
        context's encoding with the tools each sends, :mod:`morphz.runtime.floor`): the first
        decides when work resumes (capacity.resume_below), the second is what the `budget`
        refusal of the agent's commits counts beside the frames."""
        work, maintenance = (self.options("default", batch=m, maintenance=m) for m in (False, True))
        return self.measured.get(work, False), self.measured.get(maintenance, True)

    def floor(self, maintenance: bool) -> int:
        """The figure of this engine's smallest work (or ``maintenance``) request under its
        calibration as it is now: measured once (:meth:`floors`, as an activation starts), then
        derived without compiling, since every provider report changes the calibration. An
        activation reads it at each step (when work resumes) and at each commit of the agent
        (the `budget` refusal), so both meet the figures its requests are measured with."""
        known = self.measured.derived(maintenance, self.calibration, self.counter)
        return self.floors()[1 if maintenance else 0] if known is None else known

    def profile_tokens(self) -> int | None:
        """The tokens of the bound profile, counted as requests count them (None: no profile):
        what the `budget` refusal of the agent's commits names when the smallest request is past
        critical with no frame in view and the profile is at least half of it."""
        profile = self.config.profile
        return None if profile is None else count([profile], self.calibration, self.counter).tokens

    def sent_tokens(self, text: str, schemas: list[str]) -> int:
        """The tokens of a request sending ``text`` with the tool ``schemas``, counted as the
        pressure figure counts them (the preamble and framing in, the figures' slack out)."""
        counted = count([PREAMBLE, text, *schemas], self.calibration, self.counter)
        return counted.tokens + FRAMING

    def counted(self, encoding: Encoding) -> int:
        """``encoding``'s tokens with the parts its figure counts beside it (the preamble, the
        tool schemas), counted as :meth:`sent_tokens` counts a request: the figures' slack out."""
        parts = [encoding.text, *encoding.options.extra_parts]
        return count(parts, self.calibration, self.counter).tokens + encoding.options.framing

    def measure(self, request: ModelRequest) -> dict[str, int | None]:
        """Record ``request`` as sent: its bytes as a provider's cache sees them (tool schemas,
        then the encoding) and how many of them began the previous request this engine sent
        (None for its first): the prefix-reuse meter of the run."""
        text = request_text(request.encoding, [t.text for t in request.tools])
        before = self.meter.reused
        share = self.meter.add(text)
        sent = self.meter.previous or b""  # the bytes the meter just kept: not encoded again
        return {"bytes": len(sent), "prefix": None if share is None else self.meter.reused - before}

    def encoding(self, session: str = "default") -> Encoding:
        """The encoding a request in ``session`` would carry now, outside any activation: what
        ``morphz chat``'s /encoding shows."""
        return self.ctx.encode(self.options(session))

    async def run(
        self, prompt: str, *, session: str = "default", objective: str | None = None
    ) -> ActivationResult:
        """One activation: the user message ``prompt`` in ``session``, until a reply."""
        check_run(prompt, session, objective)
        goal = (objective or prompt[:200]).strip() or None
        self._take_counter()
        self._runs += 1
        try:
            return await self._run(prompt, session, goal)
        finally:
            self._runs -= 1

    def _take_counter(self) -> None:
        """The exact tokenizer that had not arrived when this engine was made (tiktoken still
        fetching its encoding), taken once it has, as an activation starts while no other runs
        here: every figure of one activation (its pressure, a refusal's ceiling) is counted
        one way."""
        if self.counter is None and self.config.exact_tokens and not self._runs:
            self.counter = exact_counter(self.model.name, wait=0.0)
            if self.counter is not None:  # the floors were counted with estimates
                self.measured = Floors(store_folder(self.ctx))

    async def _run(self, prompt: str, session: str, goal: str | None) -> ActivationResult:
        await asyncio.to_thread(self.floors)  # measured here, so each step's floor is derived
        give_up = threading.Event()  # set: the run's writes stop waiting for a busy store
        token = GIVE_UP.set(give_up)  # the run's threads inherit it, the start's too
        try:
            root, act = await self._start(session, prompt, goal, give_up)
        except BaseException:
            GIVE_UP.reset(token)
            raise
        objective = goal or "answer the user"
        run = Run(self, act, session, root.seq, objective, give_up=give_up)
        run.result.events.append(root.ref)
        try:
            return await self._loop(run)
        finally:  # however it ended, this process no longer runs it (its end may be unrecorded)
            GIVE_UP.reset(token)
            owners.untrack(act)

    async def _start(
        self,
        session: str,
        prompt: str,
        goal: str | None,
        give_up: threading.Event,
    ) -> tuple[ev.Event, str]:
        """Write the user message and the activation that protects it, in one transaction.
        Cancelled meanwhile (Ctrl-C), it gives up waiting for a store another process holds
        (nothing is written then, and the cancellation goes on with a note saying so); a start
        that landed is recorded ended ("cancelled as it started") before the cancellation
        goes on."""
        start = thread_job(self.ctx.begin_activation, session, prompt, goal)
        try:
            return await asyncio.shield(start)
        except asyncio.CancelledError as cancel:
            try:
                root, act = await despite_cancellation(start, give_up.set)
            except StoreBusyError as busy:
                cancel.add_note(f"morphz: {busy.message}; the activation was not started")
                raise cancel from None
            objective = goal or "answer the user"
            cancelled = Run(self, act, session, root.seq, objective, give_up=give_up)
            await asyncio.shield(cancelled.end.finish("interrupted", "cancelled as it started"))
            raise

    async def _loop(self, run: Run) -> ActivationResult:
        try:
            await run.loop()
        except ApprovalEnded as exc:  # the person's input ended at an approval prompt
            await run.end.interrupted(exc.message)
            raise
        except Exception as exc:  # a bug or an unexpected error of the model: say which
            said = f"an unexpected error stopped the activation: {type(exc).__name__}: {exc}"
            await run.end.interrupted(said[:2000])
            if isinstance(exc, StoreError):  # it failed one write of several: say what stands
                raise run.end.stopped(exc) from exc
            raise
        except BaseException as exc:
            try:
                await run.end.interrupted("the process stopped mid-activation")
            except StoreError as unrecorded:  # the stop is what to report, with this
                exc.add_note(unrecorded.message)
            raise
        return run.result


__all__ = ["ActivationResult", "Approver", "Engine", "RuntimeConfig"]
