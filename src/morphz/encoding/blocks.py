"""Where a request's text may be cut into blocks, and which block ends a provider should cache.

Some providers cache a prompt prefix only where the request marks it (Anthropic: a
``cache_control`` breakpoint on a content block, at most four per request) and look an earlier
entry up only at block boundaries (up to 20 boundaries back from each mark). The prefix the
encoding keeps stable is only reused there if the request is cut where that prefix ends. A
:class:`CacheLayout` names the cuts and the marks as character offsets into the text sent:

- without ContextDelta (:func:`encoding_layout`): cuts after the evaluation-profile region and
  after every inbox item; marks at the end of the evaluation-profile (the fixed prefix, still
  reused after a retirement batch) and at the end of the last inbox item (the prefix the next
  request extends: its end is a cut of the next request, a few boundaries back). Not at the end
  of the text: what follows the inbox changes with every request, so caching it would only pay
  the provider's write premium;
- with ContextDelta (:meth:`CacheLayout.extended`): the seed's cuts, a cut at the end of the seed
  and of every increment, and marks at the end of the evaluation-profile, of the seed's inbox,
  of the previous request and of the whole request (what the next increment extends). A
  rebuilt seed marks its own end, and where the previous seed's inbox ended when it still
  shares that prefix (:meth:`CacheLayout.anchored`: a revision rebuilds the seed after many
  observations arrived, more than a provider looks back).

Every request thus marks the end of the prefix the previous request stored, when it still shares
it, so a provider that finds entries only at marks, without looking back, reads it too. The
runtime anchors the first layout of every request sequence (a new activation's, a batch's, a seed
sent after a refusal) on the last request a provider answered in the session
(``morphz.runtime.requests``; :class:`PlainLayouts` and the ContextDelta encoder take it).

Each request also says where its ContextDelta seed and increments begin (``turns``): the
OpenAI-compatible adapter sends each as a message of its own, for servers that reuse only whole
earlier messages; it has no use for the cuts and marks (those servers cache prefixes unmarked).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from morphz.encoding.compile import Encoding


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """Cuts (``0 < cut < size``) and marks (cuts, or ``size`` itself), sorted, in characters;
    ``turns``: the cuts where a ContextDelta seed or increment ends and the next increment
    begins (an adapter whose provider reuses only whole earlier messages sends each piece as its
    own message)."""

    size: int
    cuts: tuple[int, ...]
    marks: tuple[int, ...]
    turns: tuple[int, ...] = ()

    def to_dict(self, text: str) -> dict[str, list[int]]:
        """The cuts, marks and turns as byte offsets into ``text`` encoded as UTF-8 (the unit
        of the encoding's region ranges)."""
        if len(text) != self.size:
            raise ValueError(f"the layout is for {self.size} characters, not {len(text)}")

        table, done, at = {0: 0}, 0, 0  # character offset -> byte offset, in one pass
        for offset in sorted({*self.cuts, *self.marks, *self.turns}):
            done += len(text[at:offset].encode())
            table[offset], at = done, offset

        def in_bytes(offsets: tuple[int, ...]) -> list[int]:
            return [table[o] for o in offsets]

        return {
            "cuts": in_bytes(self.cuts),
            "marks": in_bytes(self.marks),
            "turns": in_bytes(self.turns),
        }

    def turn_texts(self, text: str) -> list[str]:
        """``text`` cut at the turns: the seed, then each increment."""
        if len(text) != self.size:
            raise ValueError(f"the layout is for {self.size} characters, not {len(text)}")
        bounds = (0, *self.turns, self.size)
        return [text[a:b] for a, b in pairwise(bounds) if b > a]

    def blocks(self, text: str) -> Iterator[tuple[str, bool]]:
        """``text`` cut into non-empty pieces, each with whether a mark ends it."""
        if len(text) != self.size:
            raise ValueError(f"the layout is for {self.size} characters, not {len(text)}")
        marks, start = set(self.marks), 0
        for end in (*self.cuts, self.size):
            if end > start:
                yield text[start:end], end in marks
                start = end

    def anchored(self, text: str, previous: str, marks: tuple[int, ...]) -> CacheLayout:
        """This layout of ``text`` with one more mark: the furthest of ``marks`` (the marks of
        the ``previous`` request) that is one of its cuts and ends a prefix the two share. A
        provider looks back only so many boundaries from a mark; marking where the previous
        request stored a prefix finds it however far back it is."""
        cuts = set(self.cuts)
        for mark in sorted(marks, reverse=True):
            if mark in cuts and text[:mark] == previous[:mark]:
                if mark in self.marks:
                    return self
                marks = tuple(sorted((*self.marks, mark)))
                return CacheLayout(self.size, self.cuts, marks, self.turns)
        return self

    def shifted(self, by: int) -> CacheLayout:
        """The layout of the same text sent after ``by`` characters of something else (the
        first block takes them in)."""

        def move(offsets: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(o + by for o in offsets)

        return CacheLayout(self.size + by, move(self.cuts), move(self.marks), move(self.turns))

    def extended(self, size: int, cuts: tuple[int, ...] = ()) -> CacheLayout:
        """This layout of a seed, grown to a request of ``size`` characters that appends
        increments to it: a cut at the seed's end and at each of ``cuts`` (where each increment
        begins). Marks: the seed's first (the fixed prefix) and its last before its end (its
        inbox), where the previous request ended (it stored its prefix there: a provider finds
        it at a mark, with or without looking back) and the request's end. A rebuilt seed's
        anchor is dropped: the previous request's end serves from the first increment on."""
        if size <= self.size:
            return self
        inner = [m for m in self.marks if m < self.size]
        kept = sorted({inner[0], inner[-1]}) if inner else []
        tail = tuple(sorted({c for c in (self.size, *cuts) if self.size <= c < size}))
        return CacheLayout(size, (*self.cuts, *tail), (*kept, tail[-1], size), tail)


def encoding_layout(encoding: Encoding, *, seed: bool = False) -> CacheLayout:
    """The layout of ``encoding`` sent as it is; with ``seed`` (a ContextDelta seed) the end of
    the text is marked too."""
    text, data = encoding.text, encoding.text.encode()
    ends = {r.name: r for r in encoding.regions}

    def chars(offset: int) -> int:  # a byte offset of the UTF-8 text as a character offset
        return offset if text.isascii() else len(data[:offset].decode())

    profile = chars(ends["evaluation-profile"].end)
    cuts, marks = [profile], [profile]
    offset = chars(ends["inbox"].start) + len("(inbox\n ")
    for index, size in enumerate(encoding.inbox_items):  # as the compile rendered them
        offset += (2 if index else 0) + size  # "\n " between two items
        cuts.append(offset)
    if encoding.inbox_items:
        marks.append(offset)
    if seed:
        marks.append(len(text))
    return CacheLayout(len(text), tuple(c for c in cuts if c < len(text)), tuple(marks))


@dataclass(slots=True)
class PlainLayouts:
    """The layouts of a run of requests sent without ContextDelta, each anchored on the one
    before (:meth:`CacheLayout.anchored`)."""

    last: tuple[str, CacheLayout] | None = None

    def next(self, encoding: Encoding) -> CacheLayout:
        layout = encoding_layout(encoding)
        if self.last is not None:
            layout = layout.anchored(encoding.text, self.last[0], self.last[1].marks)
        self.last = (encoding.text, layout)
        return layout
