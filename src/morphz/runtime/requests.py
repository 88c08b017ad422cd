"""What each request of an activation sends (DESIGN §9): the encoding, or with ContextDelta the
previous request plus an increment, and its cache layout (:mod:`morphz.encoding.blocks`).

With ContextDelta a new tool set (work and maintenance), a batch, an increment that would raise
the pressure level above the fresh encoding's (or reach critical) and a too-long refusal of piled
increments each start a new seed. Every layout is anchored on the request before it
(:meth:`CacheLayout.anchored`): within a sequence on the one the sequence sent before, and the
first of a sequence (a new activation's, a batch's, the seed after a refusal), like every layout
without ContextDelta, on the last request a provider answered in the session, which the engine
keeps across activations. So each request marks where the previous one stored its prefix when
it still shares it, even when more than a provider looks back arrived in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from morphz.encoding.blocks import CacheLayout, PlainLayouts
from morphz.encoding.compile import Encoding
from morphz.encoding.delta import DeltaEncoder
from morphz.runtime.models.base import ModelRequest

MESSAGE_TOKENS = 4  # what a chat format adds around one message (role and delimiters)
# every request's framing: the system message (the adapters' PREAMBLE) and the message the
# encoding, or its ContextDelta seed, travels in (each increment adds its own, see DeltaEncoder)
FRAMING = 2 * MESSAGE_TOKENS

Answered = dict[str, tuple[str, CacheLayout]]  # session -> the last request a provider answered
# the sessions whose last answered request an engine keeps, the most recently answered (a request
# can be hundreds of KB, and a provider keeps a cached prefix for minutes only)
KEPT_SESSIONS = 32


class RequestSequence:
    """The requests of one activation in ``session``, anchored on ``answered`` (the engine's)."""

    def __init__(self, answered: Answered, session: str, *, delta: bool, messages: bool) -> None:
        """``delta``: ContextDelta; ``messages``: each increment in a message of its own."""
        self._answered, self.session = answered, session
        self.delta, self.messages = delta, messages
        self._encoder = self._new()
        self._shape: tuple[bool, frozenset[int] | None] | None = None  # of the last request
        self.kind: str | None = None  # ContextDelta: "increment", or why it was a seed
        self._cause: str | None = None  # why the engine started a new request sequence

    def _new(self) -> DeltaEncoder:
        """A new ContextDelta sequence; increments sent as messages of their own cost their
        framing too."""
        previous = self._answered.get(self.session)
        return DeltaEncoder(MESSAGE_TOKENS if self.messages else 0, previous)

    def restart(self, cause: str) -> None:
        """Send a new seed next, for ``cause`` (a too-long refusal of piled increments)."""
        self._encoder, self._shape, self._cause = self._new(), None, cause

    def next(
        self, encoding: Encoding, maintenance: bool, too_long: Callable[[str], bool] | None = None
    ) -> tuple[str, CacheLayout]:
        """What the model is sent for ``encoding`` (compiled in ``maintenance`` or work mode),
        and its cache layout: the encoding, or with ContextDelta the previous request plus an
        increment. A new tool set or a batch starts a new seed, and so does an increment that
        would raise the pressure level (:class:`DeltaEncoder`), or one that ``too_long`` says a
        provider already refused requests of that size (the fresh seed was checked for it)."""
        text, layout = self._next(encoding, maintenance)
        if self.kind == "increment" and too_long is not None and too_long(text):
            self.restart("too-long")
            text, layout = self._next(encoding, maintenance)
        return text, layout

    def _next(self, encoding: Encoding, maintenance: bool) -> tuple[str, CacheLayout]:
        if not self.delta:
            return encoding.text, PlainLayouts(self._answered.get(self.session)).next(encoding)
        only = encoding.options.only_observations
        shape = (maintenance, only)
        if only is not None or shape != self._shape:
            self._encoder = self._new()
            if self._shape is not None:  # the mode switched, or a batch began or ended
                switched = self._shape[0] != maintenance
                self._cause = "tool-set" if switched and only is None else "maintenance-batch"
        self._shape = shape
        text = self._encoder.next(encoding)
        kind = self._encoder.last
        self.kind = self._cause if kind == "first" and self._cause else kind
        self._cause = None
        layout = self._encoder.layout
        return text, layout if self.messages else replace(layout, turns=())

    def answered(self, request: ModelRequest) -> None:
        """A provider answered ``request``, so it stored the prefixes its layout marks."""
        if request.layout is not None:
            self._answered.pop(self.session, None)  # now the most recent
            self._answered[self.session] = (request.encoding, request.layout)
            while len(self._answered) > KEPT_SESSIONS:
                del self._answered[next(iter(self._answered))]
