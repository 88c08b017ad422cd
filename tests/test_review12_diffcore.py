"""Review 12, this session's changes to the core (46ef271..HEAD): the old bodies a commit records
(``replaced`` / ``undone``) and how recall shows them, and ids with combining marks
(morphz.ids._marked_id). Each test fails on the code it was written against (8701b35) and states
the expected behaviour in its docstring."""

from __future__ import annotations

import unicodedata

import pytest

import morphz
from morphz.errors import MorphzError
from morphz.ids import describe_id_rules, is_id
from morphz.txlang import validate
from test_recall import commit

# ------------------------------------------------------------------ old bodies in recall


def _revised(ctx: morphz.Context, new_body: str = "walrus crossing at the southern bay") -> str:
    """plan/route created with a narwhal, then revised; the ref of the revising commit."""
    commit(ctx, '(create plan/route (fact "narwhal crossing at the northern fjord"))')
    commit(ctx, f'(revise plan/route (fact "{new_body}"))')
    return ctx.events()[-1].ref


def test_reading_the_commit_a_search_for_an_earlier_body_finds_shows_that_body(
    ctx: morphz.Context,
) -> None:
    """The protocol tells the model "Search finds a frame's earlier bodies through the
    transaction that revised it", and the model's recall tool has only search, read and frame.
    Expected: reading the commit that a search for the earlier body's words returns (recall
    read @eN, what the model does next) shows that earlier body. Today the hit's preview holds
    the reason, the new transaction text and the frame's id, and `read` returns the event's
    text (the transaction source, with the *new* body): the words "narwhal ... fjord" that
    matched are nowhere the model can see, so the earlier body is found but unreadable."""
    revised = _revised(ctx)
    hits = ctx.recall.search("narwhal fjord").hits
    assert [h.ref for h in hits] == [revised]
    page = ctx.recall.read(revised, limit=100_000)
    assert "narwhal crossing at the northern fjord" in page.text, page.text


def test_reading_a_rollback_shows_the_bodies_it_undid(ctx: morphz.Context) -> None:
    """docs/decisions.md (eleventh session, "What a rollback undid stays findable") says the
    rollback's event, through `recall read` and `context events`, "holds their bodies".
    Expected: `recall read` of the rollback shows the undone frame's body. Today it shows the
    transaction text only ("(rollback before)"); the bodies are in the payload, which `read`
    shows only for events without text."""
    commit(ctx, "(checkpoint before)")
    commit(ctx, '(create plan/route (fact "narwhal crossing at the northern fjord"))')
    commit(ctx, "(rollback before)")
    rollback = ctx.events()[-1].ref
    assert ctx.recall.search("narwhal").hits[0].ref == rollback
    page = ctx.recall.read(rollback, limit=100_000)
    assert "narwhal crossing at the northern fjord" in page.text, page.text


def test_the_preview_names_the_replaced_frame_whatever_the_length_of_the_transaction(
    ctx: morphz.Context,
) -> None:
    """decisions.md (twelfth session): "the hit's preview names the frames (`replaced:
    plan/route`)". The preview is "reason — transaction text — replaced: ids", cut at 240
    characters, so a revise whose new body is longer than ~150 characters loses the
    "replaced:" part: the hit for the old words then looks like an unrelated commit whose text
    (the new body) holds none of them. Expected: the preview names the replaced frame however
    long the transaction is (e.g. put the ids before the transaction text)."""
    long_body = " ".join(f"step{i} walrus" for i in range(40))
    revised = _revised(ctx, long_body)
    hit = ctx.recall.search("narwhal fjord").hits[0]
    assert hit.ref == revised
    assert "replaced: plan/route" in hit.preview, hit.preview


def test_the_preview_of_a_commit_without_a_reason_does_not_say_none(
    ctx: morphz.Context,
) -> None:
    """A revise needs no reason, and since this session a revise without one has a recall
    document (its replaced body), so it can be a hit; before, a commit without a reason had no
    document and never was. search._event_hit builds the preview from
    ``payload.get('reason', '')``, but the payload holds ``"reason": null``: the preview starts
    with the Python word "None — (context-tx ...". Expected: no "None" placeholder (the
    preview starts with the transaction, or with the replaced ids)."""
    commit(ctx, '(create plan/route (fact "narwhal crossing at the northern fjord"))', reason=None)
    commit(ctx, '(revise plan/route (fact "walrus crossing at the southern bay"))', reason=None)
    hit = ctx.recall.search("narwhal fjord").hits[0]
    assert hit.kind == "context_tx_committed"
    assert not hit.preview.startswith("None"), hit.preview


# ------------------------------------------------------------------ ids with combining marks


@pytest.mark.parametrize(
    "text",
    [
        "\u0e1c\u0e39\u0e49\u0e43\u0e0a\u0e49-2",  # Thai with a digit
        "v2-\u092d\u093e\u0937\u093e",
        "2024-\u0e0a\u0e37\u0e48\u0e2d",
        "\u092d\u093e\u0937\u093e2",  # Hindi भाषा2
        "plan/\u092d\u093e\u0937\u093e-2",
    ],
)
def test_an_id_with_combining_marks_may_hold_digits(text: str) -> None:
    """ids.py says an id is "letters (with their combining marks), digits and _ - . : /".
    _marked_id checked each character after the first with ``_ID_RE.fullmatch(c)``, whose
    ``(?!\\d+\\Z)`` refuses a lone digit, and the first character the same way: so a marked id
    holding any digit was refused ("भाषा2", "2024-ชื่อ"), while the same id without marks was
    accepted. Expected: these are ids. (The review's decomposed "café" cases are in
    test_a_decomposed_id_is_refused_with_its_composed_spelling: ids are NFC.)"""
    assert is_id(text), text


def test_a_frame_id_with_marks_and_digits_can_be_created(ctx: morphz.Context) -> None:
    """The same rule, where a model meets it: creating ``plan/भाषा-2`` is refused as "not a
    valid id" although ``plan/भाषा`` and ``plan/bhasha-2`` are both accepted. Expected: it
    commits."""
    commit(ctx, '(create plan/\u092d\u093e\u0937\u093e-2 (fact "x"))')
    assert ctx.version == 1


def test_canonically_equivalent_ids_name_the_same_frame(ctx: morphz.Context) -> None:
    """Since ids may hold combining marks, "café" could be written precomposed (U+00E9) or
    decomposed (e + U+0301): both were ids, they print identically in the encoding, and they
    were two different frames. A model that reads the decomposed id and writes it back
    precomposed (as most text pipelines produce) created a second frame that looks like the
    first, or got "does not exist" for a frame it sees. Expected: the two spellings are never
    two ids. Ids are in composed form (NFC): the decomposed create is refused, naming the
    spelling to use, and the precomposed one is the frame."""
    decomposed, precomposed = "cafe\u0301", "caf\u00e9"
    with pytest.raises(MorphzError, match=f"not in composed form: write it as '{precomposed}'"):
        commit(ctx, f'(create {decomposed} (fact "x"))')
    commit(ctx, f'(create {precomposed} (fact "y"))')
    with pytest.raises(MorphzError, match="not in composed form"):
        commit(ctx, f'(revise {decomposed} (fact "z"))')
    assert [f.id for f in ctx.mind().frames] == [precomposed]


@pytest.mark.parametrize("text", ["cafe\u0301-2", "v2-cafe\u0301", "2024-cafe\u0301"])
def test_a_decomposed_id_is_refused_with_its_composed_spelling(text: str) -> None:
    assert not is_id(text)
    assert is_id(unicodedata.normalize("NFC", text))
    assert repr(unicodedata.normalize("NFC", text)) in describe_id_rules(text)


@pytest.mark.parametrize("mark", ["\ufe0f", "\u034f", "\u180b"], ids=["vs16", "cgj", "fvs1"])
def test_an_invisible_mark_does_not_make_a_new_id(mark: str) -> None:
    """_marked_id accepts every character of category Mn after the first, which includes
    default-ignorable ones that draw nothing: variation selectors (U+FE0F), the combining
    grapheme joiner (U+034F), Mongolian free variation selectors. ``plan`` + U+FE0F is then an
    id distinct from ``plan`` that no reader of the encoding can tell apart. Expected: such
    invisible characters are not part of an id (refused)."""
    assert not is_id("plan" + mark)


def test_an_id_without_marks_is_taken_as_it_is_nfc_or_not(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ids with combining marks must be NFC: a word character that NFC changes (the
    compatibility ideograph U+F900, the angstrom sign U+212B) was an id before marks were
    allowed, so stores may hold such frames, and the audit replays their transactions with
    today's parser. Expected: they stay ids, and such a store audits clean. (Review 21a: a
    new transaction may no longer create one, so the frame is made as an earlier build made
    it; a later transaction still names it.)"""
    for text in ("\uf900/plan", "\u212b-unit"):
        assert is_id(text), text
        assert not unicodedata.is_normalized("NFC", text)
    with monkeypatch.context() as earlier:  # the rule for new ids as earlier builds had it
        earlier.setattr(validate, "is_new_id", is_id)
        commit(ctx, '(create \uf900/plan (fact "x"))')
    commit(ctx, '(revise \uf900/plan (fact "y"))')
    assert ctx.audit().ok
