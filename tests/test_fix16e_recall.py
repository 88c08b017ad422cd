"""Review 16e's recall findings, fixed: a frame's document holds its sources (and a traversal
can start from an event towards the frames citing it), letters without a decomposition fold to
their ASCII spellings, a quoted passage ranks the texts holding it first; migration 0025 marks
the older indexes stale."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz.errors import InputError, RecordNotFoundError
from morphz.mind.state import Edge, Frame
from morphz.recall import documents, tokenize
from morphz.recall import search as search_module
from morphz.recall.tokenize import index_text, query_terms, query_words, quoted_phrases
from recalls import commit, keys, say
from stores import run_sql

# ------------------------------------------------------------------ frames by their sources


def test_a_frame_whose_sources_alone_change_is_found_by_its_new_sources(
    ctx: morphz.Context,
) -> None:
    """A revise with ``from`` and the same body changes only the sources: the document is
    written again (the live index stays what a rebuild makes)."""
    first = say(ctx, "first evidence")
    second = say(ctx, "second evidence")
    commit(ctx, f"(derive pay/issue (from {first}) (fact slow))")
    commit(ctx, f"(revise pay/issue (from {second}) (fact slow))")
    assert keys(ctx.recall.search(second, kinds=["frames"])) == ["frame:pay/issue"]
    assert keys(ctx.recall.search(first, kinds=["frames"])) == []
    live = ctx.recall_index.documents()
    ctx.recall_index.rebuild()
    assert ctx.recall_index.documents() == live


def test_a_frame_is_found_by_the_frame_it_cites(ctx: morphz.Context) -> None:
    commit(ctx, "(create zebra/herd (fact grazing))")
    commit(ctx, "(derive plan/trip (from zebra/herd) (fact safari))")
    found = keys(ctx.recall.search("zebra", kinds=["frames"]))
    assert found[0] == "frame:zebra/herd" and "frame:plan/trip" in found


def test_a_source_ref_tokenises_as_the_query_ref_does() -> None:
    frame = Frame("a/b", "(x)", ("@e12", "c/d"), 1, "active", False, 1.0)
    edges: list[Edge] = []
    text = index_text(documents.frame_text(frame, edges))
    assert set(query_terms("@e12")) <= set(text.split()) and "e1" not in text.split()


def test_a_traversal_starts_from_an_event_towards_the_frames_citing_it(
    ctx: morphz.Context,
) -> None:
    evidence = say(ctx, "the payment gateway timed out")
    commit(ctx, f"(derive pay/issue (from {evidence}) (fact slow))")
    commit(ctx, "(derive pay/fix (from pay/issue) (fact retry))")
    page = ctx.recall.frame(evidence, direction="descendants")
    assert [(n.id, n.type, n.depth) for n in page.nodes] == [
        (evidence, "event", 0),
        ("pay/issue", "frame", 1),
        ("pay/fix", "frame", 2),
    ]
    both = ctx.recall.frame(evidence, direction="both", include_events=True)
    assert [n.id for n in both.nodes] == [evidence, "pay/issue", "pay/fix"]
    assert ctx.recall.frame(evidence).nodes == page.nodes  # the default from an event: down
    with pytest.raises(InputError, match="descendants"):
        ctx.recall.frame(evidence, direction="ancestors")
    with pytest.raises(RecordNotFoundError, match="no event @e99"):
        ctx.recall.frame("@e99", direction="descendants")


# ------------------------------------------------------------------ folding


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("KIŞ geldi", "kış"),  # a capital I lower-cases to i: dotless ı reads as i
        ("ΣΊΣΥΦΟΣ", "σίσυφος"),  # casefold: final sigma as sigma
        ("O\u0338resund", "oresund"),  # not composable: left alone, found by the plain o
        ("Ø\u0301resund", "oresund"),  # NFC makes it Ǿ
        ("STRASSE 5", "Straße"),
        ("Þingvellir", "thingvellir"),
    ],
)
def test_folding_holds_on_both_sides(ctx: morphz.Context, text: str, query: str) -> None:
    ref = say(ctx, text)
    say(ctx, "something else entirely")
    assert keys(ctx.recall.search(query)) == [ref]


def test_the_matched_words_are_shown_folded() -> None:
    assert query_words("Straße København") == ["strasse", "kobenhavn"]


def test_cjk_and_full_width_text_is_tokenised_as_before() -> None:
    assert index_text("ＡＢＣ 我们需要") == "abc 我们 们需 需要 要"
    assert index_text("ｶﾀｶﾅ") == index_text("カタカナ")


# ------------------------------------------------------------------ quoted phrases


def test_quoted_phrases_are_built_from_balanced_quotes_only() -> None:
    assert quoted_phrases('"quick brown" fox') == ['"quick brown"']
    assert quoted_phrases('"quick brown fox') == []
    assert quoted_phrases('"quick" "a b" "lazy dogs"') == ['"lazi dog"']  # one token: none
    assert quoted_phrases('"NEAR(quick OR brown)*" ^x') == ['"near quick brown"']


def test_fts5_syntax_inside_quotes_is_inert(ctx: morphz.Context) -> None:
    ref = say(ctx, "near quick brown things")
    say(ctx, "brown and quick")
    assert keys(ctx.recall.search('"NEAR(quick OR brown)*" ^x:'))[0] == ref


def test_unbalanced_quotes_rank_as_no_quotes(ctx: morphz.Context) -> None:
    say(ctx, "the quick brown fox")
    say(ctx, "brown bears are quick")
    plain = ctx.recall.search("quick brown")
    assert ctx.recall.search('"quick brown').hits == plain.hits


def test_a_quoted_phrase_of_common_words_ranks_first(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every word common (in two documents or more): the phrase is OR-ed beside the match of
    all the words, and ranks the text holding it above the newer one holding them apart."""
    monkeypatch.setattr(search_module, "COMMON_DOCS", 1)
    phrase = say(ctx, "quick brown fox")
    apart = say(ctx, "a fox, quick and brown")
    say(ctx, "brown bears are quick")
    assert keys(ctx.recall.search('"brown fox" quick')) == [phrase, apart]


# ------------------------------------------------------------------ migration 0025


def _old_tokens(text: str) -> str:
    return tokenize._composed(text.lower())


def _old_frame_text(frame: Frame, edges: list[Edge]) -> str:
    parts = [frame.id.replace("/", " "), frame.body]
    for subject, relation, obj in edges:
        other = obj if subject == frame.id else subject
        parts.append(f"{relation.replace('-', ' ')} {other.replace('/', ' ')}")
    return " ".join(parts)


def test_open_rebuilds_an_index_of_the_older_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    with monkeypatch.context() as old:  # the tokens and frame documents before 0025
        old.setattr(tokenize, "_folded", _old_tokens)
        old.setattr(documents, "frame_text", _old_frame_text)
        with morphz.open(path) as db:
            ctx = db.context("c", create=True)
            ref = say(ctx, "the København harbour office")
            commit(ctx, f"(derive port/note (from {ref}) (fact open))")
            assert keys(ctx.recall.search("kobenhavn")) == []
            assert keys(ctx.recall.search(ref, kinds=["frames"])) == []
    run_sql(path, "DELETE FROM schema_migrations WHERE number = 25")
    with morphz.open(path) as db:
        ctx = db.context("c")
        assert ctx.recall_index.inspect().current
        assert keys(ctx.recall.search("kobenhavn")) == [ref]
        assert keys(ctx.recall.search(ref, kinds=["frames"])) == ["frame:port/note"]


def test_a_damaged_store_still_opens_when_its_index_is_stale(tmp_path: Path) -> None:
    """An event that cannot be read stops the rebuild a migration asks for: the store opens
    anyway, its index left as it was and marked stale, so that the audit can report the
    damage (and the next open tries again)."""
    path = tmp_path / "m.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        say(ctx, "the harbour office")
        say(ctx, "damaged soon")
    run_sql(
        path,
        "UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE seq = 2",
        "UPDATE recall_meta SET indexed_seq = -1",
    )
    for _ in range(2):
        with morphz.open(path) as db:
            ctx = db.context("c")
            assert not ctx.recall_index.inspect().current
            assert keys(ctx.recall.search("harbour")) == ["@e1"]
            report = ctx.audit()
            assert any("cannot be read" in d for d in report.differences), report.differences
