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
import unicodedata
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
    an atom (an operation name, say), else None. ``end`` is the offset just after the closing
    parenthesis when the list was read from text (0 otherwise)."""

    __slots__ = ("end", "head", "items", "pos")

    def __init__(self, items: tuple[SExpr, ...], pos: int = 0, end: int = 0) -> None:
        self.items = items
        self.pos = pos
        self.end = end
        first = items[0] if items else None
        self.head: str | None = first.text if type(first) is Atom else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SList) and other.items == self.items

    def __hash__(self) -> int:
        return hash(("list", self.items))

    def __repr__(self) -> str:
        return f"SList({list(self.items)!r})"


SExpr = Atom | Str | SList

# One token per match, in order: "(", ")", a string literal (one never closed runs to the end of
# the text, so no quote is scanned twice), an atom or a comment. Every character that is not
# whitespace starts exactly one of them and none starts with whitespace, so only whitespace lies
# between two tokens.
_TOKEN = re.compile(r'[()]|"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)|[^\s()";]+|;[^\n]*', re.DOTALL)
_CLOSED = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)  # a string token that ends
MAX_DEPTH = 200  # deeper nesting is refused: printers and walkers recurse
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


# what an escape other languages know stands for, and how to write it here instead
_WRITTEN_AS_IS = {"n": "line break", "r": "line break", "t": "tab"}


def _unescape(text: str, raw: str, pos: int) -> str:
    def repl(match: re.Match[str]) -> str:
        char = match.group(1)
        if char in '"\\':
            return char
        allowed = 'only \\" and \\\\ are allowed'
        if char in _WRITTEN_AS_IS:
            allowed = f"write the {_WRITTEN_AS_IS[char]} itself inside the quotes ({allowed})"
        raise _error(text, pos + match.start(), f"unknown escape \\{char} in string: {allowed}")

    return _ESCAPE.sub(repl, raw) if "\\" in raw else raw


def _split(text: str) -> list[str] | None:
    """The tokens of ``text`` without a regex, or None when it has a backslash, a comment or a
    string never closed. Then quotes pair up in order, and outside strings every token is a
    parenthesis or a run of other non-whitespace characters (``str.split`` and ``\\s`` agree on
    what whitespace is)."""
    if "\\" in text:
        return None
    parts = text.split('"')
    if not len(parts) & 1:
        return None
    out: list[str] = []
    for i, part in enumerate(parts):
        if i & 1:
            out.append(f'"{part}"')
        elif ";" in part:
            return None
        else:
            out += part.replace("(", " ( ").replace(")", " ) ").split()
    return out


def read(text: str) -> list[SExpr]:
    """Read every top-level S-expression in ``text``. Raises :class:`ParseError`."""
    if not isinstance(text, str):
        raise ParseError(f"S-expressions are read from text, not {type(text).__name__}")
    tokens = _split(text)
    return _nodes(text, _TOKEN.findall(text) if tokens is None else tokens, 0)


def _nodes(text: str, tokens: list[str], end: int) -> list[SExpr]:
    """The nodes of ``tokens``: the tokens of ``text`` from offset ``end`` on, in order."""
    out: list[SExpr] = []
    starts: list[int] = []  # offsets of the open lists, innermost last
    parents: list[list[SExpr]] = []  # the item lists they go into
    current = out
    find = text.find
    for token in tokens:
        pos = find(token, end)  # only whitespace lies before it: this is the token itself
        end = pos + len(token)
        if token == "(":
            if len(starts) >= MAX_DEPTH:
                raise _error(text, pos, f"lists nest deeper than {MAX_DEPTH} levels")
            starts.append(pos)
            parents.append(current)
            current = []
        elif token == ")":
            if not starts:
                raise _error(text, pos, "unbalanced ')': there is no list to close")
            node = SList(tuple(current), starts.pop(), end)
            current = parents.pop()
            current.append(node)
        elif token[0] == '"':
            if len(token) == 1 or not _CLOSED.fullmatch(token):
                raise _error(text, pos, 'unterminated string: add the closing "')
            raw = token[1:-1]
            current.append(Str(_unescape(text, raw, pos + 1) if "\\" in raw else raw, pos))
        elif token[0] != ";":
            current.append(Atom(token, pos))
    if starts:
        raise _error(text, starts[-1], "unbalanced '(': this list is never closed")
    return out


def list_items(text: str, start: int) -> list[tuple[int, int, str | None]]:
    """The items of the list that opens at offset ``start`` of ``text``, found by its tokens
    alone, so also in text :func:`read` refuses: for each, where it starts, where it ends (the
    end of the text for a list never closed) and its head (the atom a list starts with, else
    None). Says which item a reader error lies in."""
    items: list[tuple[int, int, str | None]] = []
    depth, fresh = 0, False  # fresh: an item's list just opened, its head comes next
    for match in _TOKEN.finditer(text, start):
        token, at = match.group(), match.start()
        if token[0] == ";":
            continue
        if fresh:
            head = token if token[0] not in '()"' else None
            items[-1] = (items[-1][0], len(text), head)
            fresh = False
        if depth == 1 and token != ")":
            items.append((at, match.end() if token != "(" else len(text), None))
            fresh = token == "("
        depth += {"(": 1, ")": -1}.get(token, 0)
        if token == ")" and depth == 1:
            items[-1] = (items[-1][0], match.end(), items[-1][2])
        if depth == 0:
            break
    return items


# Canonical items up to a closing parenthesis, nested at most CANONICAL_DEPTH lists deep: each
# an atom, a string (with only the two valid escapes) or a list of such items, and one space
# between two items, none after "(" or before ")".
CANONICAL_DEPTH = 12
_STRING = r'"[^"\\]*+(?:\\["\\][^"\\]*+)*+"'
_NEXT = r"(?:(?=\))| (?=[^\s)]))"  # after an item: the closing ")" or one space and an item


def _canonical_items(depth: int) -> str:
    item = rf'(?:[^\s()";]++|{_STRING})'
    for _ in range(depth):
        item = rf'(?:[^\s()";]++|{_STRING}|\((?:{item}{_NEXT})*+\))'
    return rf"(?:{item}{_NEXT})++"


CANONICAL_ITEMS = _canonical_items(CANONICAL_DEPTH)  # a pattern, to embed in other regexes
_CANONICAL_ITEMS = re.compile(rf"{CANONICAL_ITEMS}(?=\))")


def read_canonical_items(text: str, start: int) -> tuple[tuple[SExpr, ...], int] | None:
    """Read the last items of a list, from offset ``start`` of ``text`` to the list's closing
    parenthesis, when they are in canonical form (then their canonical text is the source span
    itself). Returns the items and the offset of that ")", or None when the span holds anything
    else (other spacing, a comment, an error, deeper nesting)."""
    match = _CANONICAL_ITEMS.match(text, start)
    if match is None:
        return None
    stop = match.end()
    return tuple(_nodes(text, _TOKEN.findall(text, start, stop), start)), stop


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


def source_text_seq(text: str, exprs: tuple[SExpr, ...], stop: int) -> str:
    """:func:`to_text_seq` of ``exprs``, the last items of a list read from ``text`` whose closing
    parenthesis is at offset ``stop``: the source span itself when it is already canonical,
    which is cheaper than printing the nodes again."""
    if exprs:
        start = exprs[0].pos
        match = _CANONICAL_ITEMS.match(text, start) if 0 <= start < stop else None
        if match is not None and match.end() == stop:
            return text[start:stop]
    return to_text_seq(exprs)


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


def nesting(expr: SExpr) -> int:
    """How deep ``expr``'s lists nest: 0 for an atom or a string, 1 for a list of atoms."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, SList):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in node.items)
    return deepest


def unicode_problem(value: str) -> tuple[int, str] | None:
    """Where ``value`` stops being valid Unicode text (a lone surrogate, which no UTF-8 store
    or provider accepts): (index, message), or None when it is valid."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start, surrogate_message(exc)
    return None


def surrogate_message(exc: UnicodeEncodeError) -> str:
    """What is wrong with the text ``exc`` (UTF-8 encoding) refused, and what to do."""
    char = exc.object[exc.start]
    return (
        f"a lone surrogate U+{ord(char):04X} at character {exc.start} is not valid Unicode "
        "text: remove it, or decode the source bytes with errors='replace'"
    )


_INVISIBLE = ("Cf", "Cc")  # format and control characters: they print as nothing


def is_invisible(char: str) -> bool:
    """Whether ``char`` prints as nothing yet is no whitespace to the reader: a format (Cf) or
    control (Cc) character such as a zero-width space, a byte-order mark or a NUL. (Tab,
    newline, carriage return and the other control characters that are whitespace separate
    tokens like a space, so ``\\s`` never lets them into an atom.)"""
    return unicodedata.category(char) in _INVISIBLE and not char.isspace()


# printable characters that show nothing either: the combining grapheme joiner, the Hangul
# fillers, the braille blank, variation selectors (they only choose how the previous character
# is drawn)
_SHOW_NOTHING = frozenset("\u034f\u115f\u1160\u3164\uffa0\u2800") | frozenset(
    map(chr, [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
)


def is_blank(value: str) -> bool:
    """Whether ``value`` shows nothing: only whitespace, invisible characters and characters
    that draw nothing (:data:`_SHOW_NOTHING`), or none at all."""
    if value.isprintable() and _SHOW_NOTHING.isdisjoint(value):  # the usual case, at C speed
        return not value.strip()
    return all(c.isspace() or is_invisible(c) or c in _SHOW_NOTHING for c in value)


def invisible_char(text: str, start: int = 0) -> int | None:
    """The offset of the first invisible character (:func:`is_invisible`) in the node that
    starts at ``start`` (where a refusal points): in the atom there, or in the atoms a list
    there holds itself (its head, its id, its keywords), never in its nested lists, strings or
    comments. A zero-width space pasted into ``create`` sticks to it and is named; a zero-width
    joiner inside an emoji or a Persian word in a body is data, valid where it stands, and is
    not. None when there is none."""
    depth = 0
    for match in _TOKEN.finditer(text, start):
        token = match.group()
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth <= 1 and token[0] not in '";' and not token.isprintable():
            for index, char in enumerate(token):
                if is_invisible(char):
                    return match.start() + index
        if depth <= 0:  # the node ended (an atom is over at once)
            return None
    return None


def offset_of(text: str, line: int, column: int) -> int:
    """The character offset of 1-based ``line`` and ``column`` in ``text`` (line_col's
    inverse)."""
    begin = 0
    for _ in range(line - 1):
        begin = text.find("\n", begin) + 1
        if begin == 0:
            return len(text)
    return min(len(text), begin + column - 1)


def describe_char(char: str) -> str:
    """``U+200B (ZERO WIDTH SPACE)``: the code point of ``char`` and its Unicode name."""
    code = f"U+{ord(char):04X}"
    if char == "\ufeff":
        return f"{code} (ZERO WIDTH NO-BREAK SPACE, a byte-order mark)"
    name = unicodedata.name(char, "")
    return f"{code} ({name})" if name else f"{code} (a control character)"
