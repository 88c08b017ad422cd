"""Where text may be cut without splitting what a reader sees as one character (the inbox's
previews and recall's hit previews both cut so). Its token estimate is morphz.token_estimate's."""

from __future__ import annotations

import unicodedata

_JOINERS = {"\u200c", "\u200d"}  # zero-width (non-)joiner
MAX_SHIFT = 32  # characters a cut moves at most to keep a character whole


def _joins(text: str, cut: int) -> bool:
    """Whether cutting ``text`` before index ``cut`` would split what a reader sees as one
    character: a mark (a combining accent, an Indic or Thai vowel sign, a keycap), variation
    selector, emoji modifier or tag after the cut, a zero-width joiner on either side of it, a
    prepended concatenation mark (an Arabic number sign) before it, the two halves of a flag, a
    Hangul syllable spelled in jamo, an Indic conjunct (a virama and the consonant after it),
    or CR LF."""
    after, before = text[cut], text[cut - 1]
    point = ord(after)
    return (
        unicodedata.category(after)[0] == "M"
        or after in _SPACING_LO  # Thai and Lao SARA AM: letters (Lo) that join as marks
        or after in _EXTEND_LM  # half-width voiced sound marks: Lm, but Grapheme_Extend
        or (before in _PREPEND and after not in "\r\n")
        or _hangul_joins(ord(before), point)
        or (before in _LINKERS and unicodedata.category(after) == "Lo")
        or (before == "\r" and after == "\n")
        or after in _JOINERS
        or before in _JOINERS
        or 0xFE00 <= point <= 0xFE0F
        or 0xE0100 <= point <= 0xE01EF
        or 0x1F3FB <= point <= 0x1F3FF
        or 0xE0020 <= point <= 0xE007F
        or (_regional(after) and _flag_half(text, cut))
    )


_SPACING_LO = {"\u0e33", "\u0eb3"}
_EXTEND_LM = {"\uff9e", "\uff9f"}  # ﾞ and ﾟ: ｶﾞ is one character, ガ
# Grapheme_Cluster_Break=Prepend (Unicode 15.1, GB9b: joined to what follows): the Arabic number
# and year signs and the other prepended concatenation marks, and the Brahmic letters so marked
_PREPEND = frozenset(
    map(
        chr,
        [
            *range(0x0600, 0x0606),
            0x06DD,
            0x070F,
            0x0890,
            0x0891,
            0x08E2,
            0x0D4E,
            0x110BD,
            0x110CD,
            0x111C2,
            0x111C3,
            0x1193F,
            0x11941,
            0x11A3A,
            *range(0x11A84, 0x11A8A),
            0x11D46,
            0x11F02,
        ],
    )
)

# viramas that join the consonants around them into one conjunct (Unicode 15.1, GB9c:
# Indic_Conjunct_Break=Linker): Devanagari, Bengali, Gujarati, Oriya, Telugu, Malayalam
_LINKERS = {"\u094d", "\u09cd", "\u0acd", "\u0b4d", "\u0c4d", "\u0d4d"}


def _hangul(point: int) -> str:
    """The Hangul syllable type of a code point: L, V, T (jamo), LV, LVT (syllables) or ''."""
    if 0x1100 <= point <= 0x115F or 0xA960 <= point <= 0xA97C:
        return "L"
    if 0x1160 <= point <= 0x11A7 or 0xD7B0 <= point <= 0xD7C6:
        return "V"
    if 0x11A8 <= point <= 0x11FF or 0xD7CB <= point <= 0xD7FB:
        return "T"
    if 0xAC00 <= point <= 0xD7A3:
        return "LV" if (point - 0xAC00) % 28 == 0 else "LVT"
    return ""


def _hangul_joins(before: int, after: int) -> bool:
    """Whether two code points belong to one Hangul syllable (GB6-GB8): L before L, V or a
    syllable; LV or V before V or T; LVT or T before T."""
    if before < 0x1100 or after < 0x1100:  # the common case, without the lookups
        return False
    left, right = _hangul(before), _hangul(after)
    return (
        (left == "L" and right in ("L", "V", "LV", "LVT"))
        or (left in ("LV", "V") and right in ("V", "T"))
        or (left in ("LVT", "T") and right == "T")
    )


def _regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _flag_half(text: str, cut: int) -> bool:
    """Whether an odd run of regional indicators ends at ``cut``: flags pair them from the
    run's start, so the cut falls inside a flag."""
    run, at = 0, cut - 1
    while at >= 0 and _regional(text[at]):
        run, at = run + 1, at - 1
    return run % 2 == 1


def boundary(text: str, cut: int, step: int) -> int:
    """``cut`` moved by ``step`` (-1: shorter head, +1: shorter tail) to the nearest place
    that keeps characters whole, at most MAX_SHIFT away (else ``cut`` itself: a run of marks
    that long has no such place worth keeping)."""
    at = cut
    for _ in range(MAX_SHIFT + 1):
        if at <= 0 or at >= len(text) or not _joins(text, at):
            return at
        at += step
    return cut
