"""Token accounting without a network: an estimate, calibration against what a provider reports,
and an exact tokenizer when one is installed."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from morphz.checks import check_whole
from morphz.errors import InputError
from morphz.token_estimate import pieces, text_units, tokens

EstimateKind = Literal["estimated", "calibrated", "exact"]


def estimate_tokens(text: str) -> int:
    """The network-free estimate (morphz.token_estimate): per line of the encoding, the larger
    of what its characters cost (four ASCII characters a token; a wide character, U+2E80 and
    above, one; any other character a third of a token per UTF-8 byte) and its o200k/cl100k
    pre-tokenizer chunks, a token each, which no tokenizer under those patterns counts fewer
    than. English prose counts by its characters; numbers, JSON, hex, base64, logs and the
    encoding's S-expressions count by their chunks. Calibration corrects it once a provider
    reports what it counted."""
    return tokens(text_units(text))


# The reported/estimated ratios one provider report may teach. Real tokenizers stay well inside
# (prose about 0.8, code and JSON 1.2-2, hex or base64 up to about 2.7); a report outside is a
# provider counting something else (only the uncached part, a whole batch), and believed as is it
# would make every later figure vanish or, saved with the context, refuse every later request.
RATIO_BOUNDS = (0.5, 4.0)


def _bounded(ratio: float) -> float:
    low, high = RATIO_BOUNDS
    return min(max(ratio, low), high) if math.isfinite(ratio) else 1.0


@dataclass(slots=True)
class Calibration:
    """Scales estimates by what a provider reported: an exponentially weighted ratio of reported
    input tokens to estimated ones (weight ``alpha`` for the newest sample), each sample held
    within :data:`RATIO_BOUNDS`."""

    factor: float = 1.0
    samples: int = 0
    alpha: float = 0.3

    def __post_init__(self) -> None:
        low, high = RATIO_BOUNDS
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise InputError(f"a calibration factor is a number, not {self.factor!r}")
        if not low <= self.factor <= high:  # NaN fails this too
            raise InputError(
                f"a calibration factor is between {low} and {high} (reported tokens per "
                f"estimated one), not {self.factor!r}"
            )
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise InputError(f"calibration samples are a count, not {self.samples!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float):
            raise InputError(f"a calibration's alpha is a number, not {self.alpha!r}")
        if not 0 < self.alpha <= 1:
            raise InputError(f"a calibration's alpha is above 0 and at most 1, not {self.alpha!r}")

    def update(self, estimated: int, reported: int) -> bool:
        """Learn one sample: ``reported`` tokens for what was estimated as ``estimated``; False
        (nothing learnt) when either is not positive."""
        if estimated <= 0 or reported <= 0:
            return False
        try:
            ratio = _bounded(reported / estimated)
        except OverflowError:  # a figure too large for a float: far above the bounds
            ratio = RATIO_BOUNDS[1]
        self.factor = (
            ratio if self.samples == 0 else (1 - self.alpha) * self.factor + self.alpha * ratio
        )
        self.samples += 1
        return True

    def follow(self, other: Calibration) -> None:
        """Become ``other`` (what the store holds now), in place: every holder of this object
        (an engine's options, its tools' context) counts with it."""
        self.factor, self.samples, self.alpha = other.factor, other.samples, other.alpha

    def apply(self, estimate: int) -> int:
        return round(estimate * self.factor) if self.samples else estimate

    @property
    def kind(self) -> EstimateKind:
        return "calibrated" if self.samples else "estimated"

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "samples": self.samples, "alpha": self.alpha}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        factor = _bounded(float(data["factor"]))  # one saved before the bounds were kept
        return cls(factor, int(data["samples"]), float(data.get("alpha", 0.3)))


Counter = Callable[[str], int]


RESOLVE_SECONDS = 10.0  # how long the first use of a model waits for tiktoken's encoding


def exact_counter(model: str, wait: float = RESOLVE_SECONDS) -> Counter | None:
    """An exact tokenizer for ``model`` when ``tiktoken`` is installed and knows the model; None
    otherwise, and the estimate is used. ``model`` is a model spec (``openai:gpt-4o``) or a bare
    OpenAI model name; another provider's spec (``anthropic:...``, ``scripted:...``) gets None,
    since tiktoken's encodings are OpenAI's. Looked up once per model and process: tiktoken reads
    the encoding from its cache and fetches it once when absent. When that fails (offline) or
    the name is unknown to tiktoken (a local model behind an OpenAI-compatible server), the
    answer is None for the rest of the process. When tiktoken has not answered within ``wait``
    seconds (it fetches without a timeout, and a network that drops packets would hold the first
    request for minutes), the answer is None for now: the fetch goes on in the background, and a
    later use takes its answer once it has arrived, without waiting again. Special-token text
    such as ``<|endoftext|>`` in an observation is counted as ordinary text."""
    provider, colon, name = model.partition(":")
    if colon and provider != "openai":
        return None
    return _tiktoken_counter(name if colon else model, wait)


class _Lookup:
    """tiktoken's answer for one model name, looked up in a daemon thread of its own (named
    for tests): ``outcome`` holds the encoding, None (unknown name, file not to be had) or an
    unexpected error once it has ended."""

    def __init__(self, tiktoken: Any, name: str) -> None:
        self.outcome: list[Any] = []
        self.given_up = False  # a caller waited its ``wait`` for it: nobody waits again
        self.worker = threading.Thread(
            target=self._look_up, args=(tiktoken, name), name=f"tiktoken encoding of {name}"
        )
        self.worker.daemon = True
        self.worker.start()

    def _look_up(self, tiktoken: Any, name: str) -> None:
        try:
            self.outcome.append(tiktoken.encoding_for_model(name))
        except (KeyError, ValueError, OSError):  # unknown model, or its file cannot be had
            self.outcome.append(None)
        except BaseException as exc:  # anything else is the caller's to see
            self.outcome.append(exc)

    def arrived(self, wait: float) -> bool:
        """Whether the lookup has ended, waiting up to ``wait`` seconds for it unless a caller
        already gave up on it."""
        self.worker.join(0 if self.given_up else wait)
        if self.worker.is_alive():
            self.given_up = True
            return False
        return True


class _Resolved:
    """Each model name's exact counter (or None), resolved on its first use. A final answer
    (a counter; None: tiktoken not installed, the name unknown, the encoding not to be had) is
    kept for the life of the process, whatever other names are used (a host serving many
    fine-tunes keeps every answer: one small entry per name). A lookup that has not answered in
    time is kept pending, not answered: each later use takes its answer if it has arrived
    (without waiting again), else None for now. Two threads asking for the same name at once
    look it up once (the second waits for the same lookup); another name does not wait for it.
    ``cache_clear`` forgets every answer and lookup (for tests that change tiktoken)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, Counter | None] = {}
        self._lookups: dict[str, _Lookup] = {}

    def __call__(self, name: str, wait: float) -> Counter | None:
        with self._lock:
            if name in self._answers:
                return self._answers[name]
            lookup = self._lookups.get(name)
            if lookup is None:
                try:
                    import tiktoken  # type: ignore[import-not-found,unused-ignore]
                except ImportError:
                    self._answers[name] = None
                    return None
                lookup = self._lookups[name] = _Lookup(tiktoken, name)
        if not lookup.arrived(wait):
            return None  # not final: a later use takes the answer once it has arrived
        with self._lock:
            if self._lookups.get(name) is lookup:
                del self._lookups[name]  # an unexpected error is raised, not kept
            if name in self._answers:  # another thread took this lookup's answer first
                return self._answers[name]
            answer = _counter(lookup.outcome[0])
            self._answers[name] = answer
            return answer

    def cache_clear(self) -> None:
        with self._lock:
            self._answers.clear()
            self._lookups.clear()


_tiktoken_counter = _Resolved()


def _counter(outcome: Any) -> Counter | None:
    """The counter of a lookup's ``outcome``: None for none; an unexpected error raised."""
    if outcome is None:
        return None
    if isinstance(outcome, BaseException):
        raise outcome
    cuts = getattr(outcome, "_pat_str", None) in SPLITTABLE_PATTERNS
    return PieceCounter(outcome.encode_ordinary, cuts)


# The pre-tokenizer patterns of tiktoken's OpenAI encodings (tiktoken 0.14: r50k/p50k, cl100k,
# o200k and o200k_harmony). Under each, a cut made by `pieces` is a boundary of the pattern's
# chunks, and BPE never merges across chunks, so the tokens of a text are the sum of its pieces'
# tokens (tests/test_tokenizer.py checks it against tiktoken on random texts). Another pattern,
# or one a later tiktoken changes, is counted whole.
R50K_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
SPLITTABLE_PATTERNS = frozenset({R50K_PATTERN, CL100K_PATTERN, O200K_PATTERN})


class PieceCounter:
    """An exact counter that remembers what it counted: ``text`` is cut into pieces at
    :func:`pieces` (when ``cuts``; the encoding's lines, for the patterns where that changes
    no count) and each piece's tokens are kept, least recently used first out, up to
    ``capacity`` characters of pieces. Between two requests of one activation most lines are
    the same, so a step counts only what changed: the new observations, the kernel, the
    increments. Safe to share between threads."""

    def __init__(
        self, encode: Callable[[str], list[int]], cuts: bool, capacity: int = 4_000_000
    ) -> None:
        self._encode, self.cuts, self.capacity = encode, cuts, capacity
        self._known: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        if not self.cuts:
            return len(self._encode(text))
        return sum(self._piece(piece) for piece in pieces(text))

    def _piece(self, piece: str) -> int:
        with self._lock:
            tokens = self._known.get(piece)
            if tokens is not None:
                self._known.move_to_end(piece)
                return tokens
        tokens = len(self._encode(piece))
        if len(piece) <= self.capacity:
            with self._lock:
                if piece not in self._known:
                    self._known[piece] = tokens
                    self._chars += len(piece)
                while self._chars > self.capacity:
                    old, _ = self._known.popitem(last=False)
                    self._chars -= len(old)
        return tokens


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    kind: EstimateKind


def count(
    parts: Sequence[str], calibration: Calibration | None = None, counter: Counter | None = None
) -> TokenCount:
    """Tokens of a whole request: exact when a counter is given, else the (calibrated) estimate."""
    return figure(sum(part_tokens(p, counter) for p in parts), calibration, counter)


def part_tokens(text: str, counter: Counter | None = None) -> int:
    """One part's tokens before any calibration: exact with ``counter``, else the estimate. A
    counter's answer that is no token count (None, negative, a fraction) is an InputError naming
    the encoding option ``counter``, not a TypeError from a sum or a figure of -360 tokens."""
    if counter is None:
        return estimate_tokens(text)
    return check_whole(
        counter(text),
        "what the encoding option counter returns",
        0,
        unit="tokens",
        why="counter is a function from text to a token count",
    )


def figure(
    tokens: int, calibration: Calibration | None = None, counter: Counter | None = None
) -> TokenCount:
    """The figure for parts whose :func:`part_tokens` add up to ``tokens``: exact when they were
    counted, else the estimate, calibrated when the calibration has samples."""
    if counter is not None:
        return TokenCount(tokens, "exact")
    if calibration is not None and calibration.samples:
        return TokenCount(calibration.apply(tokens), "calibrated")
    return TokenCount(tokens, "estimated")
