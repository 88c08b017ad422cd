"""The network-free token estimate, in twelfths of a token (encoding.tokens.estimate_tokens
rounds it up). A text is cut into pieces where the encoding's lines begin (:func:`pieces`), and
each piece counts the larger of two measures:

- :func:`byte_units`, what its characters cost: four ASCII characters a token, a wide character
  one, any other character a third of a token per UTF-8 byte (prose and code);
- :func:`chunk_bound`, at least the number of chunks the pre-tokenizer of o200k and cl100k cuts
  it into, a token each: BPE never merges across chunks, so no tokenizer under those patterns
  counts fewer. They cut every run of digits into chunks of three and every run of punctuation
  apart from the digits and letters beside it, so numbers, JSON, hex, base64, logs, timestamps
  and the encoding's own S-expressions need one to four times what their characters cost.

Taken per piece, the estimate of a region is the sum of its items' estimates (each item is a
line of its own), which receipts, the kept total of the frames in view and the compile rely on;
the sum of the larger measures is never below the larger of the sums.
"""

from __future__ import annotations

import codecs
import functools
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator

_LOW = bytes(range(0x80))
_NOT_FOUR_BYTE_LEAD = bytes(b for b in range(256) if not 0xF0 <= b <= 0xF4)
# Twelfths of a token: an ASCII character a quarter, each UTF-8 byte of another narrow character
# a third, a wide character one token
ASCII_UNITS, NARROW_BYTE_UNITS, WIDE_UNITS, TOKEN_UNITS = 3, 4, 12, 12


def text_units(text: str) -> int:
    """``text``'s token estimate in twelfths of a token: the sum over its :func:`pieces` of
    :func:`piece_units`. Each piece's figure is remembered, and so is the whole text's: most
    regions of a request are the same as the previous request's (the protocol, the mind
    between two commits), and finding a text's pieces costs about a microsecond each. A short
    text (a relation, a ref) is measured, not remembered."""
    if len(text) < 16:
        return sum(map(piece_units, pieces(text)))
    key = hash(text) << 32 ^ len(text)
    units = _memo.known.get(key)
    if units is None:
        units = sum(map(_memo, pieces(text)))
        _memo.remember(key, units)
    return units


def tokens(units: int) -> int:
    """Units rounded up to whole tokens."""
    return -(-units // TOKEN_UNITS)


def piece_units(piece: str) -> int:
    """One piece's estimate: the larger of :func:`byte_units` and a token for each chunk
    (:func:`chunk_bound`)."""
    return max(byte_units(piece), TOKEN_UNITS * chunk_bound(piece))


_ITEM_START = re.compile(r"\n(?= ?\()")


def pieces(text: str) -> Iterator[str]:
    """``text`` cut after each newline that follows a printable ASCII character other than a
    space and comes before "(" or " (": where the encoding's lines, and so its regions and
    items, begin. Under the pre-tokenizer patterns of tiktoken's OpenAI encodings such a cut is
    a chunk boundary (encoding.tokens.PieceCounter relies on it). (A regular expression that
    looks behind at every position took 16 times as long on an encoding of 80 KB.)"""
    start = 0
    for match in _ITEM_START.finditer(text):
        end = match.end()
        if end >= 2 and "!" <= text[end - 2] <= "~":
            yield text[start:end]
            start = end
    yield text[start:]


class _Memo:
    """:func:`piece_units` of each piece (and :func:`text_units` of each whole text),
    remembered, the first remembered out first beyond ``capacity``: between two requests of one
    activation most lines are the same, so a step measures only what changed. A text is known
    by its hash and length (one integer), not kept itself, so what stays in memory does not
    grow with the texts' size: about 120 bytes a text, 8 MB at most (two texts of one length
    sharing a 64-bit hash would count alike). Safe to share between threads: a lookup only
    reads the dict, and what changes it holds the lock."""

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self.known: OrderedDict[int, int] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, piece: str) -> int:
        if len(piece) < 16:  # measuring is about as cheap as looking up
            return piece_units(piece)
        key = hash(piece) << 32 ^ len(piece)
        units = self.known.get(key)
        if units is None:
            units = piece_units(piece)
            self.remember(key, units)
        return units

    def remember(self, key: int, units: int) -> None:
        with self._lock:
            self.known[key] = units
            if len(self.known) > self.capacity:
                self.known.popitem(last=False)  # (a dict's first key is slow to find once
                # many were deleted from its front: 11 us an insert, review 22)


_memo = _Memo()


def forget() -> None:
    """Forget every remembered figure (the compile benchmark times a first compile so)."""
    with _memo._lock:
        _memo.known.clear()


def byte_units(text: str) -> int:
    """What ``text``'s characters cost in twelfths of a token: four ASCII characters a token; a
    wide character (U+2E80 and above: CJK, kana, hangul, emoji) one token; any other character a
    third of a token per UTF-8 byte, which is two thirds for Latin accents, Greek, Cyrillic,
    Hebrew and Arabic and one token for Devanagari, Thai and the other scripts of three bytes.
    Tokenizers trained mostly on English spend about 0.5-0.7 tokens on a Cyrillic or Arabic
    character and up to one or more on an Indic one; counting those at a quarter, as an ASCII
    character, under-estimated a request of such text two to four times.

    Counted on the UTF-8 bytes in two passes: a wide character of three bytes counts what three
    narrow bytes count (12), so only the characters of four bytes (all wide, 12 instead of 16)
    and the ASCII ones (3 instead of 4) differ from four units a byte."""
    if text.isascii():
        return ASCII_UNITS * len(text)
    data = text.encode("utf-8", "surrogatepass")
    high = data.translate(None, _LOW)  # the bytes of the characters that are not ASCII
    four = len(high.translate(None, _NOT_FOUR_BYTE_LEAD))  # characters of U+10000 and above
    ascii_chars = len(data) - len(high)
    return (
        NARROW_BYTE_UNITS * len(high)
        + ASCII_UNITS * ascii_chars
        - (4 * NARROW_BYTE_UNITS - WIDE_UNITS) * four
    )


# Each character's class, as o200k's pattern (encoding.tokens.O200K_PATTERN) tells them apart:
# l lower-case letter (Ll), u upper-case (Lu, Lt), o a letter of either kind (Lm, Lo) or a
# mark (M), d a number (N), n CR or LF, s a space, w other white space, p anything else, and x
# a code point Unicode 3.2 had not assigned, which a later one may have: counted as a chunk of
# its own, with a chunk after it, whatever it is. The classes are Unicode 3.2's, which every
# Python has (unicodedata.ucd_3_2_0), not this Python's own tables: a store's kept totals and
# observation units must be what the audit counts again under another Python (3.11 and 3.12
# know different letters). Every script in wide use but emoji was in 3.2; a later one counts
# more chunks than o200k cuts, never fewer, and so does a code point whose category changed
# since (_CHANGED, x as well).
_CATEGORIES = {"Lu": "u", "Lt": "u", "Ll": "l", "Lm": "o", "Lo": "o", "Mn": "o", "Mc": "o"}
_CATEGORIES |= {"Me": "o", "Nd": "d", "Nl": "d", "No": "d", "Cn": "x"}
_SPACES = {0x0A: "n", 0x0D: "n", 0x20: "s"}  # and the rest of Unicode's White_Space: w
_SPACES |= dict.fromkeys([0x09, 0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F], "w")
_SPACES |= dict.fromkeys([0x205F, 0x3000, *range(0x2000, 0x200B)], "w")


class _Classes(dict[int, str]):
    """Code point -> class letter, each looked up once (str.translate's table)."""

    def __missing__(self, point: int) -> str:
        kind = _SPACES.get(point) or (
            "x" if point in _CHANGED else _CATEGORIES.get(_UNICODE_3_2.category(chr(point)), "p")
        )
        self[point] = kind
        return kind


_UNICODE_3_2 = unicodedata.ucd_3_2_0
# The code points whose class above differs between Unicode 3.2 and 15.1 (Python 3.13's), by
# ranges (149 of them: feminine and masculine ordinals, modifier letters, Georgian and Cherokee
# capitals, U+06DE, U+2183, U+10341...): a later Unicode may split what 3.2 joins, so each counts
# as one that was not assigned (x). A literal, so every Python counts them alike.
_CHANGED_RANGES = (
    (0xAA, 0xAA), (0xBA, 0xBA), (0x294, 0x294), (0x2B9, 0x2BA), (0x2C6, 0x2CF), (0x2EC, 0x2EC),
    (0x374, 0x374), (0x6DE, 0x6DE), (0x10D0, 0x10F8), (0x13A0, 0x13F4), (0x2071, 0x2071),
    (0x207F, 0x207F), (0x2132, 0x2132), (0x2183, 0x2183), (0x10341, 0x10341),
)  # fmt: skip
_CHANGED = frozenset(p for first, last in _CHANGED_RANGES for p in range(first, last + 1))
_CLASSES = _Classes()
_KINDS = "lousdnwpx"
_CODE = {kind: code for code, kind in enumerate(_KINDS)}  # four bits each
_TO_CODE = bytes.maketrans(_KINDS.encode(), bytes(range(len(_KINDS))))
# ASCII characters to their codes, and the codes of other characters (0x80 + code, see
# _other_codes) to theirs
_ASCII_CODES = bytes(_CODE[_CLASSES[b]] for b in range(0x80)) + bytes(b & 0x7F for b in range(128))


def _table(marked: dict[int, int]) -> bytes:
    """A translation table: ``marked``'s bytes to their marks, every other byte to 0."""
    return bytes(marked.get(b, 0) for b in range(256))


# Two neighbours (each pair one byte: 16 x the first's code + the second's) where a chunk starts
# at the second: a change of class but in one word (ABc, Ab, a letter and its mark, Ko), white
# space before letters (" word") or a space before punctuation (" ("), the line breaks a
# punctuation chunk takes (".\n"), and changes within white space other than a line break
# before other white space ("\n  x": "\n", " ", " x"; the last space is counted in threes)
_JOINED = {"ul", "uo", "lo", "ol", "sl", "su", "so", "wl", "wu", "wo", "sp", "pn"}
_JOINED |= {"sw", "ws", "sn", "wn"}
_STARTS = _table(
    {16 * _CODE[a] + _CODE[b]: 1 for a in _KINDS for b in _KINDS if a != b and a + b not in _JOINED}
)
# Three neighbours, each in two bits (L a letter, S white space but a line break, O anything
# else, P punctuation): the last of two or more white space characters before something else
# starts a chunk ("x  y": "x", " ", " y"), and a lone punctuation character before letters
# joins them (",word", "'s") when neither punctuation nor a space comes before it
_TO_REDUCED = bytes.maketrans(bytes(range(9)), bytes([0, 0, 0, 1, 2, 2, 1, 3, 2]))
_SPLITS = _table({0b010100: 1, 0b010110: 1, 0b010111: 1})  # SSL, SSO, SSP
_ONE_JOINED = _table({0b001100: 1, 0b101100: 1})  # LPL, OPL
_FOUR_DIGITS = bytes([_CODE["d"]] * 4)
_LONG_NUMBER = re.compile(re.escape(_FOUR_DIGITS) + b"+")  # a literal start: searched fast


def chunk_bound(text: str) -> int:
    """At least the number of chunks o200k's pre-tokenizer cuts ``text`` into (cl100k's cuts
    digits and punctuation the same way), counted without its regular expression (which needs
    Unicode's letter classes, and takes some 40 ns a character): its first character, each
    change of class where a chunk can start, each third digit of a longer number, the splits
    of white space, and each unassigned character twice. It over-counts by a few percent: a
    contraction ("don't") as two chunks, punctuation before a word after a tab apart."""
    codes = _codes(text)
    size = len(codes)
    starts = min(size, 1) + codes.count(_CODE["x"])
    if size >= 2:
        starts += _marked(_neighbours(codes, 1), _STARTS)
        starts += sum((len(run) - 1) // 3 for run in _LONG_NUMBER.findall(codes))
    if size >= 3:
        threes = _neighbours(codes.translate(_TO_REDUCED), 2)
        starts += _marked(threes, _SPLITS) - _marked(threes, _ONE_JOINED)
    if size >= 2 and codes[0] == _CODE["p"] and codes[1] in _LETTERS:
        starts -= 1  # punctuation opening the text joins the letters after it
    return starts


_LETTERS = frozenset(_CODE[k] for k in "lou")


def _neighbours(codes: bytes, more: int) -> bytes:
    """Each run of ``more`` + 1 neighbours of ``codes`` as one byte, the first in the high
    bits: 4 bits a code for pairs (``more`` 1), 2 bits for threes (2). Computed on the whole
    text at once as one integer, shifted: no code carries into the next byte."""
    whole = int.from_bytes(codes, "little")
    later = whole >> 8 if more == 1 else whole >> 6 | whole >> 16  # the next codes, shifted
    joined = whole << 4 | later
    return joined.to_bytes(len(codes) + 1, "little")[: len(codes) - more]


def _marked(data: bytes, marks: bytes) -> int:
    """How many bytes of ``data`` ``marks`` (a translation table to 0 or 1) marks: counted as
    the bits of one integer (bytes.count of one byte value takes ten times as long)."""
    return int.from_bytes(data.translate(marks), "little").bit_count()


def _codes(text: str) -> bytes:
    """``text``'s characters' classes (see _CLASSES), one code a byte. Text that is mostly
    ASCII looks up only its runs of other characters (str.translate takes some 50 ns a
    character once one is not ASCII)."""
    if text.isascii():
        return text.encode().translate(_ASCII_CODES)
    if 16 * (len(text.encode("utf-8", "surrogatepass")) - len(text)) > len(text):
        return text.translate(_CLASSES).encode().translate(_TO_CODE)
    return text.encode("ascii", _OTHER_CODES).translate(_ASCII_CODES)


def _other_codes(error: UnicodeError) -> tuple[bytes, int]:
    """The codec error handler that gives a run of characters that are not ASCII as their
    codes, each + 0x80 (bytes the ASCII characters' codes cannot be)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return _run_codes(error.object[error.start : error.end]), error.end


@functools.lru_cache(maxsize=4_096)
def _run_codes(run: str) -> bytes:
    return run.translate(_CLASSES).encode().translate(_TO_HIGH_CODE)


_TO_HIGH_CODE = bytes.maketrans(_KINDS.encode(), bytes(0x80 + c for c in range(len(_KINDS))))
_OTHER_CODES = "morphz-token-classes"
codecs.register_error(_OTHER_CODES, _other_codes)
