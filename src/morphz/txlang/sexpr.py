"""S-expression reader and canonical printer, with source positions.

Lexical rules (DESIGN §5): lists in parentheses; atoms (any run of characters other than
whitespace, parentheses, double quotes and ``;``); double-quoted strings whose only escapes are
``\\"`` and ``\\\\``; ``;`` comments to the end of the line.

Nodes remember ``pos``, the character offset where they start; :func:`line_col` turns an offset
into a 1-based line and column. Equality ignores positions, so ``read(to_text(x)) == x``.
The canonical text puts one space between list items and nothing else: it is what the event log
stores and what hashes are computed over.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from morphz.errors import ParseError


class Atom:
    """A bare token such as ``derive``, ``deployment/current``, ``@e42`` or ``42``."""

    __slots__ = ("pos", "text")

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("atom", self.text))

    def __repr__(self) -> str:
        return f"Atom({self.text!r})"


class Str:
    """A double-quoted string; ``value`` is the unescaped content."""

    __slots__ = ("pos", "value")

    def __init__(self, value: str, pos: int = 0) -> None:
        self.value = value
        self.pos = pos

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Str) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("str", self.value))

    def __repr__(self) -> str:
        return f"Str({self.value!r})"


class SList:
    """A parenthesised list of S-expressions. ``head`` is the text of the first item when it is
    an atom (an operation name, say), else None."""

    __slots__ = ("head", "items", "pos")

    def __init__(self, items: tuple[SExpr, ...], pos: int = 0) -> None:
        self.items = items
        self.pos = pos
        first = items[0] if items else None
        self.head: str | None = first.text if type(first) is Atom else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SList) and other.items == self.items

    def __hash__(self) -> int:
        return hash(("list", self.items))

    def __repr__(self) -> str:
        return f"SList({list(self.items)!r})"


SExpr = Atom | Str | SList

# One token per match, leading whitespace skipped; the group number says which kind. Every
# character that is not whitespace starts exactly one of these, so finditer never skips text.
_TOKEN = re.compile(
    r"""\s*(?:(\()|(\))|("(?:[^"\\]|\\.)*")|([^\s()";]+)|(;[^\n]*)|("))""", re.DOTALL
)
MAX_DEPTH = 200  # deeper nesting is refused: printers and walkers recurse
_OPEN, _CLOSE, _STRING, _ATOM, _COMMENT, _BADSTR = 1, 2, 3, 4, 5, 6
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of character offset ``pos`` in ``text``."""
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    start = text.rfind("\n", 0, pos) + 1
    return line, pos - start + 1


def _error(text: str, pos: int, message: str) -> ParseError:
    line, column = line_col(text, pos)
    return ParseError(message, line=line, column=column)


def _unescape(text: str, raw: str, pos: int) -> str:
    def repl(match: re.Match[str]) -> str:
        char = match.group(1)
        if char in '"\\':
            return char
        raise _error(
            text,
            pos + match.start(),
            f'unknown escape \\{char} in string: only \\" and \\\\ are allowed',
        )

    return _ESCAPE.sub(repl, raw) if "\\" in raw else raw


def read(text: str) -> list[SExpr]:
    """Read every top-level S-expression in ``text``. Raises :class:`ParseError`."""
    out: list[SExpr] = []
    stack: list[tuple[int, list[SExpr]]] = []
    current = out
    for m in _TOKEN.finditer(text):
        kind = m.lastindex
        if kind == _ATOM:
            current.append(Atom(m.group(4), m.start(4)))
        elif kind == _OPEN:
            if len(stack) >= MAX_DEPTH:
                raise _error(text, m.start(1), f"lists nest deeper than {MAX_DEPTH} levels")
            stack.append((m.start(1), current))
            current = []
        elif kind == _CLOSE:
            if not stack:
                raise _error(text, m.start(2), "unbalanced ')': there is no list to close")
            start, parent = stack.pop()
            parent.append(SList(tuple(current), start))
            current = parent
        elif kind == _STRING:
            pos = m.start(3)
            raw = m.group(3)[1:-1]
            current.append(Str(_unescape(text, raw, pos + 1) if "\\" in raw else raw, pos))
        elif kind == _BADSTR:
            raise _error(text, m.start(6), 'unterminated string: add the closing "')
    if stack:
        raise _error(text, stack[-1][0], "unbalanced '(': this list is never closed")
    return out


def read_one(text: str) -> SExpr:
    """Read exactly one S-expression; anything else (none, or stray text after it) is an error."""
    forms = read(text)
    if not forms:
        raise _error(text, len(text), "empty input: expected one S-expression")
    if len(forms) > 1:
        extra = forms[1]
        raise _error(text, extra.pos, "stray text after the first S-expression")
    return forms[0]


def quote(value: str) -> str:
    """Canonical string literal: ``"`` and ``\\`` escaped, everything else verbatim."""
    if "\\" in value or '"' in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{value}"'


def to_text(expr: SExpr) -> str:
    """Canonical one-line text: single spaces between items, strings minimally escaped."""
    if isinstance(expr, Atom):
        return expr.text
    if isinstance(expr, Str):
        return quote(expr.value)
    return "(" + " ".join([to_text(item) for item in expr.items]) + ")"


def to_text_seq(exprs: tuple[SExpr, ...] | list[SExpr]) -> str:
    """Canonical text of several expressions, separated by single spaces."""
    return " ".join([to_text(item) for item in exprs])


def pretty(expr: SExpr, width: int = 80, indent: int = 0) -> str:
    """Human layout: a list that does not fit on one line puts each item on its own line."""
    flat = to_text(expr)
    if not isinstance(expr, SList) or len(flat) + indent <= width or len(expr.items) < 2:
        return flat
    head, *rest = expr.items
    inner = indent + 2
    lines = ["(" + pretty(head, width, indent + 1)]
    lines.extend(" " * inner + pretty(item, width, inner) for item in rest)
    return "\n".join(lines) + ")"


def walk(expr: SExpr) -> Iterator[SExpr]:
    """Every node of ``expr``, depth first, the node itself first."""
    yield expr
    if isinstance(expr, SList):
        for item in expr.items:
            yield from walk(item)
