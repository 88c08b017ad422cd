"""Text pre-processing for lexical recall on SQLite FTS5 (bm25 ranking).

Method
------
Both sides, documents and queries, go through the same Python step before FTS5 sees them:

* case-fold (done here, because the stopword test needs it; FTS5's ``unicode61`` case folding
  is then a no-op for the tokens we emit, and still folds diacritics): ``str.casefold``, not
  ``str.lower``, so ``Straße`` reads as ``strasse`` (as ``STRASSE`` does) and the Latin ligatures
  (``ﬁ``, ``ﬂ``, ``ﬀ``... U+FB00-FB06) as their letters;
* strip diacritics before stemming (``résumé`` -> ``resume``: what NFD decomposes), and fold the
  letters that do not decompose to their ASCII spellings (:data:`_UNDECOMPOSED`: ``ø`` -> ``o``,
  ``ł`` -> ``l``, ``æ`` -> ``ae``, ``þ`` -> ``th``, dotless ``ı`` -> ``i``...), so a person on an
  ASCII keyboard finds København, Łódź and Ærø;
* split into runs of Unicode letters and digits (the same notion of a token character as
  ``unicode61``: punctuation, ``_`` and apostrophes separate, so ``Caroline's`` -> ``caroline``
  ``s``);
* drop English stopwords (:data:`STOPWORDS`: the classic NLTK-style list, 152 entries once the
  apostrophe forms are reduced to the pieces the split makes: ``s``, ``t``, ``ll``, ``ve``...;
  it already holds the question words what/when/where/who/whom/which/why/how);
* fold full-width Latin letters and digits to ASCII;
* CJK runs (Han, kana, Hangul), which have no spaces between words, become overlapping character
  bigrams, plus the run's last character as a unigram (so that a one-character query can find a
  character in any position through a prefix query, see below).

* stem words with the Snowball English stemmer (Porter2, :func:`stem`, cached): FTS5's built-in
  ``porter`` tokenizer implements the original Porter algorithm, which stems *deploying* and
  *deployed* to ``deploi`` but *deployment* to ``deploy``, so a search for one missed the other.

The resulting space-separated token string is what gets indexed, with the FTS5 tokenizer
:data:`FTS5_TOKENIZER` (``unicode61``; the stemming is already done).  A query becomes an OR of its
distinct quoted terms (never an AND: a question rarely shares all its words with the answer); a
lone CJK character becomes a prefix term ``"x"*``.  Every term is double-quoted and contains only
letters and digits, so FTS5 syntax in the user text (AND, OR, NOT, NEAR, ``"``, ``:``, ``^``,
``*``, parentheses) is inert and the expression is never an FTS5 syntax error. Search ORs two
kinds of phrases beside the terms, built from the same tokens: the numbers written with
separators (:func:`number_phrases`) and the passages the query quotes (:func:`quoted_phrases`).

The index: one row per event with two columns, both filled through :func:`index_text`:
``body``, the event's own text (e.g. ``"Speaker: text"``), and ``near``, the text of the
previous observation of the same session (Morphz indexes only the previous one, so documents
never change after they are written; the research also measured previous + next);
rank with ``ORDER BY bm25(table, 1.0, CONTEXT_WEIGHT)`` (FTS5's bm25 has fixed k1 1.2, b 0.75).
The context column matters because the words of a question are often in the turn that prompted
the answer or in the reply to it, not in the answering turn itself.

Measured on the LoCoMo dev split (5 conversations, 997 questions with valid evidence, one index
per conversation, the question as query):

=========================================  =====  =====  ======  =====
variant                                    hit@1  hit@5  hit@10  MRR
=========================================  =====  =====  ======  =====
plain bm25 (unicode61, OR of words)        0.283  0.514  0.603   0.391
+ Porter stemming                          0.320  0.556  0.643   0.429
+ stopwords, no stemming                   0.327  0.554  0.632   0.432
+ Porter + stopwords (body only)           0.366  0.596  0.674   0.470
+ context = previous event, weight 0.5     0.391  0.699  0.783   0.530
+ context = previous + next, weight 0.5    0.400  0.708  0.798   0.530
as shipped: Snowball (Porter2), previous   0.393  0.706  0.784   0.524
=========================================  =====  =====  ======  =====

The context weight is flat between 0.4 and 0.6; leave-one-conversation-out choice of the weight
gives the same pooled figures.  Prefix matching of long query terms made things worse.

Cost (CPython 3.11): :func:`index_text` takes 4-7 µs for a 200-character ASCII English text,
about 12 µs when it has typographic punctuation (non-ASCII path), 25-30 µs for 200 CJK
characters; :func:`match_query` about 3 µs for a typical question.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import filterfalse, groupby
from typing import Final

import snowballstemmer  # type: ignore[import-untyped]

__all__ = [
    "CONTEXT_WEIGHT",
    "FTS5_TOKENIZER",
    "STOPWORDS",
    "index_text",
    "match_query",
    "query_terms",
    "quoted_phrases",
]

FTS5_TOKENIZER: Final = "unicode61 remove_diacritics 2"
"""Tokenizer argument for ``CREATE VIRTUAL TABLE ... USING fts5(..., tokenize='...')``."""

CONTEXT_WEIGHT: Final = 0.5
"""bm25 weight of the neighbouring-events column relative to the event's own text (1.0)."""

_STOPWORD_TEXT: Final = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against between
    into through during before after above below to from up down in out on off over under again
    further then once here there when where why how all any both each few more most other some
    such no nor not only own same so than too very s t can will just don should now d ll m o re
    ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren wouldn
"""

STOPWORDS: Final[frozenset[str]] = frozenset(_STOPWORD_TEXT.split())
"""English stopwords (classic list; contractions appear as the pieces the tokenizer makes).

``won`` is deliberately absent: it is the past tense of *win* far more often than a piece of
*won't* (whose ``t`` is dropped anyway)."""

_WORD: Final = re.compile(r"[^\W_]+")

# Pure-ASCII fast path: one C-level pass that lower-cases letters and turns every other
# character into a space; for ASCII input this equals ``_WORD.findall(text.lower())``.
_ASCII_FOLD: Final = str.maketrans(
    {chr(i): (chr(i).lower() if chr(i).isalnum() else " ") for i in range(128)}
)
_IS_STOP: Final = STOPWORDS.__contains__

# Full-width digits and Latin letters (U+FF10..) -> ASCII.
# CSI sequences (ESC [ ... final byte) and OSC sequences (ESC ] ... BEL or ESC \, or the end of
# the line when unterminated), then any
# other two-character escape
_ESCAPE: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b.?")
_HALFWIDTH_KANA: Final = re.compile("[\uff61-\uff9f]+")
_FULLWIDTH: Final = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
_FULLWIDTH_FOLD: Final = {
    c: c - 0xFEE0
    for lo, hi in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))
    for c in range(lo, hi + 1)
}

# Han (incl. extension A, compatibility ideographs, supplementary planes), iteration marks,
# Hiragana, Katakana (incl. phonetic extensions and half-width forms), Hangul syllables and jamo;
# and the scripts written, like them, without spaces between words: Thai, Lao, Myanmar, Khmer
# (their runs become bigrams too, so a word is found inside a sentence)
_CJK_CLASS: Final = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003ffff"
)
_CJK_RUN: Final = re.compile(f"[{_CJK_CLASS}]+")
# A CJK run, or a run of other letters/digits.
_MIXED: Final = re.compile(f"([{_CJK_CLASS}]+)|((?:(?![{_CJK_CLASS}])[^\\W_])+)")


@functools.cache
def _tables() -> tuple[str, str]:
    """The combining marks (categories Mn, Mc, Me) and the code points this Python's Unicode
    database does not assign (Cn), of the Basic Multilingual Plane, each as the ranges of a
    regex class. Built on first use (about 30 ms)."""
    marks: list[str] = []
    unassigned: list[str] = []
    for kind, points in groupby(range(0x10000), lambda p: unicodedata.category(chr(p))[0:2]):
        into = marks if kind[0] == "M" else unassigned if kind == "Cn" else None
        if into is not None:
            first, *rest = points
            last = rest[-1] if rest else first
            into.append(f"{re.escape(chr(first))}-{re.escape(chr(last))}")
    return "".join(marks), "".join(unassigned)


def _marked_words() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """_WORD and _MIXED, with combining marks (categories Mn, Mc, Me) continuing a word instead
    of splitting it: a Devanagari vowel sign or an Arabic haraka is part of its word (the marks
    with a combining class are then folded away by _unaccented, so عَرَبِيًّا finds عربيا); and
    a code point this Python's Unicode database does not assign taken as a letter (one a newer
    Unicode added, a Kawi letter, say), so that a word a newer Python indexed is the same word
    when an older one searches for it, and the other way round."""
    return _word_patterns("")


@functools.lru_cache(maxsize=64)
def _word_patterns(more: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """:func:`_marked_words`, with ``more`` (unassigned code points beyond the Basic
    Multilingual Plane) taken as letters too."""
    marks, unassigned = _tables()
    new = f"[{unassigned}{re.escape(more)}]"
    plain, letter = f"(?:[^\\W_]|{new})", f"(?:(?![{_CJK_CLASS}])[^\\W_]|{new})"
    word = re.compile(f"{plain}(?:{plain}|[{marks}])*")
    mixed = re.compile(f"([{_CJK_CLASS}]+)|({letter}(?:{letter}|[{marks}])*)")
    return word, mixed


# a character beyond the Basic Multilingual Plane that is no word character (an emoji, a
# symbol, or a code point this Python does not assign)
_OTHER_ASTRAL: Final = re.compile("[^\\w\\s\\x00-\\uffff]")


def _words_of(low: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The word patterns for ``low``: :func:`_marked_words`, with the unassigned code points
    beyond the Basic Multilingual Plane that ``low`` holds (they are few) as letters too."""
    if _OTHER_ASTRAL.search(low) is None:
        return _marked_words()
    found = {c for c in set(_OTHER_ASTRAL.findall(low)) if unicodedata.category(c) == "Cn"}
    return _word_patterns("".join(sorted(found)))


_MAX_QUERY_TERMS: Final = 128


_STEMMER: Final = snowballstemmer.stemmer("english")
_STEMS: dict[str, str] = {}
_MAX_STEMS: Final = 200_000
# The longest word whose stem is cached: longer ones (a DNA sequence, a minified blob, a long
# identifier in tool output) are stemmed the same way each time and not kept, so the cache
# holds at most _MAX_STEMS short words (about 50 MB at worst) whatever text is indexed
_MAX_CACHED_WORD: Final = 64


def stem(word: str) -> str:
    """The Snowball English (Porter2) stem of a lower-case word, cached: deployment, deploying,
    deployed and deploy all give ``deploy`` (FTS5's older Porter stemmer splits them). A word
    ending in a digit (``e42``, ``v2``) is its own stem: Porter2 only strips letter suffixes
    (tokens hold letters and digits only, so no leading apostrophe either),
    and such words (refs, versions) would otherwise fill the cache with one-off entries. A
    word longer than _MAX_CACHED_WORD is stemmed without being cached."""
    if word[-1:].isdigit():
        return word
    if len(word) > _MAX_CACHED_WORD:
        long_stem: str = _STEMMER.stemWord(word)
        return long_stem
    found = _STEMS.get(word)
    if found is None:
        if len(_STEMS) >= _MAX_STEMS:
            _STEMS.clear()
        found = _STEMS[word] = _STEMMER.stemWord(word)
    return found


def _composed(low: str) -> str:
    """``low`` in composed form (a word typed with combining marks, ``Zu\u0308rich``, would
    otherwise split at each mark, which is not a word character), without the dot above that
    case-folding Turkish dotted capital I leaves (``İstanbul`` reads as ``istanbul``)."""
    if not unicodedata.is_normalized("NFC", low):
        low = unicodedata.normalize("NFC", low)
    return low.replace("\u0307", "") if "\u0307" in low else low


# Letters with no decomposition (NFD leaves them whole, and so does FTS5's unicode61), as
# their usual ASCII spellings (after casefold, so lower-case only: casefold maps the capitals
# here and makes ß and ẞ ss). Dotless ı is i: a capital I lower-cases to i, so without it a
# Turkish word in capitals (KIŞ) and in lower case (kış) would not match each other.
_UNDECOMPOSED: Final = str.maketrans(
    {
        "ø": "o",
        "ł": "l",
        "đ": "d",
        "ð": "d",
        "æ": "ae",
        "œ": "oe",
        "þ": "th",
        "ħ": "h",
        "ŧ": "t",
        "ı": "i",
        "ĳ": "ij",
        "ŀ": "l",
        "ǿ": "o",  # the composed forms of these letters with a mark (NFC makes ø + ◌́ ǿ)
        "ǽ": "ae",
        "ǣ": "ae",
    }
)

_HAS_UNDECOMPOSED: Final = re.compile("[" + "".join(map(chr, _UNDECOMPOSED)) + "]")


def _folded(text: str) -> str:
    """``text`` case-folded (:func:`_composed`), with the letters that do not decompose spelled
    as :data:`_UNDECOMPOSED` says (``ø`` -> ``o``): one search, and a translation only for a
    text that holds one (translating every text costs a tenth more on Cyrillic)."""
    low = _composed(text.casefold())
    return low.translate(_UNDECOMPOSED) if _HAS_UNDECOMPOSED.search(low) else low


def _unaccented(word: str) -> str:
    """``word`` without its diacritics (``résumé`` -> ``resume``) before it is stemmed: folded
    after stemming, as FTS5's ``remove_diacritics`` would, a stem that depends on a final
    accented letter (``resum`` / ``resume``) would no longer match its plain spelling (the
    letters that do not decompose were spelled out before: :func:`_folded`)."""
    if word.isascii():
        return word
    folded = "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", folded)


def _tokens(text: str, *, trailing_unigram: bool, stemmed: bool = True) -> list[str]:
    """Case-folded, stemmed tokens of ``text`` without stopwords; CJK runs become bigrams.

    Full-width Latin letters and digits (common in CJK text) are folded to ASCII first, so that
    they match their ordinary forms (a full NFKC normalisation costs ~20 µs per 100 CJK characters
    because of the full-width punctuation, and buys nothing for tokens).

    With ``trailing_unigram`` a CJK run of two or more characters also yields its last
    character (index side); a one-character run always yields that character.
    """
    if "\x1b" in text:  # terminal escape sequences (colour codes in tool output) are no words
        text = _ESCAPE.sub(" ", text)
    if text.isascii():
        words = filterfalse(_IS_STOP, text.translate(_ASCII_FOLD).split())
        return [stem(w) for w in words] if stemmed else list(words)
    if _FULLWIDTH.search(text):
        text = text.translate(_FULLWIDTH_FOLD)
    if _HALFWIDTH_KANA.search(text):  # ｶﾀｶﾅ as カタカナ (NFKC also joins ﾃﾞ into デ)
        text = _HALFWIDTH_KANA.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    low = _folded(text)
    plain, mixed = _words_of(low)
    if not _CJK_RUN.search(low):
        words = filterfalse(_IS_STOP, map(_unaccented, plain.findall(low)))
        return [stem(w) for w in words] if stemmed else list(words)
    out: list[str] = []
    for cjk, found in mixed.findall(low):
        if not cjk:
            word = _unaccented(found)
            if word not in STOPWORDS:
                out.append(stem(word) if stemmed else word)
        elif len(cjk) == 1:
            out.append(cjk)
        else:
            out.extend([cjk[i : i + 2] for i in range(len(cjk) - 1)])
            if trailing_unigram:
                out.append(cjk[-1])
    return out


def index_text(text: str) -> str:
    """Return the token string to store in an FTS5 column for ``text``.

    Tokens are case-folded, stopwords are removed and CJK runs are turned into bigrams; the
    tokens are joined by single spaces.  Index it with :data:`FTS5_TOKENIZER`, which adds Porter
    stemming.  The result may be empty (e.g. "Is it?").
    """
    return " ".join(_tokens(text, trailing_unigram=True))


def query_terms(query: str, max_terms: int = _MAX_QUERY_TERMS) -> list[str]:
    """Distinct search terms of ``query`` in order of first appearance (at most ``max_terms``).

    A CJK run of two or more characters yields its bigrams (without the trailing unigram that
    :func:`index_text` adds); a lone CJK character is kept as it is.
    """
    words = _tokens(query, trailing_unigram=False)
    return list(dict.fromkeys(words))[:max_terms]


def query_words(query: str, max_terms: int = _MAX_QUERY_TERMS) -> list[str]:
    """The words of ``query`` that are searched (case-folded, no stopwords), before stemming:
    what to show a person as "matched"."""
    words = _tokens(query, trailing_unigram=False, stemmed=False)
    return list(dict.fromkeys(words))[:max_terms]


def match_query(query: str, max_terms: int = _MAX_QUERY_TERMS) -> str | None:
    """Turn arbitrary user text into a safe FTS5 MATCH expression, or None if nothing is left.

    The expression is an OR of the distinct quoted terms (see :func:`query_terms`); a lone CJK
    character becomes the prefix term ``"x"*`` so that it matches the bigrams that start with it
    (and the trailing unigram of a run).  Use it with ``ORDER BY bm25(...)``.
    """
    terms = query_terms(query, max_terms)
    if not terms:
        return None
    return " OR ".join(quote_term(t) for t in terms)


def quote_term(term: str) -> str:
    """One query term as an FTS5 expression: quoted; a lone CJK character as a prefix term."""
    return f'"{term}"*' if len(term) == 1 and _CJK_RUN.match(term) else f'"{term}"'


_JOINED_NUMBER = re.compile(r"\d+(?:[.\-/:]\d+)+")


def number_phrases(query: str) -> list[str]:
    """FTS5 phrases of the numbers ``query`` writes with separators (a version 1.2.3, a date
    2026-08-04, a time 09:30): their digit groups, adjacent and in order. OR-ed beside the
    terms, they rank a text holding the number as written above one holding its groups in
    another order (3.2.1), which the terms alone score the same."""
    out = []
    for found in _JOINED_NUMBER.finditer(query):
        groups = _tokens(found.group(), trailing_unigram=False)  # repeats kept: 1.2.1.3
        if len(groups) > 1:
            out.append('"' + " ".join(groups) + '"')
    return list(dict.fromkeys(out))


_QUOTED = re.compile(r'"([^"]*)"')


def quoted_phrases(query: str) -> list[str]:
    """FTS5 phrases of the passages ``query`` puts between double quotes (``"quick brown"``):
    their tokens, adjacent and in order, each phrase once. OR-ed beside the terms, they rank a
    text holding the passage above one holding its words apart; the words still match alone.
    A passage of fewer than two tokens adds nothing (its term is there already), and a query
    with an odd number of double quotes has no phrase (which quote closes which is unknown)."""
    if query.count('"') % 2:
        return []
    out = []
    for found in _QUOTED.finditer(query):
        tokens = _tokens(found.group(1), trailing_unigram=False)[:_MAX_QUERY_TERMS]
        if len(tokens) > 1:  # tokens are letters and digits only: the phrase is inert text
            out.append('"' + " ".join(tokens) + '"')
    return list(dict.fromkeys(out))


BODY_ONLY: Final = "{body} : "
"""The prefix of :func:`all_in_body` and :func:`any_in_body` expressions (an FTS5 column
filter on ``body``)."""


def all_in_body(quoted: list[str]) -> str:
    """The FTS5 expression for documents whose own text (the ``body`` column) holds every one
    of the ``quoted`` terms (see :func:`quote_term`). Words in the ``near`` column neither match
    nor add to the bm25 score (its length still counts in the length normalization)."""
    return f"{BODY_ONLY}({' AND '.join(quoted)})"


def any_in_body(quoted: list[str]) -> str:
    """The FTS5 expression for documents whose own text holds any of the ``quoted`` terms: the
    broad match of common words that no document holds together (see :func:`all_in_body`)."""
    return f"{BODY_ONLY}({' OR '.join(quoted)})"


def is_in_body(match: str) -> bool:
    """Whether ``match`` was built by :func:`all_in_body` or :func:`any_in_body` (a broad match
    of common words, which can hold thousands of documents)."""
    return match.startswith(BODY_ONLY)
