"""Review 9e, recall: delivered results and the preview threshold, and tokens of scripts whose
words carry combining marks or come in half-width forms. Each test fails on the code it was
written against (a9cbf77) and states the behaviour expected once fixed."""

from __future__ import annotations

import morphz
from test_recall import commit, keys, say


def _inbox_line(ctx: morphz.Context, ref: str) -> str:
    return next(x for x in ctx.encode().region("inbox").splitlines() if f"(observation {ref} " in x)


# ------------------------------------------------------------------ delivered results


def test_a_delivered_search_page_is_not_itself_a_preview(ctx: morphz.Context) -> None:
    """The recall tool's search (limit 1-100, as its description offers) is delivered as a
    recall_result observation; like a delivered read, that observation must fit the context's
    preview threshold, or the agent sees the head and tail of the result and the middle hits are
    omitted. Expected: the page is cut to the hits whose delivered text fits (next_cursor goes on
    from there), so every delivered page shows whole and paging on reaches every hit once.
    Today a limit of 100 delivers about 45,000 characters against the default 16,000."""
    for i in range(120):
        say(ctx, f"harbour crane report {i} " + "lorem ipsum dolor sit amet " * 20)
    seen: list[str] = []
    cursor = None
    for _ in range(50):
        page, event = ctx.recall.deliver("search", query="harbour", limit=100, cursor=cursor)
        assert "(preview " not in _inbox_line(ctx, event.ref), len(event.text or "")
        seen.extend(keys(page))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 120


def test_a_delivered_traversal_is_not_itself_a_preview(ctx: morphz.Context) -> None:
    """The recall tool's frame op (with include_bodies, 50 nodes a page: the tool cannot choose
    fewer) is delivered as a recall_result observation, which must show whole in the inbox.
    Expected: a page whose delivered text would pass the preview threshold holds fewer nodes
    (its next_cursor goes on from there). Today 40 frames of 600-character bodies deliver
    about 37,000 characters and arrive as a head and tail."""
    commit(ctx, "(create port/root (harbour))")
    long_body = "x" * 600
    commit(
        ctx,
        *(f'(create port/n{i} (note "{long_body}"))' for i in range(40)),
        *(f"(relate port/n{i} about port/root)" for i in range(40)),
    )
    page, event = ctx.recall.deliver(
        "frame", frame_id="port/root", direction="descendants", include_bodies=True
    )
    assert "(preview " not in _inbox_line(ctx, event.ref), len(event.text or "")
    assert page.nodes[0].id == "port/root"


# ------------------------------------------------------------------ tokens


def test_half_width_katakana_finds_full_width_katakana(ctx: morphz.Context) -> None:
    """Full-width Latin letters and digits are folded to ASCII so that both forms match; the
    half-width katakana of Japanese legacy text (ｶﾀｶﾅ, U+FF66-FF9F) is the same kind of width
    variant and should match its ordinary form (カタカナ) both ways. Today neither finds the
    other."""
    full = say(ctx, "カタカナの資料")
    half = say(ctx, "ﾃｽﾄ用のﾃﾞｰﾀ")
    assert full in keys(ctx.recall.search("ｶﾀｶﾅ"))
    assert half in keys(ctx.recall.search("テスト"))


def test_a_hindi_word_does_not_match_unrelated_words_sharing_its_letters(
    ctx: morphz.Context,
) -> None:
    """Devanagari vowel signs and the virama are combining marks (Mn/Mc). The Python split
    (``[^\\W_]+``) treats them as separators, unlike FTS5's unicode61 which the module says it
    mirrors, so किताब (book) is indexed and searched as the lone letters क त ब, and a search
    for it also returns कुत्ता (dog), shredded into क त त. Expected: marks stay inside their
    word, so the search for किताब finds only the text that holds it."""
    book = say(ctx, "मुझे एक किताब चाहिए")
    say(ctx, "कुत्ता बहुत तेज़ भौंकता है")
    assert keys(ctx.recall.search("किताब")) == [book]


def test_an_arabic_word_written_with_vowel_marks_finds_it_written_without(
    ctx: morphz.Context,
) -> None:
    """Arabic is mostly written without its short-vowel marks (harakat), which are combining
    marks; a word typed with them must find the same word written without them, as résumé finds
    resume (diacritics are folded). Today the split breaks عَرَبِيًّا into the letters ع ر ب ي
    and nothing is found. Same for Hebrew with niqqud (שָׁלוֹם / שלום)."""
    arabic = say(ctx, "أريد كتابا عربيا")
    hebrew = say(ctx, "שלום עולם")
    assert keys(ctx.recall.search("عَرَبِيًّا")) == [arabic]
    assert keys(ctx.recall.search("שָׁלוֹם")) == [hebrew]
