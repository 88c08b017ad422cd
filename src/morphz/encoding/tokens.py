"""Token accounting without a network: an estimate, calibration against what a provider reports,
and an exact tokenizer when one is installed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

EstimateKind = Literal["estimated", "calibrated", "exact"]


def estimate_tokens(text: str) -> int:
    """About four characters per token for ASCII text; CJK and other non-ASCII characters are
    closer to one token each (a deliberate over-estimate: budgets should err on the safe side)."""
    if text.isascii():
        return (len(text) + 3) // 4
    wide = sum(1 for char in text if ord(char) > 0x2E7F)
    other = len(text) - wide
    return (other + 3) // 4 + wide


@dataclass(slots=True)
class Calibration:
    """Scales estimates by what a provider reported: an exponentially weighted ratio of reported
    input tokens to estimated ones (weight ``alpha`` for the newest sample)."""

    factor: float = 1.0
    samples: int = 0
    alpha: float = 0.3

    def update(self, estimated: int, reported: int) -> None:
        if estimated <= 0 or reported <= 0:
            return
        ratio = reported / estimated
        self.factor = (
            ratio if self.samples == 0 else (1 - self.alpha) * self.factor + self.alpha * ratio
        )
        self.samples += 1

    def apply(self, estimate: int) -> int:
        return round(estimate * self.factor) if self.samples else estimate

    @property
    def kind(self) -> EstimateKind:
        return "calibrated" if self.samples else "estimated"

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "samples": self.samples, "alpha": self.alpha}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(float(data["factor"]), int(data["samples"]), float(data.get("alpha", 0.3)))


Counter = Callable[[str], int]


def exact_counter(model: str) -> Counter | None:
    """An exact tokenizer for ``model`` when ``tiktoken`` is installed and knows the model; None
    otherwise, and the estimate is used. ``model`` is a model spec (``openai:gpt-4o``) or a bare
    OpenAI model name; another provider's spec (``anthropic:...``, ``scripted:...``) gets None,
    since tiktoken's encodings are OpenAI's. Resolved once per model and process: tiktoken reads
    the encoding from its cache and fetches it once when absent; when that fails (offline), or
    the name is unknown to tiktoken (a local model behind an OpenAI-compatible server), the
    answer is None for the rest of the process. Special-token text such as ``<|endoftext|>`` in
    an observation is counted as ordinary text."""
    provider, colon, name = model.partition(":")
    if colon and provider != "openai":
        return None
    return _tiktoken_counter(name if colon else model)


@functools.lru_cache(maxsize=64)
def _tiktoken_counter(name: str) -> Counter | None:
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        encoding = tiktoken.encoding_for_model(name)
    except (KeyError, ValueError, OSError):  # unknown model, or its file cannot be had
        return None
    return lambda text: len(encoding.encode_ordinary(text))


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    kind: EstimateKind


def count(
    parts: Sequence[str], calibration: Calibration | None = None, counter: Counter | None = None
) -> TokenCount:
    """Tokens of a whole request: exact when a counter is given, else the (calibrated) estimate."""
    if counter is not None:
        return TokenCount(sum(counter(p) for p in parts), "exact")
    estimate = sum(estimate_tokens(p) for p in parts)
    if calibration is not None and calibration.samples:
        return TokenCount(calibration.apply(estimate), "calibrated")
    return TokenCount(estimate, "estimated")
