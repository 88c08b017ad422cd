"""Text tables and what a table cell may show of stored text: pure functions from strings to
strings (the part of :mod:`morphz.interfaces.render` every other part of it uses), including a
table printed as its rows are read (:func:`streamed_table`)."""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence

MAX_CELL = 60


def visible(text: str, keep: str = "\n", *, crlf: bool = False) -> str:
    """``text`` with its control characters but line breaks shown as ``\\xNN``, and its format
    characters (bidi embeddings, overrides and isolates, zero-width spaces, tag characters) as
    ``\\uXXXX``, as ``repr`` shows them, but for those that are part of written words: the
    zero-width joiner and non-joiner (Persian and Indic words, emoji), the left-to-right,
    right-to-left and Arabic letter marks (punctuation of Hebrew and Arabic text, which reorder
    nothing but a neutral character next to them) and the soft hyphen. What a shortened or
    wrapped view of stored content prints, so that an escape sequence in a tool's output or a
    frame body cannot drive the terminal (change colours, clear the screen), least of all half
    of one, cut off, a right-to-left override cannot show a command reordered, and invisible
    characters cannot hide text. Exact-content outputs (the encoding, a recall read, the reply)
    print text as stored, but at a terminal (``interfaces.output.out``), where they keep tabs
    too (``keep``) and, with ``crlf``, a carriage return right before a line feed (a Windows
    line end is a line break; a lone carriage return, which can overwrite a line, is shown)."""
    if text.isprintable():
        return text
    if crlf:
        return "\r\n".join(visible(part, keep) for part in text.split("\r\n"))
    return "".join(c if c in keep else _shown(c) for c in text)


# Format characters that are part of written words, not a way to reorder or hide them: the
# zero-width non-joiner and joiner, the left-to-right, right-to-left and Arabic letter marks,
# and the soft hyphen.
_WORD_FORMAT = frozenset("\u200c\u200d\u200e\u200f\u061c\u00ad")


def _shown(c: str) -> str:
    kind = unicodedata.category(c)
    if kind == "Cc":
        return f"\\x{ord(c):02x}"
    if kind == "Cf" and c not in _WORD_FORMAT:
        return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
    return c


def _cell_lines(cell: str, width: int) -> list[str]:
    """A cell's lines: its own line breaks, then wrapped at ``width`` characters between words;
    a word longer than that (an id, a ref) stays whole, so it can be copied. Control
    characters are shown (:func:`visible`)."""
    out: list[str] = []
    for line in visible(cell).split("\n") or [""]:
        wrapped = textwrap.wrap(line, width, break_on_hyphens=False, break_long_words=False)
        out.extend(wrapped or [""])
    return out


def _cells(text: str) -> int:
    """The terminal cells ``text`` takes: two for a wide (CJK) character, none for a mark that
    combines with the one before it (an accent, a vowel sign) or a format character (a
    zero-width joiner), one otherwise."""
    if text.isascii():
        return len(text)
    return sum(_cell_width(c) for c in text)


def _cell_width(char: str) -> int:
    if char == "\u00ad":  # the soft hyphen: a format character terminals draw one column wide
        return 1
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _cells(text))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    grid: bool = False,
    max_width: int = MAX_CELL,
) -> str:
    """A text table. ``grid`` draws a box with a rule between rows (for multi-line cells);
    otherwise columns are separated by two spaces under a dashed header rule."""
    body = [_row_cells(row, max_width) for row in rows]
    head = _row_cells(headers, max_width)
    widths = _widths([head, *body], [0] * len(headers))
    if not grid:
        rule = "  ".join("-" * w for w in widths)
        lines = (x for row in body for x in _row_lines(row, widths))
        return "\n".join([*_row_lines(head, widths), rule, *lines])
    thin = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    thick = thin.replace("-", "=")
    out = [thin, *_row_lines(head, widths, grid=True), thick]
    for row in body:
        out.extend([*_row_lines(row, widths, grid=True), thin])
    return "\n".join(out)


def streamed_table(
    headers: Sequence[str], rows: Callable[[], Iterable[Sequence[str]]], none: str
) -> Iterator[str]:
    """The lines of ``table(headers, rows())``, or ``none`` when there are no rows, reading
    ``rows()`` twice (the column widths, then the lines) and holding one row at a time: a
    table of any length in bounded memory. ``rows`` must give the same rows both times."""
    head = _row_cells(headers, MAX_CELL)
    widths, seen = _widths([head], []), False
    for row in rows():
        widths, seen = _widths([_row_cells(row, MAX_CELL)], widths), True
    if not seen:
        yield none
        return
    yield from _row_lines(head, widths)
    yield "  ".join("-" * w for w in widths)
    for row in rows():
        yield from _row_lines(_row_cells(row, MAX_CELL), widths)


def _row_cells(row: Sequence[str], max_width: int) -> list[list[str]]:
    return [_cell_lines(str(c), max_width) for c in row]


def _widths(rows: Iterable[list[list[str]]], widths: list[int]) -> list[int]:
    """``widths`` (empty: none yet) widened to every line of each cell of ``rows``."""
    for row in rows:
        cells = [max(_cells(line) for line in cell) for cell in row]
        widths = [max(pair) for pair in zip(widths, cells, strict=True)] if widths else cells
    return widths


def _row_lines(row: list[list[str]], widths: list[int], *, grid: bool = False) -> list[str]:
    height = max(len(c) for c in row)
    out = []
    for k in range(height):
        parts = [_pad(c[k] if k < len(c) else "", w) for c, w in zip(row, widths, strict=True)]
        out.append(f"| {' | '.join(parts)} |" if grid else "  ".join(parts).rstrip())
    return out
