"""Review 13, encoding: the Context Encoding's previews, determinism and prefix property.

Each test fails on the code it was written against and states, in its docstring, what should
happen instead.
"""

from __future__ import annotations

import unicodedata

import morphz
from morphz.txlang import read_one


def _preview(ctx: morphz.Context, text: str) -> tuple[str, str]:
    """The head and tail of the inbox preview of ``text`` observed now."""
    ctx.observe("tool_result", text)
    encoding = ctx.encode()
    assert len(text) > encoding.view.preview_threshold
    item = read_one(encoding.region("inbox")).items[-1]  # (observation @eN ... (preview ...))
    preview = item.items[-1]
    parts = {p.items[0].text: p for p in preview.items[1:] if hasattr(p, "items")}
    return parts["head"].items[1].value, parts["tail"].items[1].value


def _continues_a_syllable(char: str) -> bool:
    """A conjoining Hangul medial vowel or final consonant (U+1160-U+11FF, U+D7B0-U+D7FF):
    it belongs to the syllable the jamo before it starts, so no cut may fall before it."""
    return "\u1160" <= char <= "\u11ff" or "\ud7b0" <= char <= "\ud7ff"


def test_a_preview_does_not_cut_a_decomposed_hangul_syllable(ctx: morphz.Context) -> None:
    """Korean text in NFD (macOS file names, `ls` output in a tool result) spells each
    syllable as two or three conjoining jamo: 각 is U+1100 U+1161 U+11A8. A preview cut
    between them shows a different syllable (the head ends in 가, the tail begins with a bare
    final consonant), which docs/decisions.md's "Previews keep characters whole" ("no preview
    shows half a character") rules out. Today `graphemes._joins` only keeps marks (category
    M), joiners, variation selectors, emoji modifiers and tags, and flags whole; the medial
    vowels and final consonants are letters (Lo), so the 2,000-character head and the
    1,000-character tail are cut inside syllables."""
    syllable = unicodedata.normalize("NFD", "각")
    assert len(syllable) == 3
    text = syllable * 6_000  # 18,000 code points: 2,000 and 17,000 both fall inside a syllable
    head, tail = _preview(ctx, text)
    assert not _continues_a_syllable(text[len(head)]), "the head ends inside a syllable"
    assert not _continues_a_syllable(tail[0]), "the tail begins inside a syllable"


def test_a_preview_does_not_cut_a_devanagari_conjunct(ctx: morphz.Context) -> None:
    """क्ष (U+0915 U+094D U+0937, a conjunct: consonant, virama, consonant) is one
    user-perceived character (Unicode 15.1 extended grapheme clusters, rule GB9c). A head that
    ends with the virama shows a dead क् in place of क्ष, and the tail then starts with a bare
    ष. Today `graphemes._joins` keeps a mark after the cut whole with its letter, but not the
    consonant after a virama, so the default preview of repeated क्ष ends its head in the
    middle of the conjunct."""
    conjunct = "\u0915\u094d\u0937"
    text = conjunct * 6_000
    head, tail = _preview(ctx, text)
    assert not head.endswith("\u094d"), "the head ends with a virama, its conjunct cut in two"
    assert not text[: len(text) - len(tail)].endswith("\u094d"), "the tail starts mid-conjunct"
