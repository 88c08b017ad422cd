"""Fix 21b (landed in the twenty-second session): the estimate counts each line of the encoding as
at least its o200k pre-tokenizer chunks (token_estimate.chunk_bound), prose and code about as
before; migration 0029 recounts what stores kept by the old rule."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import morphz
from morphz import token_estimate
from morphz.encoding.protocol import PROTOCOL
from morphz.encoding.tokens import Calibration, estimate_tokens
from morphz.mind.lifecycle import edge_tokens
from morphz.token_estimate import byte_units, chunk_bound, text_units
from test_review21b_capacity import o200k_minimum

ROOT = Path(__file__).resolve().parents[1]
# one character of each class the pattern tells apart, and the ones that join or split chunks
ALPHABET = (
    "aZkQ019 \t\n\r\x0b.,'\"/-_:(){}[]@#\x00\x1f\x7fé中ǅʰ\u0301\u0903١،\u00a0\u2003\u3000"
    "Ⅻ²½\u0378\U000e0001😀\U0001d7ce\U0001d400ß"
)


@settings(max_examples=1500, deadline=None)
@given(st.text(st.sampled_from(ALPHABET), max_size=60))
def test_the_chunk_bound_is_never_below_o200ks_chunks(text: str) -> None:
    assert chunk_bound(text) >= o200k_minimum(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cn")), max_size=40))
def test_the_chunk_bound_holds_for_any_character(text: str) -> None:
    # (a code point this Python has not assigned is left out: the floor counted here takes the
    # chunks the regex module's Unicode tables cut, tiktoken's own engine may cut others)
    assert chunk_bound(text) >= o200k_minimum(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(ALPHABET), max_size=20))
def test_mostly_ascii_text_gets_the_classes_of_text_looked_up_whole(other: str) -> None:
    text = "deploy 1234567 ok, " * 20 + other + "(x) 12:00\n  y" * 20
    whole = text.translate(token_estimate._CLASSES).encode().translate(token_estimate._TO_CODE)
    assert token_estimate._codes(text) == whole


def _samples() -> dict[str, str]:
    return {
        "prose": (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")[:60_000],
        "code": (ROOT / "src" / "morphz" / "encoding" / "compile.py").read_text("utf-8"),
        "protocol": PROTOCOL,
    }


def test_prose_and_code_count_by_their_characters_about_as_before() -> None:
    """English prose and Python code have fewer chunks than their characters cost, so their
    estimate is about what it was (a short line of punctuation counts its chunks); it stays
    above what any o200k tokenizer must count."""
    for name, text in _samples().items():
        floor = o200k_minimum(text)
        assert text_units(text) <= 1.05 * byte_units(text), name
        assert floor <= estimate_tokens(text) <= 1.25 * floor, (name, estimate_tokens(text), floor)


def test_an_edge_counts_as_its_rendered_text_with_parts_that_start_otherwise() -> None:
    for edge in [("a", "supports", "b"), ("1st", "2-step", ".x"), ("@e1", "cites", "@e22")]:
        s, r, o = edge
        assert edge_tokens(edge) == estimate_tokens(f" ({s} {r} {o})"), edge
        assert edge_tokens(edge) >= chunk_bound(f" ({s} {r} {o})"), edge


def test_the_upgrade_recounts_units_and_kept_totals_and_drops_calibrations(
    tmp_path: Path,
) -> None:
    """A store of the rule before 0029: observations' units and the kept total counted four
    ASCII characters a token, a calibration learnt against it. The upgrade recounts both, the
    audit finds the store sound, and the calibration is gone."""
    path = tmp_path / "s.db"
    numbers = ",".join(str(n) for n in range(2_000))
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ref = ctx.observe("tool_result", numbers).ref
        ctx.commit(
            f'(context-tx (base-version 0) (reason "r") (create figures/1 :body (fact "{numbers}")'
            f" :sources ({ref})))"
        )
        ctx.save_calibration("openai:gpt-4o", Calibration(2.5, 3))
        stored, kept = _kept(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE observations SET units = 3 * chars")  # the old rule, ASCII
        conn.execute("UPDATE frame_tokens SET n = n / 3")
        conn.execute("DELETE FROM schema_migrations WHERE number = 29")
        conn.commit()
    finally:
        conn.close()
    assert _kept(path) != (stored, kept)
    with morphz.open(path) as db:
        ctx = db.context("c")
        assert ctx.audit().ok
        assert ctx.calibration("openai:gpt-4o").samples == 0
    assert _kept(path) == (stored, kept)


def _kept(path: Path) -> tuple[list[int], int]:
    conn = sqlite3.connect(path)
    try:
        units = [u for (u,) in conn.execute("SELECT units FROM observations ORDER BY seq")]
        (total,) = conn.execute("SELECT n FROM frame_tokens").fetchone()
    finally:
        conn.close()
    return units, total
