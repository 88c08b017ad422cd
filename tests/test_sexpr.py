"""The S-expression reader and printer (DESIGN §5 lexical rules): positions of nodes and of
errors, comments, escapes, canonical and pretty printing, and property tests (round-trip of
random trees; arbitrary text raises nothing but ParseError)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from morphz import ParseError
from morphz.txlang.sexpr import (
    MAX_DEPTH,
    Atom,
    SExpr,
    SList,
    Str,
    line_col,
    pretty,
    quote,
    read,
    read_one,
    to_text,
    to_text_seq,
    walk,
)


def L(*items: SExpr) -> SList:
    return SList(tuple(items))


def A(text: str) -> Atom:
    return Atom(text)


def S(value: str) -> Str:
    return Str(value)


def where(text: str, node: SExpr) -> tuple[int, int]:
    return line_col(text, node.pos)


# ------------------------------------------------------------------ reading and positions


def test_reads_atoms_strings_and_lists() -> None:
    forms = read('(derive deployment/current (from @e42) "free text" 42) top')
    assert forms == [
        L(A("derive"), A("deployment/current"), L(A("from"), A("@e42")), S("free text"), A("42")),
        A("top"),
    ]
    assert read("") == [] and read("  \n\t ") == []
    assert read("()") == [L()]
    assert read('""') == [S("")]


def test_node_positions_are_line_and_column() -> None:
    text = '(context-tx\n  (base-version 42)\n  (reason "why")\n\t(retire @e7))'
    tx = read_one(text)
    assert isinstance(tx, SList)
    head, base, reason, retire = tx.items
    assert where(text, tx) == (1, 1)
    assert where(text, head) == (1, 2)
    assert isinstance(base, SList) and where(text, base) == (2, 3)
    assert where(text, base.items[0]) == (2, 4)
    assert where(text, base.items[1]) == (2, 17)
    assert isinstance(reason, SList) and where(text, reason.items[1]) == (3, 11)
    assert isinstance(retire, SList) and where(text, retire) == (4, 2)
    assert where(text, retire.items[1]) == (4, 10)


def test_positions_after_multiline_strings_and_comments() -> None:
    text = '; header comment\n("two\nlines" ; trailing\n   next)'
    form = read_one(text)
    assert isinstance(form, SList)
    first, second = form.items
    assert where(text, form) == (2, 1)
    assert first == S("two\nlines") and where(text, first) == (2, 2)
    assert second == A("next") and where(text, second) == (4, 4)


@pytest.mark.parametrize(
    ("pos", "expected"),
    [(0, (1, 1)), (2, (1, 3)), (3, (1, 4)), (4, (2, 1)), (6, (2, 3)), (99, (2, 3)), (-5, (1, 1))],
)
def test_line_col(pos: int, expected: tuple[int, int]) -> None:
    assert line_col("abc\nde", pos) == expected


def test_comments_run_to_end_of_line() -> None:
    text = "; leading\n(a ; inside\n b) ; after\n; last line without newline"
    assert read(text) == [L(A("a"), A("b"))]
    assert read("; only a comment") == []
    assert read("a;b") == [A("a")]  # ';' ends an atom and starts a comment
    assert read('("; not a comment")') == [L(S("; not a comment"))]


def test_delimiters_split_atoms() -> None:
    assert read('a(b)c"d"e') == [A("a"), L(A("b")), A("c"), S("d"), A("e")]
    assert read("x\u00a0y\u2028z") == [A("x"), A("y"), A("z")]  # unicode whitespace separates


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        (r'"a\"b"', 'a"b'),
        (r'"a\\b"', "a\\b"),
        (r'"\\\""', '\\"'),
        (r'"\\"', "\\"),
        ('"line\nbreak\ttab"', "line\nbreak\ttab"),  # raw newlines and tabs are kept verbatim
        ('"(not a list) ;nor a comment"', "(not a list) ;nor a comment"),
        ('"ünïcödé ✓ 中文"', "ünïcödé ✓ 中文"),
    ],
)
def test_string_escapes(literal: str, value: str) -> None:
    assert read_one(literal) == S(value)
    assert read_one(quote(value)) == S(value)


# ------------------------------------------------------------------ errors with positions


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("(a b", 1, 1, "unbalanced '('"),
        ("(a\n  (b c)\n  d", 1, 1, "unbalanced '('"),
        ("(a (b\n", 1, 4, "unbalanced '('"),
        ("(a\n  (b (c))\n  (d", 3, 3, "unbalanced '('"),
        (")", 1, 1, "unbalanced ')'"),
        ("a)", 1, 2, "unbalanced ')'"),
        ("(a))", 1, 4, "unbalanced ')'"),
        ("(a)\n\n  )", 3, 3, "unbalanced ')'"),
        ('"abc', 1, 1, "unterminated string"),
        ('(a "bc)', 1, 4, "unterminated string"),
        ('(a\n  "b\\"', 2, 3, "unterminated string"),
        ('(a\n  "b\\', 2, 3, "unterminated string"),
        ('"a\\qb"', 1, 3, "unknown escape \\q"),
        ('(x\n "ok" "b\\n")', 2, 9, "unknown escape \\n"),
        ('"one\ntwo \\t"', 2, 5, "unknown escape \\t"),
    ],
)
def test_reader_errors_have_line_and_column(
    text: str, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(ParseError) as info:
        read(text)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert fragment in err.message
    assert err.code == "parse"
    assert f"line {line}, column {column}" in str(err)


def test_read_one_wants_exactly_one_expression() -> None:
    assert read_one("  (a)  ; fine\n") == L(A("a"))
    for empty in ("", "   ", "; just a comment\n"):
        with pytest.raises(ParseError, match="empty input"):
            read_one(empty)
    with pytest.raises(ParseError, match="stray text") as info:
        read_one("(a)\n  (b)")
    assert (info.value.line, info.value.column) == (2, 3)
    with pytest.raises(ParseError, match="stray text") as info:
        read_one('(a) "x"')
    assert (info.value.line, info.value.column) == (1, 5)


def test_nesting_up_to_the_depth_limit_reads_prints_and_walks() -> None:
    form = read_one("(" * MAX_DEPTH + "x" + ")" * MAX_DEPTH)
    node = form
    for _ in range(MAX_DEPTH):
        assert isinstance(node, SList) and len(node.items) == 1
        node = node.items[0]
    assert node == A("x")
    assert read_one(to_text(form)) == form
    assert read_one(pretty(form)) == form
    assert sum(1 for _ in walk(form)) == MAX_DEPTH + 1


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000, 100_000])
def test_deeper_nesting_is_a_positioned_parse_error(depth: int) -> None:
    with pytest.raises(ParseError, match="nest deeper") as info:
        read("(\n" * depth + "x" + ")" * depth)
    assert (info.value.line, info.value.column) == (MAX_DEPTH + 1, 1)


# ------------------------------------------------------------------ printing


def test_canonical_text_normalises_layout() -> None:
    text = '(  derive\n\tdeployment/current   (from @e42)\n ; c\n  (fact "a \\"b\\" \\\\")  )'
    form = read_one(text)
    assert to_text(form) == '(derive deployment/current (from @e42) (fact "a \\"b\\" \\\\"))'
    assert to_text(L()) == "()"
    assert to_text(L(L(), L(L()))) == "(() (()))"
    assert to_text(S("")) == '""'


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("new\nline", '"new\nline"'),
        ("", '""'),
    ],
)
def test_quote_escapes_only_quote_and_backslash(value: str, literal: str) -> None:
    assert quote(value) == literal
    assert to_text(S(value)) == literal


def test_to_text_seq_and_walk() -> None:
    body = tuple(read('(fact (region cn-hangzhou)) "note" x'))
    assert to_text_seq(body) == '(fact (region cn-hangzhou)) "note" x'
    assert to_text_seq([]) == ""
    tree = read_one("(a (b c) d)")
    assert [to_text(n) for n in walk(tree)] == ["(a (b c) d)", "a", "(b c)", "b", "c", "d"]


def test_pretty_breaks_long_lists_and_keeps_short_ones_flat() -> None:
    short = read_one("(a (b c))")
    assert pretty(short) == "(a (b c))"
    long = read_one(
        '(context-tx (base-version 42) (reason "replace an outdated assumption") '
        "(derive deployment/current (from @e42) (fact (region cn-hangzhou))))"
    )
    text = pretty(long, width=60)
    assert text == (
        "(context-tx\n"
        "  (base-version 42)\n"
        '  (reason "replace an outdated assumption")\n'
        "  (derive\n"
        "    deployment/current\n"
        "    (from @e42)\n"
        "    (fact (region cn-hangzhou))))"
    )
    assert all(len(line) <= 60 for line in text.splitlines())
    assert read_one(text) == long


def test_equality_ignores_positions_and_kind_matters() -> None:
    a, b = read_one('(x "y" z)'), read_one('\n\n   (x\n"y"   z)')
    assert a == b and hash(a) == hash(b)
    assert a.pos != b.pos
    assert Atom("a") != Str("a")
    assert Atom("a", 3) == Atom("a", 9) and hash(Atom("a", 3)) == hash(Atom("a", 9))
    assert L(A("a")) != L(S("a"))
    assert L(A("a")) != A("a")
    assert L(A("a")).head == "a" and L(S("a")).head is None and L().head is None


# ------------------------------------------------------------------ properties


def _atom_char_ok(char: str) -> bool:
    return not char.isspace()


ATOM_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters='()";').filter(
    _atom_char_ok
)
ATOMS = st.one_of(
    st.text(ATOM_CHARS, min_size=1, max_size=12),
    st.sampled_from(["derive", "deployment/current", "@e42", "42", "-", "é/ü", "\\", "a\\b"]),
).map(Atom)
STRING_CHARS = st.one_of(
    st.characters(exclude_categories=("Cs",)), st.sampled_from('"\\\n\r\t;() ')
)
STRINGS = st.text(STRING_CHARS, max_size=24).map(Str)
SEXPRS: st.SearchStrategy[SExpr] = st.recursive(
    st.one_of(ATOMS, STRINGS),
    lambda children: st.lists(children, max_size=5).map(lambda items: SList(tuple(items))),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(SEXPRS)
def test_print_read_round_trip(expr: SExpr) -> None:
    text = to_text(expr)
    again = read_one(text)
    assert again == expr
    assert to_text(again) == text
    assert read_one(pretty(expr, width=20)) == expr


@settings(max_examples=100, deadline=None)
@given(st.lists(SEXPRS, max_size=4))
def test_sequence_round_trip(exprs: list[SExpr]) -> None:
    assert read(to_text_seq(exprs)) == exprs
    assert read("\n; comment\n".join(to_text(e) for e in exprs)) == exprs


@settings(max_examples=150, deadline=None)
@given(SEXPRS)
def test_positions_point_at_each_node(expr: SExpr) -> None:
    text = pretty(expr, width=16)
    for node in walk(read_one(text)):
        if isinstance(node, SList):
            assert text[node.pos] == "("
        elif isinstance(node, Str):
            assert text[node.pos] == '"'
        else:
            assert text.startswith(node.text, node.pos)


SEXPR_NOISE = st.text(
    st.one_of(st.sampled_from('()";\\ \n\t@e1a'), st.characters(exclude_categories=("Cs",))),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), SEXPR_NOISE))
def test_arbitrary_text_raises_only_parse_error(text: str) -> None:
    try:
        forms = read(text)
    except ParseError as err:
        assert err.line is not None and err.column is not None
        assert 1 <= err.line <= text.count("\n") + 1
    else:
        assert read(to_text_seq(forms)) == forms
