"""What an activation learns from a provider's too-long refusals (DESIGN §10): the ceiling its
requests are then kept below, whatever the figures say, what the provider said, and the requests
refused since the last answer, which left no event and are recorded with the reply that follows,
or with the activation's end when none follows. The request being sent is kept too until its
reply is recorded: one that meets a provider error, an interruption or an unexpected error
leaves no reply, and the activation's end records it (``failed_sent``).

Each refusal lowers the ceiling to the share of the refused request's figure (counted as it was
sent, the figures' slack out; every request is compared with it counted so) the provider said it
would take (:func:`morphz.runtime.models.retry.refused_share`); without numbers in what it said,
a quarter less, or for piled-up ContextDelta increments just less (a fresh seed is smaller
anyway). Such a ceiling is a guess: when even the smallest request is above it but below every
request refused, that request is still tried once before the activation fails."""

from __future__ import annotations

import math
from collections.abc import Callable

from morphz.runtime.models.retry import BACKOFF, refused_share


class Refusals:
    """One activation's too-long refusals, and its request no recorded reply answers yet."""

    def __init__(self) -> None:
        self.ceiling: int | None = None  # a request figure the provider refuses from
        self.said = ""  # what it said the last time
        self.guessed = False  # the last refusal stated no numbers: its ceiling is a guess
        self.smallest: int | None = None  # the smallest figure refused
        self._unanswered: list[dict[str, object]] = []  # refused since the last answer
        self._sending: dict[str, object] | None = None  # sent, its reply not recorded (yet)

    def sending(self, measured: dict[str, object]) -> None:
        """A request ``measured`` so is being sent: until it is refused (:meth:`learn`) or its
        reply is recorded (:meth:`recorded`), the activation's end records it as sent."""
        self._sending = measured

    def learn(self, figure: int, said: str, piled: bool, measured: dict[str, object]) -> None:
        """A request whose figure was ``figure`` (``measured`` as it was sent) was refused as
        too long with ``said``: keep later requests below the share of it the provider would
        take; ``piled``: it was an increment of a ContextDelta sequence."""
        share = refused_share(said, (figure - 1) / figure if piled else BACKOFF)
        self.guessed = refused_share(said, -1.0) < 0  # nothing in its words to go by
        self.smallest = figure if self.smallest is None else min(self.smallest, figure)
        ceiling = max(1, math.floor(figure * share))
        self.ceiling = ceiling if self.ceiling is None else min(self.ceiling, ceiling)
        self.said = said
        self._unanswered.append(measured)
        self._sending = None  # counted with the refused ones

    def answered(self, sent: dict[str, object]) -> dict[str, object]:
        """``sent`` (what an answered request's reply records of it) with the requests refused
        before it, the ceiling and what the provider said. They stay unanswered until the
        reply is recorded (:meth:`recorded`): a reply that never lands leaves them to the end."""
        refused = self._refused()
        return sent if refused is None else {**sent, **refused}

    def recorded(self) -> None:
        """The reply to the request being sent is recorded, with the refused ones before it:
        nothing is unanswered now. Called in the thread that wrote it, so an end recorded
        after that thread (a cancelled run settles its writes first) never counts them again."""
        self._unanswered, self._sending = [], None

    def unanswered(self) -> dict[str, object] | None:
        """What the activation's end records of the requests no reply answered: those refused
        since the last answer, as a reply records them (their number and figures, the ceiling
        and what the provider said), and the request being sent when it ended, which met a
        provider error or an interruption (``failed_sent``, its figures); None when neither."""
        refused = self._refused() or {}
        failed = {} if self._sending is None else {"failed_sent": dict(self._sending)}
        return {**refused, **failed} or None

    def _refused(self) -> dict[str, object] | None:
        """The requests refused since the last answer, as a reply records them; None: none."""
        if not self._unanswered:
            return None
        refused = list(self._unanswered)
        return {"refused": len(refused), "refused_sent": refused} | {
            "ceiling": self.ceiling,
            "said": self.said,
        }

    def ended(self, reason: str | None) -> str | None:
        """An activation's finishing ``reason`` with what ended it unanswered, if anything: how
        many requests the provider refused as too long since the last answer, in its words
        (nothing added when ``reason`` quotes them already: a minimum above the ceiling)."""
        count = len(self._unanswered)
        if not count or (reason is not None and self.said in reason):
            return reason
        plural = f"last {count} requests" if count > 1 else "last request"
        said = f"the provider refused the {plural} as too long: {self.said}"
        return said if reason is None else f"{reason}; {said}"

    def try_smallest(self, figure: int) -> bool:
        """Whether a request of ``figure``, above the ceiling, may still be tried: when the
        ceiling is a guess (the last refusal stated no numbers) and ``figure`` is below every
        request refused, the provider may take it; the ceiling then rises to it. Once per
        figure: refused too, it becomes the smallest refused, and nothing smaller is left."""
        if not self.guessed or self.smallest is None or figure >= self.smallest:
            return False
        if self.ceiling is not None and figure <= self.ceiling:
            return False  # it fits already: nothing to try
        self.ceiling = figure
        return True

    def measure(self, figure: int, hard: int, sent: Callable[[], int]) -> tuple[int, int]:
        """A request's tokens and the most it may have, counted one way: its pressure
        ``figure`` and the ``hard`` limit or, when the ceiling leaves it less room, ``sent()``
        (the request counted as a refused one was, the figures' slack out) and the ceiling."""
        if self.ceiling is not None:
            counted = sent()
            if self.ceiling - counted < hard - figure:
                return counted, self.ceiling
        return figure, hard

    def above(self, figure: Callable[[], int]) -> bool:
        """Whether a request whose figure is ``figure()`` (counted only after a refusal) is above
        what a provider refused."""
        return self.ceiling is not None and figure() > self.ceiling

    def facts(self) -> dict[str, str]:
        """The kernel's scheduling fact after a refusal: the tokens a request must stay under."""
        return {} if self.ceiling is None else {"refused-above": str(self.ceiling)}
