"""recall.search.preview reads a bounded prefix of its text (review 17c): the same output as
its old definition, which split the whole text, for every text and limit."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st

from morphz.graphemes import boundary
from morphz.recall.search import preview

# every character str.split() splits on, and a few that look like spaces but are not
_SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
_NOT_SPACES = ["\u200b", "\u180e", "\ufeff", "\u2060"]
# characters a cut must not split: accents, joiners, flags' halves, skin tones, jamo, CR LF
_JOINING = ["\u0301", "\u200d", "\U0001f1eb", "\U0001f1f7", "\U0001f3fd", "\u1100", "\u1161"]
_CHARS = st.sampled_from([*_SPACES, *_NOT_SPACES, *_JOINING, "a", "é", "👍", "\u094d", "क"])


def _old(text: str, limit: int) -> str:
    """The preview as it was defined before: the whole text split, joined, then cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: boundary(flat, limit - 1, -1)] + "…"


@given(st.lists(st.one_of(_CHARS, st.characters()), max_size=80).map("".join), st.integers(1, 40))
def test_the_preview_is_the_old_definition(text: str, limit: int) -> None:
    assert preview(text, limit) == _old(text, limit)


@given(st.text(max_size=600))
def test_the_preview_at_its_default_limit(text: str) -> None:
    assert preview(text) == _old(text, 240)


def test_a_huge_word_and_long_spaces() -> None:
    for text in ("x" * 10_000, " \t\n" * 5_000 + "y", "a" * 239 + " " * 900 + "bc"):
        for limit in (1, 2, 239, 240, 241):
            assert preview(text, limit) == _old(text, limit)
