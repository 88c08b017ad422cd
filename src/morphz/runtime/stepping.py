"""One activation while it runs (DESIGN §10-§11): its steps (compile, request, record the reply,
run the tools), the mode it is in (work or maintenance), the maintenance batch it is shown when
the whole request does not fit, what a provider's too-long refusals taught it, and how it ends.
:mod:`morphz.runtime.engine` starts activations and owns what they share (the model, the tools,
the counting); its docstring tells the whole loop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz.capacity import resume_below, select_batch
from morphz.encoding.compile import Encoding
from morphz.encoding.tokens import estimate_tokens
from morphz.ids import ref_seq
from morphz.runtime import batches
from morphz.runtime.calls import Calls
from morphz.runtime.costs import output_tokens
from morphz.runtime.ending import Ending
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ProviderError,
)
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.refusals import Refusals
from morphz.runtime.replies import cut_kind, reply_payload, stop_note, whole
from morphz.runtime.requests import FRAMING, MESSAGE_TOKENS, RequestSequence
from morphz.runtime.tools.base import ToolContext, valid_text

if TYPE_CHECKING:
    from morphz.runtime.engine import Engine


@dataclass(slots=True)
class ActivationResult:
    activation: str
    session: str
    state: str  # delivered, failed or interrupted
    reply: str | None
    steps: int
    events: list[str] = field(default_factory=list)  # refs of the events this activation made
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "activation": self.activation,
            "session": self.session,
            "state": self.state,
            "reply": self.reply,
            "steps": self.steps,
            "events": self.events,
            "reason": self.reason,
        }


class Run:
    """The state of one activation while it runs."""

    def __init__(
        self,
        engine: Engine,
        activation: str,
        session: str,
        root: int,
        objective: str,
        *,
        give_up: threading.Event,
    ) -> None:
        self.e = engine
        self.activation = activation
        self.session = session
        self.root = root
        self.objective = objective
        self.maintenance = False
        self.refusals = Refusals()  # what too-long refusals taught (a ceiling)
        self.result = ActivationResult(activation, session, "running", None, 0)
        self._pending_failure = "even the minimum maintenance request does not fit"
        self.produced: set[int] = set()  # the observations this activation's steps produced
        self.previous: set[int] = set()  # ... the previous step
        config = engine.config
        self.requests = RequestSequence(
            engine.answered, session, delta=config.delta, messages=config.delta_messages
        )
        self.tc = ToolContext(
            engine.ctx,
            session,
            activation,
            engine.config.workspace,
            engine.config.protected_paths,
            engine.config.budget,
            engine.config.budget_keys,
            engine.calibration,
            partial(engine.floor, True),  # read at each commit: the calibration changes
            engine.profile_tokens,  # (so is the profile's share of it)
        )
        self.calls = Calls(engine, self.tc, session, self.result.events)
        self.end = Ending(
            engine.ctx,
            activation,
            self.tc,
            self.calls,
            self.result,
            give_up=give_up,
            refusals=self.refusals,
        )

    # -- the loop

    async def loop(self) -> None:
        config = self.e.config
        for step in range(config.step_limit):
            self.result.steps = step + 1
            request = await self._request()
            if request is None:
                return
            # measured as it is sent: with concurrent activations on one engine, replies come
            # back in another order than their requests went out
            sent: dict[str, object] = {**self.e.measure(request)}
            if config.delta:
                sent["delta"] = self.requests.kind
            self.refusals.sending(sent)  # no reply recorded: the activation's end records it
            try:
                response = await self.e.model.request(request)
            except ContextTooLongError as exc:
                piled = self.requests.kind == "increment"
                self._refused(request, valid_text(exc.message[:1000]), piled, sent)
                if piled:  # first a fresh seed, still working: the increments piled up
                    self.requests.restart("too-long")
                else:
                    self.maintenance = True
                continue
            except ProviderError as exc:
                said = valid_text(exc.message)  # a provider's words may hold lone surrogates
                await self.end.finish("failed", f"model provider error ({exc.code}): {said}")
                return
            self.requests.answered(request)
            # first: whatever its usage says, it is kept, with those refused before it (they
            # left no event)
            await self._record(response, self.refusals.answered(sent))
            await self._calibrate(request, response)
            if await self._handle(response):
                return
        await self.end.finish("failed", f"the step limit ({config.step_limit}) was reached")

    def _refused(
        self, request: ModelRequest, said: str, piled: bool, sent: dict[str, object]
    ) -> None:
        """Learn from a too-long refusal of ``request`` (``sent``, as measured): from now on
        this activation keeps its requests below the share of it the provider said it would
        take (:mod:`morphz.runtime.refusals`)."""
        figure = self.e.sent_tokens(request.encoding, [t.text for t in request.tools])
        self.refusals.learn(figure, said, piled, dict(sent))

    def _measured(self, encoding: Encoding) -> tuple[int, int]:
        """``encoding``'s tokens and the most it may have: its figure and the hard limit, or
        counted as a refused request is (:meth:`Engine.counted`) and a refusal's ceiling."""
        hard, counted = encoding.pressure.budget.hard, partial(self.e.counted, encoding)
        return self.refusals.measure(encoding.tokens, hard, counted)

    def _within(self, encoding: Encoding) -> bool:
        """Whether ``encoding`` is within the hard limit and a refusal's ceiling."""
        tokens, limit = self._measured(encoding)
        return tokens <= limit

    def _over_ceiling(self, text: str) -> bool:
        """Whether sending ``text`` (with this mode's tools) is above what a provider refused."""
        schemas = [t.schema.text for t in self.e.tools.offered(self.maintenance)]
        return self.refusals.above(lambda: self.e.sent_tokens(text, schemas))

    async def _fits(self, encoding: Encoding) -> bool:
        """Whether ``encoding`` may be sent whole: what it sends within the hard limit and, after
        a refusal, below the ceiling (with the tools this mode offers, as the refused request was
        counted). In maintenance its figure counts the work tools, which are not sent: above the
        hard limit it is measured again as sent, as a batch is, so a batch is only sent when the
        whole request does not fit (and then leaves something out)."""
        if encoding.tokens > encoding.pressure.budget.hard:
            if not self.maintenance:
                return False
            sent = await self._encode(True, as_sent=True)
            if sent.tokens > sent.pressure.budget.hard:
                return False
        if not self.refusals.above(lambda: encoding.tokens):
            return True
        return not self._over_ceiling(encoding.text)

    async def _request(self) -> ModelRequest | None:
        encoding = await self._decide()
        if not await self._fits(encoding):
            batch = await self._batch(encoding)
            if batch is None:
                await self.end.finish("failed", self._pending_failure)
                return None
            encoding, self.maintenance = batch, True  # a batch is a maintenance request
        tools = tuple(t.schema for t in self.e.tools.offered(self.maintenance))
        text, layout = self.requests.next(encoding, self.maintenance, self._over_ceiling)
        output = output_tokens(self.e.config.max_output_tokens, encoding.pressure.budget)
        return ModelRequest(text, tools, (), output, layout)

    async def _decide(self) -> Encoding:
        """The encoding of this step, compiled in the mode it is sent in: one compile unless the
        mode changes. Work gives way to maintenance at critical pressure; maintenance gives way
        to work when the request with the external tools is back below warning (the figure
        counts them in both modes, see :meth:`_encode`), or below critical where even an empty
        context's request is at warning (capacity.resume_below)."""
        encoding = await self._encode(self.maintenance)
        # the floor under the calibration the encoding was counted with: the provider's usage
        # after every reply changes it, so a floor measured as the activation started is stale
        resume = resume_below(encoding.pressure.budget, self.e.floor(False))
        if not self.maintenance:
            if encoding.pressure.level != "critical" or resume is None:
                return encoding  # None: maintenance could not bring pressure down
            self.maintenance = True
            return await self._encode(True)
        # the maintenance figure counts the work tools: it is what resuming would send
        if not self._resumes(encoding, resume):
            return encoding  # not yet: pressure, or no smaller than what the provider refused
        work = await self._encode(False)
        if not self._resumes(work, resume):  # another session added to the context meanwhile
            return encoding
        self.maintenance = False  # room again: external tools come back
        return work

    def _resumes(self, encoding: Encoding, below: int | None) -> bool:
        """Whether work may resume with ``encoding`` (counting the work tools): its figure under
        ``below`` (None: any), within the hard limit and a refusal's ceiling."""
        return (below is None or encoding.tokens < below) and self._within(encoding)

    async def _encode(
        self, maintenance: bool, only: frozenset[int] | None = None, *, as_sent: bool = False
    ) -> Encoding:
        """Compile in ``maintenance`` or work mode. The pressure figure counts the schemas of the
        work tool set even in maintenance: it is then the pressure of the request that resuming
        work would send (at least the request sent), the figure that decides resuming. A batch
        (``only``), and with ``as_sent`` the whole, is measured on exactly what it sends, since
        it must fit the hard limit."""
        options = self.e.options(
            self.session,
            batch=only is not None or as_sent,
            maintenance=maintenance,
            activation=self.activation,
            objectives=(self.objective,),
            scheduling=self._scheduling(maintenance),
            only_observations=only,
        )
        return await asyncio.to_thread(self.e.ctx.encode, options)

    def _scheduling(self, maintenance: bool) -> dict[str, str]:
        """The kernel's scheduling facts: the mode, and after a too-long refusal the tokens a
        request must stay under. A batch's compile adds how many of the active observations its
        inbox shows, counted in the snapshot it shows (encoding.compile)."""
        return {"mode": "maintenance" if maintenance else "work", **self.refusals.facts()}

    # -- a maintenance batch

    async def _batch(self, full: Encoding) -> Encoding | None:
        """The maintenance request that shows the minimum (:meth:`_minimum`), then the optional
        observations that fit within the hard limit and a refusal's ceiling (those it offers
        first, then the oldest); None when even the minimum does not fit (the reason is kept).
        ``full``: the whole request, which does not fit."""
        found = await self._minimum(full)
        if found is None:
            return None
        must, minimum, first = found
        tokens, limit = self._measured(minimum)
        factor = self.e.calibration.factor if self.e.calibration.samples else 1.0
        chosen = batches.choose(full, must, limit - tokens, factor, first=first)
        encode, room = partial(self._encode, True), limit - tokens
        return await batches.fit(encode, minimum, must, chosen, room=room, fits=self._within)

    async def _minimum(self, full: Encoding) -> tuple[frozenset[int], Encoding, list[int]] | None:
        """The observations every batch shows, their request as compiled, and the optional ones
        offered first. The minimum holds the current request (the activation's root) and its
        causal dependencies, which are everything this activation's steps produced that is
        still active, and the protected ones. When those do not fit (:meth:`_measured`), what
        the previous step produced stands for the dependencies (so the agent can still act; the
        others keep their state); when even that does not fit, the minimum is the root and the
        protected ones, and the previous step's results are offered first, in their order, so
        the batch shows as many as fit. None when even that does not fit, with the reason kept."""
        inbox = full.state.observations
        present = {o.seq for o in inbox}
        tried: list[frozenset[int]] = []
        for produced in (self.produced, self.previous, set()):
            required = ({self.root} | produced) & present
            must = frozenset(o.seq for o in inbox if o.seq in required or o.protected)
            if must in tried:
                continue
            tried.append(must)
            minimum = await self._encode(True, must)
            floor = select_batch([], *self._measured(minimum), set())  # the minimum alone
            if floor.fits:
                first = [o.seq for o in inbox if o.seq in self.previous and o.seq not in must]
                return must, minimum, first
        if self._try_smallest(minimum):
            if must >= present:  # it leaves nothing out: the whole request, not a batch
                minimum = await self._encode(True, as_sent=True)
            return must, minimum, []
        refusal = None if self.refusals.ceiling is None else self.refusals.said
        keys = self.e.config.budget_keys
        self._pending_failure = batches.floor_reason(
            floor, minimum, keys, refusal, self.root, context=self.e.ctx.id
        )
        return None

    def _try_smallest(self, minimum: Encoding) -> bool:
        """Whether the smallest request, ``minimum``, is sent although the ceiling is below it:
        once, when the provider's refusals stated no numbers (the ceiling, a quarter less, is a
        guess) and it is smaller than every request refused and within the hard limit."""
        if minimum.tokens > minimum.pressure.budget.hard:
            return False
        return self.refusals.try_smallest(self.e.counted(minimum))

    async def _calibrate(self, request: ModelRequest, response: ModelResponse) -> None:
        """Learn from the input tokens the provider reported, kept with the context so the next
        engine (another process, a restart) starts calibrated: the sample is applied to the
        calibration as stored, in one write (other engines of the model learn too), and this
        engine then counts with the result. The texts' estimate is compared with the report
        less the framing, which figures add uncalibrated. A report that is no whole number
        (1500.0, None, text: an adapter of one's own) teaches nothing, as 0 does."""
        reported = None if response.usage is None else whole(response.usage.input_tokens)
        if reported is None:
            return
        texts = [PREAMBLE, request.encoding, *(t.text for t in request.tools)]
        estimated = sum(estimate_tokens(text) for text in texts)
        turns = len(request.layout.turns) if request.layout is not None else 0
        framing = FRAMING + MESSAGE_TOKENS * turns  # the seed's message is in FRAMING
        reported = max(0, reported - framing)  # 0: nothing to learn
        stored = await asyncio.to_thread(
            self.e.ctx.calibrate, self.e.model.name, estimated, reported
        )
        self.e.calibration.follow(stored)

    # -- one response

    async def _record(self, response: ModelResponse, sent: dict[str, object]) -> None:
        """Record the response as a ``model_reply`` event, with what its request ``sent``: from
        then on, the end no longer records that request or the refused ones before it."""
        text = None if response.text is None else valid_text(response.text)
        payload = reply_payload(self.activation, response, sent)

        def record() -> ev.Event:
            event = self.e.ctx.record(ev.MODEL_REPLY, text, payload=payload, session=self.session)
            self.refusals.recorded()  # in the write's thread: it landed, even if we were cancelled
            return event

        reply = await self.tc.in_thread(record)
        self.result.events.append(reply.ref)

    async def _handle(self, response: ModelResponse) -> bool:
        """Act on the response just recorded; True when the activation is over."""
        reply, start = self.result.events[-1], len(self.result.events)
        note = stop_note(response)
        if not response.tool_calls:
            if response.text is None or not response.text.strip():
                said = "the model returned neither a reply (empty or only blanks) nor tool calls"
                if note:
                    raise_it = cut_kind(response) == "output-limit"
                    said += f": {note}" + (" (raise max_output_tokens)" if raise_it else "")
                await self.end.finish("failed", said)
                return True
            self.result.reply = valid_text(response.text)
            await self.end.deliver(reply, self.result.reply, note)
            return True
        await self.calls.run_reply(reply, response.tool_calls, note, self.maintenance)
        self.previous = {ref_seq(ref) for ref in self.result.events[start:]}
        self.produced |= self.previous
        return False
