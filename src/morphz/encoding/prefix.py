"""The prefix-reuse meter: our offline stand-in for a provider's prompt-cache hit rate.

For each request after the first, the reused share is the length of the longest common prefix
with the previous request over the request's own length (in UTF-8 bytes); the aggregate is the
sum of reused bytes over the sum of request bytes, first request excluded.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search on slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class PrefixMeter:
    previous: bytes | None = None
    reused: int = 0
    total: int = 0
    requests: int = 0
    shares: list[float] = field(default_factory=list)

    def add(self, request: str) -> float | None:
        """Record the next request; its reused share (None for the first)."""
        data = request.encode()
        self.requests += 1
        share = None
        if self.previous is not None:
            same = common_prefix(self.previous, data)
            self.reused += same
            self.total += len(data)
            share = same / len(data) if data else 1.0
            self.shares.append(share)
        self.previous = data
        return share

    @property
    def rate(self) -> float:
        return self.reused / self.total if self.total else 0.0
