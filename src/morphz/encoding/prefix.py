"""The prefix-reuse meters: our offline stand-ins for a provider's prompt-cache hit rate.

:class:`PrefixMeter`: for each request after the first, the reused share is the length of the
longest common prefix with the previous request over the request's own length (in UTF-8 bytes);
the aggregate is the sum of reused bytes over the sum of request bytes, first request excluded.
It is what a provider that caches every prefix of the last request could reuse.

:class:`BlockCacheMeter`: what a provider that caches only at marked blocks reuses of requests
cut and marked by a :class:`~morphz.encoding.blocks.CacheLayout`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from morphz.encoding.blocks import CacheLayout


def tools_text(tools: Sequence[str]) -> str:
    """The tool schemas of a request as one JSON array, from each one's canonical JSON text
    (``ToolSchema.text``): the bytes ``json.dumps(schemas, sort_keys=True)`` would give."""
    return f"[{', '.join(tools)}]"


def request_text(encoding: str, tools: Sequence[str] = ()) -> str:
    """A model request as a provider's prompt cache sees it: the tool schemas (first, as the
    providers place them), then the encoding (with ContextDelta, the seed and its increments)."""
    return f"{tools_text(tools)}\n{encoding}"


_CHUNK = 4096


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b``: equal chunks are skipped, then a
    binary search inside the first chunk that differs (each byte is copied about twice; a
    binary search over the whole length copied it about twice per step)."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start : start + _CHUNK] == b[start : start + _CHUNK]:
        start += _CHUNK
    if start >= n:
        return n
    lo, hi = start, min(start + _CHUNK, n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[start:mid] == b[start:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class PrefixMeter:
    """The byte-prefix reuse of a sequence of requests. ``keep_shares``: also keep each
    request's share in ``shares`` (a benchmark's detail; a long-lived engine keeps only sums)."""

    previous: bytes | None = None
    reused: int = 0
    total: int = 0
    requests: int = 0
    keep_shares: bool = False
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
            if self.keep_shares:
                self.shares.append(share)
        self.previous = data
        return share

    @property
    def rate(self) -> float:
        return self.reused / self.total if self.total else 0.0


LOOKBACK = 20  # block boundaries a mark looks back for an earlier entry (Anthropic's figure)
WRITE_PRICE, READ_PRICE = 1.25, 0.1  # of an input token: a 5-minute cache write, a cache read


@dataclass(slots=True)
class BlockCacheMeter:
    """A simulated provider cache that stores a prefix only at marked block ends and finds one
    only at block boundaries, looking back up to ``lookback`` boundaries from each mark (the
    rules of Anthropic's prompt cache; entries never expire here). The key of a prefix covers
    its blocks one by one, so the same text cut differently is another entry.

    ``read`` counts the bytes served from the cache, ``written`` the bytes stored anew (from
    the hit to the furthest mark); both exclude the first request, like :class:`PrefixMeter`.
    """

    lookback: int = LOOKBACK
    entries: set[bytes] = field(default_factory=set)
    read: int = 0
    written: int = 0
    total: int = 0
    requests: int = 0

    def add(self, request: str, layout: CacheLayout) -> int:
        """Record the next request, cut and marked by ``layout``; the bytes it read."""
        ends: list[int] = []  # the byte offset where each block ends
        keys: list[bytes] = []  # the key of the prefix that ends there
        marks: list[int] = []  # the indexes of the marked blocks
        key = b""
        for index, (piece, marked) in enumerate(layout.blocks(request)):
            key = hashlib.blake2b(key + piece.encode(), digest_size=16).digest()
            ends.append((ends[-1] if ends else 0) + len(piece.encode()))
            keys.append(key)
            if marked:
                marks.append(index)
        hit = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - self.lookback - 1), -1):
                if keys[i] in self.entries:
                    hit = max(hit, ends[i])
                    break
        furthest = ends[marks[-1]] if marks else 0
        self.entries.update(keys[i] for i in marks)
        self.requests += 1
        if self.requests > 1:
            self.read += hit
            self.written += max(0, furthest - hit)
            self.total += len(request.encode())
        return hit

    @property
    def rate(self) -> float:
        """The share of request bytes read from the cache."""
        return self.read / self.total if self.total else 0.0

    @property
    def cost(self) -> float:
        """The price of the input relative to sending it uncached (writes at 1.25, reads at
        0.1 of the input price)."""
        if not self.total:
            return 1.0
        plain = self.total - self.read - self.written
        return (plain + WRITE_PRICE * self.written + READ_PRICE * self.read) / self.total
