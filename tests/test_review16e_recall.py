"""Review 16e, recall as an agent and a person use it: search quality on small hand-made
histories whose right answer is known.

Each test fails on the code it was written against (9d39fcb) and states the expected behaviour
in its docstring.
"""

from __future__ import annotations

import pytest

import morphz
from recalls import commit, keys, say

# ------------------------------------------------------------------ frames by their sources


def test_a_frame_is_found_by_the_event_it_was_derived_from(ctx: morphz.Context) -> None:
    """DESIGN §8: the recall index holds frames with their "id, body, sources, relations,
    lifecycle". The frame document (documents.frame_text) holds the id, the body and the
    relations only, so a search for the ref of an event finds no frame derived from it; and
    `recall frame` takes a frame id only (traverse.traverse refuses ``@e1`` as "no frame"),
    so from an event found by search there is no way to reach the conclusions drawn from it.
    Expected: searching the event's ref among frames finds the frame that cites it."""
    evidence = say(ctx, "the payment gateway timed out")
    say(ctx, "unrelated chatter about lunch")
    commit(ctx, f'(derive pay/issue (from {evidence}) (fact "slow upstream"))')
    commit(ctx, '(create lunch/plan (fact "noodles"))')
    assert keys(ctx.recall.search(evidence, kinds=["frames"])) == ["frame:pay/issue"]


# ------------------------------------------------------------------ folding


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("meet me at Straße 5", "strasse"),
        ("the København harbour office", "kobenhavn"),
        ("the Łódź meeting moved", "lodz"),
        ("ferry to Ærø island", "aero"),
        ("the ﬁnancial report is late", "financial"),
    ],
    ids=["sharp-s", "o-stroke", "l-stroke", "ae-ligature", "fi-ligature"],
)
def test_letters_without_a_decomposition_fold_as_accents_do(
    ctx: morphz.Context, text: str, query: str
) -> None:
    """An accent typed without its mark is found (``resume`` finds ``résumé``, ``zurich`` finds
    ``Zürich``): tokenize._unaccented strips what NFD decomposes and FTS5's unicode61 folds the
    rest of what it knows. Letters that do not decompose (ß, ø, ł, æ, đ, œ, þ) and
    compatibility forms (the ligature ﬁ, which NFKC splits) are left as they are, by both, so
    a person on an ASCII keyboard never finds København, Łódź or Straße; ``str.lower`` keeps
    ß where ``str.casefold`` gives ss, and ``STRASSE`` stems to ``strass``. Expected: these
    letters fold to their ASCII spellings on both sides (index and query), as accents do."""
    ref = say(ctx, text)
    say(ctx, "something else entirely")
    assert keys(ctx.recall.search(query)) == [ref]


# ------------------------------------------------------------------ quoted phrases


def test_a_quoted_phrase_ranks_the_text_holding_it_first(ctx: morphz.Context) -> None:
    """A query's double quotes are dropped (tokenize: "FTS5 syntax in the user text is inert"),
    so ``"quick brown"`` is the OR of two words: a text holding both words anywhere scores the
    same as one holding the phrase, and the tie goes to the newer one. search._match already
    ranks numbers as written first (number_phrases ORs their groups as an FTS5 phrase); a phrase
    the person quoted deserves the same. Expected: the text holding the quoted phrase comes
    first."""
    phrase = say(ctx, "the quick brown fox")
    say(ctx, "brown bears are quick")
    say(ctx, "filler text one")
    say(ctx, "filler text two")
    assert keys(ctx.recall.search('"quick brown"'))[0] == phrase
