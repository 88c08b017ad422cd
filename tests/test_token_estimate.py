"""The token estimate's rule for text that is not ASCII (fourteenth session): four ASCII characters
a token, a wide character one token, any other character a third of a token per UTF-8 byte; and
the recount of stores whose kept totals were counted by the rule before it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import morphz
from morphz.encoding import render
from morphz.encoding.tokens import estimate_tokens
from morphz.mind.lifecycle import edge_tokens, frame_tokens, kept_tokens
from morphz.mind.state import Frame
from morphz.token_estimate import byte_units, chunk_bound, piece_units, pieces
from morphz.txlang.sexpr import quote


def units_per_character(text: str) -> int:
    units = 0
    for char in text:
        if char.isascii():
            units += 3
        elif ord(char) >= 0x2E80:
            units += 12
        else:
            units += 4 * len(char.encode("utf-8", "surrogatepass"))
    return units


@settings(max_examples=500)
@given(st.text(st.characters(codec=None, exclude_categories=())))
def test_token_units_follow_the_rule_per_character(text: str) -> None:
    # counted on the UTF-8 bytes for speed; the rule is per character (lone surrogates too)
    assert byte_units(text) == units_per_character(text)
    # per line of the encoding, the larger of that and a token a chunk: never below the rule
    assert estimate_tokens(text) == -(-sum(map(piece_units, pieces(text))) // 12)
    assert estimate_tokens(text) >= -(-units_per_character(text) // 12)
    assert estimate_tokens(text) >= chunk_bound(text) - text.count("\n")
    # the wide boundary (U+2E7F narrow, three bytes; U+2E80 on wide), beyond the BMP, a surrogate
    edges = "\u2e7f\u2e80\u2fff\u3000\U0010ffff\ud800"
    assert byte_units(text + edges) == byte_units(text) + 12 * 6


def test_scripts_other_than_latin_count_closer_to_what_tokenizers_spend() -> None:
    # about 0.5-0.7 tokens a character for Cyrillic and Arabic, one or more for Devanagari and
    # Thai in tokenizers trained mostly on English; a quarter (the ASCII rate) was 2-4x under
    russian = "Развертывание прошло успешно, проверьте журнал"
    assert estimate_tokens(russian) >= 0.6 * len(russian)
    arabic = "تم النشر بنجاح، تحقق من السجل"
    assert estimate_tokens(arabic) >= 0.6 * len(arabic)
    hindi = "तैनाती सफल रही, लॉग देखें"
    assert estimate_tokens(hindi) >= 0.8 * len(hindi)  # its spaces and comma are ASCII
    assert estimate_tokens("deploy ok, see the log") == 6  # ASCII: four characters a token


@settings(max_examples=200)
@given(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=40),
)
def test_a_frames_count_is_its_rendered_lines_estimate(body_text: str, name_suffix: str) -> None:
    """frame_tokens counts the line the mind region shows for the frame (a space before it, a
    line break after it), so the kept total is the sum of what the region shows."""
    ctx_frame = _frame(f"f/{''.join(c for c in name_suffix if c.isalnum())}", body_text)
    assert frame_tokens(ctx_frame) == estimate_tokens(f" {render.frame(ctx_frame, 0)}\n")


def _frame(name: str, text: str) -> Frame:
    return Frame(name, f"(fact {quote(text)})", ("@e1", "f/src"), 1, "active", False, 1.0)


def test_an_edge_counts_its_parts_by_the_same_rule() -> None:
    assert edge_tokens(("a", "supports", "b")) == estimate_tokens(" (a supports b)")
    edge = ("вывод/1", "supports", "вывод/2")
    assert edge_tokens(edge) == estimate_tokens(" (вывод/1 supports вывод/2)")


def _old_kept(ctx: morphz.Context, db: morphz.Database) -> int:
    """The kept total as the rule before counted it: a quarter of a token for a narrow char."""
    total = 0
    with db.store.read(ctx.id) as r:
        for f in r.active.frames():
            size = len(f.id) + len(f.body) + sum(map(len, f.sources)) + len(f.sources) + 32
            wide = sum(1 for c in f.id + f.body + "".join(f.sources) if ord(c) >= 0x2E80)
            total += (size - wide + 3) // 4 + wide
    return total


def test_the_upgrade_recounts_kept_totals_counted_by_the_rule_before(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    body = '(fact "Развертывание в регионе cn-shanghai прошло успешно; журнал в порядке")'
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.commit(f"(context-tx (base-version 0) (create итог/1 {body}) (create ok (n 1)))")
        with db.store.read("c") as r:
            new = r.active.frame_tokens()
            assert new == sum(kept_tokens(f) for f in r.active.frames())
        old = _old_kept(ctx, db)
    assert old < new  # the Cyrillic frame counted more than before
    conn = sqlite3.connect(path)  # the store as schema 19 left it: counted by the old rule
    try:
        conn.execute("UPDATE frame_tokens SET n = ? WHERE context_id = 'c'", (old,))
        conn.execute("DELETE FROM schema_migrations WHERE number = 20")
        conn.commit()
    finally:
        conn.close()
    with morphz.open(path) as db:
        ctx = db.context("c")
        with db.store.read("c") as r:
            assert r.active.frame_tokens() == new
        assert ctx.audit().ok, ctx.audit()
