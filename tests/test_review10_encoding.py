"""Review 10 (encoding): the Context Encoding compiler, its protocol and ContextDelta.

Each test fails on the code it was written against and states, in its docstring, what should
happen instead.
"""

from __future__ import annotations

import unicodedata

import pytest

import morphz
from morphz.txlang import read_one

# ------------------------------------------------------------------ previews


def _preview(ctx: morphz.Context, text: str) -> tuple[str, str]:
    ctx.observe("tool_result", text)
    encoding = ctx.encode()
    assert len(text) > encoding.view.preview_threshold
    item = read_one(encoding.region("inbox")).items[-1]  # (observation @eN ... (preview ...))
    preview = item.items[-1]
    parts = {p.items[0].text: p for p in preview.items[1:] if hasattr(p, "items")}
    return parts["head"].items[1].value, parts["tail"].items[1].value


@pytest.mark.parametrize(
    "text",
    [
        "a" + "\u0915\u093f" * 9000,  # क + vowel sign I (Mc, combining class 0)
        "a" + "\u0915\u0941" * 9000,  # क + vowel sign U (Mn, combining class 0)
        "a" + "\u0e01\u0e34" * 9000,  # ก + Thai sara I (Mn, combining class 0)
        "ab" + "1\ufe0f\u20e3" * 6000,  # keycap 1: enclosing keycap (Me, combining class 0)
    ],
    ids=["devanagari-spacing-mark", "devanagari-nonspacing-mark", "thai-mark", "keycap"],
)
def test_a_preview_does_not_cut_a_mark_off_its_letter(ctx: morphz.Context, text: str) -> None:
    """No preview shows half a character (docs/decisions.md, "Previews keep characters whole"):
    neither the first character the head leaves out nor the tail's first character is a
    combining mark (Unicode category M: Mn, Mc, Me). Today the cut only moves off marks whose
    canonical combining class is non-zero (``unicodedata.combining``), which misses most
    Indic and Thai vowel signs and the enclosing keycap: a Hindi or Thai tool result's head
    ends with a consonant stripped of its vowel sign, and its tail starts with a bare sign."""
    head, tail = _preview(ctx, text)
    cut = text[len(head)]
    assert not unicodedata.category(cut).startswith("M"), f"head cut before U+{ord(cut):04X}"
    assert not unicodedata.category(tail[0]).startswith("M"), f"tail starts U+{ord(tail[0]):04X}"


def _trailing_regional_indicators(text: str) -> int:
    return len(text) - len(text.rstrip("".join(chr(c) for c in range(0x1F1E6, 0x1F200))))


def test_a_preview_does_not_cut_a_flag_in_half(ctx: morphz.Context) -> None:
    """A flag is two regional indicators (U+1F1E9 U+1F1EA: the German flag); cut between them,
    the head ends with a lone "D" indicator and the next character starts another pairing. No
    preview shows half a character, so the head ends after an even number of regional
    indicators and the tail starts at the first of a pair. Today the 2,000-character head of
    "x" followed by flags ends between the two indicators of a flag."""
    text = "x" + "\U0001f1e9\U0001f1ea" * 9000
    head, tail = _preview(ctx, text)
    assert _trailing_regional_indicators(head) % 2 == 0, "the head ends inside a flag"
    assert _trailing_regional_indicators(text[: len(text) - len(tail)]) % 2 == 0


# ------------------------------------------------------------------ bounded by what is in view


def _compile_steps(db: morphz.Database, ctx: morphz.Context) -> int:
    """SQLite virtual-machine steps (in hundreds) one compile of ``ctx`` takes: a measure of
    the rows it reads that does not depend on the machine's speed."""
    conn = db.store._reader()  # this thread's reader connection, which ctx.encode uses
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(count, 100)
    try:
        ctx.encode()
    finally:
        conn.set_progress_handler(None, 0)
    return steps[0]


def test_compile_does_not_read_every_finished_activation(
    db: morphz.Database, ctx: morphz.Context
) -> None:
    """The compile reads what is in view, "never ... the length of the history"
    (encoding/compile.py's docstring; the issue: history must not matter). The kernel lists
    the running activations only, so 500 finished activations (every chat turn and exec run
    leaves one) must not make a compile read more. Today ``r.activations(running_only=True)``
    (``WHERE context_id = ? AND state = 'running' ORDER BY started_seq``) is planned as a
    search of the primary key on context_id, not the partial index ``activations_running``:
    every activation the context ever had is read on every compile (measured: 0.34 ms per
    compile before, 15 ms after 200,000 finished activations)."""
    ctx.observe("user_message", "hello")
    ctx.finish_activation(ctx.start_activation("default"))
    before = _compile_steps(db, ctx)
    for _ in range(500):
        ctx.finish_activation(ctx.start_activation("default"))
    after = _compile_steps(db, ctx)
    assert after <= 2 * before + 2, f"{before} -> {after} hundred VM steps"


class _CountingText(str):
    """A str that counts the characters its slices copy."""

    copied = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def,override]
        piece = str.__getitem__(self, key)
        if isinstance(key, slice):
            _CountingText.copied += len(piece)
        return piece


def test_the_cli_cache_layout_in_bytes_is_linear_in_the_text(ctx: morphz.Context) -> None:
    """``morphz context encoding`` (text and json alike) turns the cache layout's character
    offsets into byte offsets (``CacheLayout.to_dict``). That should cost about one pass over
    the text, however many inbox items cut it. Today each cut re-encodes the whole prefix before
    it (``len(text[:o].encode())``): quadratic in the inbox. 5,000 short Chinese chat messages
    (the issue's largest benchmark size) took 2.2 s in the CLI against a 0.2 s compile, and
    the time grows with the square of the inbox."""
    from morphz.encoding.blocks import encoding_layout
    from morphz.observe import Observation

    ctx.observe_batch(
        [Observation("user_message", f"第{i}条消息：一段简短的聊天文字") for i in range(400)]
    )
    encoding = ctx.encode()
    layout = encoding_layout(encoding)
    text = _CountingText(encoding.text)
    _CountingText.copied = 0
    offsets = layout.to_dict(text)
    assert offsets["cuts"][-1] == len(encoding.text[: layout.cuts[-1]].encode())  # still right
    assert _CountingText.copied <= 3 * len(text), f"{_CountingText.copied:,} characters copied"


# ------------------------------------------------------------------ encoding options


@pytest.mark.parametrize(
    "factor", [float("nan"), float("inf"), -1.0], ids=["nan", "inf", "negative"]
)
def test_a_calibration_with_an_impossible_factor_is_an_input_error(
    ctx: morphz.Context, factor: float
) -> None:
    """``checked()`` keeps "a wrong option a typed InputError naming the field (never a
    TypeError from deep in the compile)" (encoding/options.py). A Calibration (exported by
    morphz.encoding) whose factor is not a finite positive ratio is such an option: it should be
    refused naming ``calibration``, or held within RATIO_BOUNDS as ``Calibration.from_dict``
    does. Today NaN raises a bare ValueError and infinity an OverflowError from ``round`` in
    ``Calibration.apply``, and -1.0 compiles a kernel stating ``(tokens -3513)`` at normal
    pressure."""
    from morphz.encoding import Calibration

    ctx.observe("user_message", "hello")
    try:
        encoding = ctx.encode(calibration=Calibration(factor, 1))
    except morphz.InputError as exc:
        assert "calibration" in str(exc)
    else:
        assert encoding.tokens > 0 and encoding.pressure.kind == "calibrated"
