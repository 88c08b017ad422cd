"""The context-tx parser and printer (DESIGN §5): every operation's accepted forms, refusals
with code, operation and line/column, the text-level validation rules, and property tests
(print -> parse round-trips; arbitrary text raises nothing but ParseError)."""

from __future__ import annotations

import contextlib
import re
import string
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from morphz import MorphzError, ParseError, TxError, ValidationError
from morphz.ids import is_id
from morphz.txlang import ops as o
from morphz.txlang import parse_tx, print_tx, read_tx
from morphz.txlang.sexpr import (
    MAX_DEPTH,
    Atom,
    SExpr,
    SList,
    Str,
    is_blank,
    line_col,
    pretty,
    read,
    read_one,
    to_text_seq,
)
from morphz.txlang.validate import MAX_BODY_DEPTH

# The two context-tx examples of the seed documents, verbatim (see test_seed_examples.py).
SEED_TX_1 = """(context-tx
  (base-version 42)
  (reason "replace an outdated assumption with verified evidence")
  (derive deployment/current
    (from @e42)
    (fact (region cn-hangzhou)))
  (relate deployment/current supersedes deployment/old)
  (retire deployment/old))"""

SEED_TX_2 = """(context-tx
  (base-version 17)
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from @e42 deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire @e42))"""

PREFIX = "(context-tx (base-version 7)\n  "  # the operation starts at line 2, column 3


def body(text: str) -> tuple[tuple[SExpr, ...], str]:
    items = tuple(read(text))
    return items, to_text_seq(items)


def one_op(op_text: str, reason: str | None = None) -> o.Op:
    header = "" if reason is None else f'(reason "{reason}") '
    tx = parse_tx(f"(context-tx (base-version 7) {header}{op_text})")
    assert len(tx.ops) == 1
    return tx.ops[0]


# ------------------------------------------------------------------ the seed examples


def test_seed_example_one_parses_exactly() -> None:
    tx = read_tx(SEED_TX_1)
    assert tx.base_version == 42
    assert tx.reason == "replace an outdated assumption with verified evidence"
    assert tx.ops == (
        o.Derive("deployment/current", ("@e42",), *body("(fact (region cn-hangzhou))")),
        o.Relate("deployment/current", "supersedes", "deployment/old"),
        o.Retire(("deployment/old",)),
    )
    assert tx.source == SEED_TX_1
    assert [line_col(SEED_TX_1, op.pos) for op in tx.ops] == [(4, 3), (7, 3), (8, 3)]
    assert not tx.needs_exact_version


def test_seed_example_two_parses_exactly() -> None:
    tx = read_tx(SEED_TX_2)
    assert tx.base_version == 17
    assert tx.ops == (
        o.Derive(
            "deployment/target-v2",
            ("@e42", "deployment/target-v1"),
            *body("(fact (region cn-shanghai))"),
        ),
        o.Relate("deployment/target-v2", "supersedes", "deployment/target-v1"),
        o.Retire(("deployment/target-v1",)),
        o.Retire(("@e42",)),
    )


def test_seed_example_canonical_and_pretty_print() -> None:
    tx = parse_tx(SEED_TX_1)
    assert print_tx(tx) == (
        "(context-tx (base-version 42) "
        '(reason "replace an outdated assumption with verified evidence") '
        "(derive deployment/current (from @e42) (fact (region cn-hangzhou))) "
        "(relate deployment/current supersedes deployment/old) "
        "(retire deployment/old))"
    )
    assert print_tx(tx, pretty=True) == (
        "(context-tx\n"
        "  (base-version 42)\n"
        '  (reason "replace an outdated assumption with verified evidence")\n'
        "  (derive deployment/current (from @e42) (fact (region cn-hangzhou)))\n"
        "  (relate deployment/current supersedes deployment/old)\n"
        "  (retire deployment/old))"
    )
    for text in (print_tx(tx), print_tx(tx, pretty=True)):
        again = parse_tx(text)
        assert (again.base_version, again.reason, again.ops) == (tx.base_version, tx.reason, tx.ops)


# ------------------------------------------------------------------ accepted forms


ACCEPTED: list[tuple[str, o.Op]] = [
    ("(create plan (step one))", o.Create("plan", *body("(step one)"))),
    (
        '(create notes/2026-08-04 "free text" (tag x) y)',
        o.Create("notes/2026-08-04", *body('"free text" (tag x) y')),
    ),
    ("(create a.b:c_d-e/f (x))", o.Create("a.b:c_d-e/f", *body("(x)"))),
    ("(create v2 (x))", o.Create("v2", *body("(x)"))),
    ("(create ünï/中文 (x))", o.Create("ünï/中文", *body("(x)"))),
    ("(create x (from-here a))", o.Create("x", *body("(from-here a)"))),
    (
        "(derive deployment/current (from @e42) (fact (region cn-hangzhou)))",
        o.Derive("deployment/current", ("@e42",), *body("(fact (region cn-hangzhou))")),
    ),
    (
        "(derive a/b (from @e1 x/y @e999999999999999999) (f) g)",
        o.Derive("a/b", ("@e1", "x/y", "@e999999999999999999"), *body("(f) g")),
    ),
    ("(revise plan (step two))", o.Revise("plan", None, *body("(step two)"))),
    ('(revise plan "text")', o.Revise("plan", None, *body('"text"'))),
    (
        "(revise plan (from @e3 other/frame) (step two))",
        o.Revise("plan", ("@e3", "other/frame"), *body("(step two)")),
    ),
    ("(retire deployment/old)", o.Retire(("deployment/old",))),
    ("(retire deployment/old @e42 x)", o.Retire(("deployment/old", "@e42", "x"))),
    ("(restore deployment/old @e42)", o.Restore(("deployment/old", "@e42"))),
    ("(protect plan @e1)", o.Protect(("plan", "@e1"))),
    ("(unprotect plan @e1)", o.Unprotect(("plan", "@e1"))),
    (
        "(relate deployment/current supersedes deployment/old)",
        o.Relate("deployment/current", "supersedes", "deployment/old"),
    ),
    ("(unrelate a depends-on b)", o.Unrelate("a", "depends-on", "b")),
    ("(place plan first)", o.Place("plan", "first", None)),
    ("(place plan last)", o.Place("plan", "last", None)),
    ("(place plan (before goal/main))", o.Place("plan", "before", "goal/main")),
    ("(place plan (after goal/main))", o.Place("plan", "after", "goal/main")),
    ("(checkpoint before-deploy)", o.Checkpoint("before-deploy")),
    ("(rollback before-deploy)", o.Rollback("before-deploy")),
    ("(drop-checkpoint cp/1)", o.DropCheckpoint(("cp/1",))),
    ("(drop-checkpoint a b)", o.DropCheckpoint(("a", "b"))),
    ("(retire-session s2)", o.RetireSession(("s2",))),
    ("(retire-session s2 worker:1)", o.RetireSession(("s2", "worker:1"))),
    ("(restore-session s2 worker:1)", o.RestoreSession(("s2", "worker:1"))),
]


@pytest.mark.parametrize(("op_text", "expected"), ACCEPTED, ids=[a for a, _ in ACCEPTED])
def test_accepted_forms(op_text: str, expected: o.Op) -> None:
    text = PREFIX + op_text + ")"
    tx = parse_tx(text)
    assert tx.base_version == 7 and tx.reason is None
    (op,) = tx.ops
    assert op == expected
    assert op.name == op_text[1:].split(maxsplit=1)[0]
    assert line_col(text, op.pos) == (2, 3)
    # canonical printing of the operation round-trips
    again = parse_tx(print_tx(tx))
    assert again.ops == tx.ops


def test_every_operation_is_covered_by_the_accepted_forms() -> None:
    assert {op.name for _, op in ACCEPTED} == set(o.OP_NAMES)


def test_header_forms() -> None:
    tx = parse_tx('(context-tx (base-version 0) (reason "why \\"quoted\\"") (create a b))')
    assert tx.base_version == 0 and tx.reason == 'why "quoted"'
    assert parse_tx("(context-tx (base-version 007) (create a b))").base_version == 7
    big = parse_tx("(context-tx (base-version 999999999999999999) (create a b))")
    assert big.base_version == 10**18 - 1
    spaced = parse_tx("; comment\n(context-tx\n (base-version 3) ; the version\n (create a b)\n)\n")
    assert spaced.base_version == 3 and spaced.ops == (o.Create("a", *body("b")),)


def test_exact_version_operations() -> None:
    for name in ("rollback", "retire-session", "restore-session"):
        assert parse_tx(
            f"(context-tx (base-version 1) (create a b) ({name} x))"
        ).needs_exact_version
    assert not parse_tx("(context-tx (base-version 1) (checkpoint x))").needs_exact_version


def test_id_of_256_chars_is_accepted() -> None:
    fid = "n/" + "x" * 254
    assert one_op(f"(create {fid} b)") == o.Create(fid, *body("b"))


# ------------------------------------------------------------------ refusals of one operation

# (op text, the op name the error names, where the error points: a substring of the op text
# whose first occurrence is the offending node, or None for the operation itself)
LONG_ID = "x" * 257
REFUSED_OPS: list[tuple[str, str, str | None]] = [
    # unknown operations
    ("(frobnicate x)", "frobnicate", None),
    ("(Create a b)", "Create", None),
    ("(retire_session s)", "retire_session", None),
    ("(context-tx (base-version 1) (create a b))", "context-tx", None),
    # create
    ("(create)", "create", None),
    ("(create a)", "create", None),
    ("(create 123 x)", "create", "123"),
    ("(create @x b)", "create", "@x"),
    ("(create @e1 b)", "create", "@e1"),
    ("(create a!b c)", "create", "a!b"),
    ("(create a,b c)", "create", "a,b"),
    ('(create "a" b)', "create", '"a"'),
    ("(create (a) b)", "create", "(a)"),
    (f"(create {LONG_ID} b)", "create", LONG_ID),
    ("(create a (from src) c)", "create", "(from"),
    ("(create a (from src))", "create", "(from"),
    # derive
    ("(derive a)", "derive", None),
    ("(derive a (from src))", "derive", None),
    ("(derive a src c)", "derive", "src"),
    ("(derive a (from) b)", "derive", "(from"),
    ("(derive a (from @e0) b)", "derive", "@e0"),
    ("(derive a (from ok @e01) b)", "derive", "@e01"),
    ("(derive a (from 55) b)", "derive", "55"),
    ("(derive a (from (x)) b)", "derive", "(x)"),
    ("(derive a (from src) c (from d))", "derive", "(from d"),
    ("(derive 12 (from src) c)", "derive", "12"),
    # revise
    ("(revise a)", "revise", None),
    ("(revise a (from src))", "revise", None),
    ("(revise 99 x)", "revise", "99"),
    ("(revise a (from) b)", "revise", "(from"),
    ("(revise a (from src) b (from c))", "revise", "(from c"),
    ("(revise a b (from c))", "revise", "(from c"),
    # retire / restore / protect / unprotect
    ("(retire)", "retire", None),
    ("(retire ok @e0)", "retire", "@e0"),
    ("(retire @x)", "retire", "@x"),
    ("(retire @e)", "retire", "@e"),
    ("(restore)", "restore", None),
    ("(restore 42)", "restore", "42"),
    ("(protect)", "protect", None),
    ('(protect "x")', "protect", '"x"'),
    ("(unprotect)", "unprotect", None),
    ("(unprotect (a))", "unprotect", "(a)"),
    # relate / unrelate
    ("(relate a r)", "relate", None),
    ("(relate a r b c)", "relate", None),
    ("(relate)", "relate", None),
    ("(unrelate a r)", "unrelate", None),
    ("(relate @e1 r b)", "relate", "@e1"),
    ("(relate a @e1 b)", "relate", "@e1"),
    ("(relate a r 5)", "relate", "5"),
    ('(relate a "r" b)', "relate", '"r"'),
    ("(unrelate a r (b))", "unrelate", "(b)"),
    # place
    ("(place a)", "place", None),
    ("(place a first last)", "place", None),
    ("(place a middle)", "place", "middle"),
    ("(place a FIRST)", "place", "FIRST"),
    ("(place a (before))", "place", "(before"),
    ("(place a (before b c))", "place", "(before"),
    ("(place a (beside b))", "place", "(beside"),
    ("(place a (first))", "place", "(first"),
    ('(place a "first")', "place", '"first"'),
    ("(place a (before @e1))", "place", "@e1"),
    ("(place a (after 3))", "place", "3"),
    ("(place 7 first)", "place", "7"),
    # checkpoints
    ("(checkpoint)", "checkpoint", None),
    ("(checkpoint a b)", "checkpoint", None),
    ("(checkpoint 12)", "checkpoint", "12"),
    ("(rollback)", "rollback", None),
    ("(rollback a b)", "rollback", None),
    ("(rollback @cp)", "rollback", "@cp"),
    ("(drop-checkpoint)", "drop-checkpoint", None),
    ("(drop-checkpoint ok 1)", "drop-checkpoint", "1"),
    # sessions
    ("(retire-session)", "retire-session", None),
    ("(retire-session s/1 @s)", "retire-session", "@s"),
    ("(restore-session)", "restore-session", None),
    ("(restore-session 00)", "restore-session", "00"),
]


@pytest.mark.parametrize(
    ("op_text", "op_name", "marker"), REFUSED_OPS, ids=[t[:40] for t, _, _ in REFUSED_OPS]
)
def test_refused_operation_names_op_line_and_column(
    op_text: str, op_name: str, marker: str | None
) -> None:
    text = PREFIX + "(create fine (x))\n  " + op_text + ")"
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    assert err.code == "parse"
    assert err.op == op_name
    assert err.op_index == 1
    column = 3 + (0 if marker is None else op_text.index(marker))
    assert (err.line, err.column) == (3, column), err.message
    assert isinstance(err, TxError) and isinstance(err, MorphzError)
    assert err.to_dict()["code"] == "parse" and err.to_dict()["line"] == 3


def test_unknown_operation_lists_the_known_ones() -> None:
    with pytest.raises(ParseError, match="unknown operation 'frobnicate'") as info:
        parse_tx(PREFIX + "(frobnicate x))")
    assert "derive" in info.value.message and "restore-session" in info.value.message
    with pytest.raises(ParseError, match="go before the operations") as info:
        parse_tx(PREFIX + '(create a b) (reason "late"))')
    assert info.value.op == "reason"


# ------------------------------------------------------------------ refusals of the envelope

# (text, line, column, message fragment); these name no operation
REFUSED_TEXTS: list[tuple[str, int, int, str]] = [
    ("", 1, 1, "empty input"),
    ("; nothing\n", 2, 1, "empty input"),
    ("(context-tx (base-version 1) (create a b))\n(create c d)", 2, 1, "stray text"),
    ("(context-tx (base-version 1) (create a b)) x", 1, 44, "stray text"),
    ('(context-tx (base-version 1) (create a b)) "s"', 1, 44, "stray text"),
    ("(context-tx (base-version 1) (create a b)))", 1, 43, "unbalanced ')'"),
    ("(context-tx (base-version 1)\n  (create a b)", 1, 1, "unbalanced '('"),
    ("(derive a (from b) c)", 1, 1, "expected (context-tx"),
    ("(context tx)", 1, 1, "expected (context-tx"),
    ('"context-tx"', 1, 1, "expected (context-tx"),
    ("context-tx", 1, 1, "expected (context-tx"),
    ("()", 1, 1, "expected (context-tx"),
    ("((context-tx) (base-version 1))", 1, 1, "expected (context-tx"),
    ("(context-tx)", 1, 2, "missing (base-version N)"),
    ("(context-tx (create a b))", 1, 2, "missing (base-version N)"),
    ('(context-tx (reason "r") (create a b))', 1, 2, "missing (base-version N)"),
    ("(context-tx (base-version 1))", 1, 1, "at least one operation"),
    ('(context-tx (base-version 1) (reason "r"))', 1, 1, "at least one operation"),
    ("(context-tx (base-version x) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version -1) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version +1) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version 1.5) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version 1e3) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version 0x10) (create a b))", 1, 27, "non-negative integer"),
    ('(context-tx (base-version "3") (create a b))', 1, 27, "non-negative integer"),
    ("(context-tx (base-version (3)) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version @e3) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version 1000000000000000000) (create a b))", 1, 27, "non-negative"),
    ("(context-tx (base-version ²) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version 1²) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version ٣) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version １) (create a b))", 1, 27, "non-negative integer"),
    ("(context-tx (base-version) (create a b))", 1, 13, "exactly one value"),
    ("(context-tx (base-version 1 2) (create a b))", 1, 13, "exactly one value"),
    ("(context-tx (base-version 1) (base-version 1) (create a b))", 1, 30, "given twice"),
    ('(context-tx (base-version 1) (reason "") (create a b))', 1, 38, "non-empty string"),
    ('(context-tx (base-version 1) (reason " \n ") (create a b))', 1, 38, "non-empty string"),
    ("(context-tx (base-version 1) (reason why) (create a b))", 1, 38, "non-empty string"),
    ("(context-tx (base-version 1) (reason (why)) (create a b))", 1, 38, "non-empty string"),
    ("(context-tx (base-version 1) (reason) (create a b))", 1, 30, "exactly one value"),
    ('(context-tx (base-version 1) (reason "a" "b") (create a b))', 1, 30, "exactly one"),
    ('(context-tx (base-version 1) (reason "a") (reason "b") (create a b))', 1, 43, "twice"),
    ("(context-tx (base-version 1) create)", 1, 30, "expected an operation, found 'create'"),
    ('(context-tx (base-version 1) "create")', 1, 30, "found a string"),
    ("(context-tx (base-version 1) ((create a b)))", 1, 30, "found a list"),
    ("(context-tx (base-version 1) ())", 1, 30, "found a list"),
]


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    REFUSED_TEXTS,
    ids=[t[:50] for t, *_ in REFUSED_TEXTS],
)
def test_refused_envelope_names_line_and_column(
    text: str, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    assert err.code == "parse"
    assert err.op is None
    assert fragment in err.message
    assert (err.line, err.column) == (line, column), err.message


# reader errors inside an operation name it (review 20b): (text, line, column, fragment)
REFUSED_IN_CREATE: list[tuple[str, int, int, str]] = [
    ('(context-tx (base-version 1) (create a "b))', 1, 40, "unterminated string"),
    ('(context-tx (base-version 1) (create a "b\\n"))', 1, 42, "unknown escape"),
]


@pytest.mark.parametrize(("text", "line", "column", "fragment"), REFUSED_IN_CREATE)
def test_a_reader_error_inside_an_operation_names_it(
    text: str, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(ParseError) as info:
        parse_tx(text)
    err = info.value
    assert (err.op, err.op_index) == ("create", 0)
    assert fragment in err.message
    assert (err.line, err.column) == (line, column), err.message


@pytest.mark.parametrize("depth", [MAX_DEPTH - 4, MAX_DEPTH - 2, MAX_DEPTH - 1, 3000])
def test_deeply_nested_body_is_parsed_or_refused_with_parse_error(depth: int) -> None:
    """Arbitrary text raises nothing but ParseError, however deeply it nests; nesting within
    the reader's limit (the envelope and the operation take two levels) parses and prints.
    Validation (read_tx) refuses a body deeper than an encoding can show it (MAX_BODY_DEPTH)."""
    text = "(context-tx (base-version 1) (create a " + "(" * depth + "x" + ")" * depth + "))"
    for parse in (parse_tx, read_tx):
        if depth + 2 > MAX_DEPTH:
            with pytest.raises(ParseError, match="nest deeper"):
                parse(text)
        elif parse is read_tx and depth > MAX_BODY_DEPTH:
            with pytest.raises(ValidationError, match=f"deeper than {MAX_BODY_DEPTH} levels"):
                parse(text)
        else:
            tx = parse(text)
            assert _same(parse_tx(print_tx(tx)), tx)
            assert _same(parse_tx(print_tx(tx, pretty=True)), tx)


# ------------------------------------------------------------------ validation (read_tx)

REASON_REQUIRED = {
    "retire": "(retire a)",
    "unprotect": "(unprotect a)",
    "unrelate": "(unrelate a r b)",
    "rollback": "(rollback cp)",
    "drop-checkpoint": "(drop-checkpoint cp)",
    "retire-session": "(retire-session s2)",
}
REASON_OPTIONAL = {
    "create": "(create a (x))",
    "derive": "(derive a (from @e1 b) (x))",
    "revise": "(revise a (from b) (x))",
    "restore": "(restore a @e1)",
    "protect": "(protect a @e1)",
    "relate": "(relate a r b)",
    "place": "(place a (after b))",
    "checkpoint": "(checkpoint cp)",
    "restore-session": "(restore-session s2)",
}


def test_reason_rule_covers_every_operation() -> None:
    assert set(REASON_REQUIRED) | set(REASON_OPTIONAL) == set(o.OP_NAMES)
    assert set(REASON_REQUIRED) == o.REASON_REQUIRED


@pytest.mark.parametrize("name", sorted(REASON_REQUIRED))
def test_reason_required(name: str) -> None:
    op_text = REASON_REQUIRED[name]
    text = PREFIX + "(create fine (x))\n  " + op_text + ")"
    parse_tx(text)  # well-formed: the rule is validation's, not the parser's
    with pytest.raises(ValidationError, match="requires a reason") as info:
        read_tx(text)
    err = info.value
    assert (err.code, err.op, err.op_index, err.line, err.column) == (
        "validation",
        name,
        1,
        3,
        3,
    )
    with_reason = f'(context-tx (base-version 7) (reason "because") {op_text})'
    assert read_tx(with_reason).reason == "because"


@pytest.mark.parametrize("name", sorted(REASON_OPTIONAL))
def test_reason_not_required(name: str) -> None:
    tx = read_tx(PREFIX + REASON_OPTIONAL[name] + ")")
    assert tx.reason is None and tx.ops[0].name == name


# (op text, op name, where the error points: a substring of the op text or None for the op)
INVALID_OPS: list[tuple[str, str, str | None, str]] = [
    ("(retire a a)", "retire", None, "listed twice"),
    ("(retire @e1 b @e1)", "retire", None, "listed twice"),
    ("(restore a a)", "restore", None, "listed twice"),
    ("(protect @e2 @e2)", "protect", None, "listed twice"),
    ("(unprotect x x)", "unprotect", None, "listed twice"),
    ("(derive x (from a a) b)", "derive", None, "listed twice"),
    ("(revise x (from @e2 @e2) b)", "revise", None, "listed twice"),
    ("(drop-checkpoint c d c)", "drop-checkpoint", None, "listed twice"),
    ("(retire-session s s)", "retire-session", None, "listed twice"),
    ("(restore-session s s)", "restore-session", None, "listed twice"),
    ("(derive a (from a) b)", "derive", None, "cannot cite itself"),
    ("(derive a (from @e1 a) b)", "derive", None, "cannot cite itself"),
    ("(revise a (from a) b)", "revise", None, "cannot cite itself"),
    ("(relate a r a)", "relate", None, "related to itself"),
    ("(unrelate a r a)", "unrelate", None, "related to itself"),
    ("(place a (before a))", "place", None, "relative to itself"),
    ("(place a (after a))", "place", None, "relative to itself"),
    ("(create a (note (retire b)))", "create", "(retire", "nested inside a body"),
    ("(create a (retire b))", "create", "(retire", "nested inside a body"),
    ("(derive a (from @e1) (x (y (context-tx))))", "derive", "(context-tx", "nested"),
    ("(revise a (fact (create b c)))", "revise", "(create", "nested inside a body"),
    ("(revise a (from @e1) ok (relate a r b))", "revise", "(relate", "nested inside a body"),
    ("(create a x (((place b first))))", "create", "(place", "nested inside a body"),
]


@pytest.mark.parametrize(
    ("op_text", "op_name", "marker", "fragment"), INVALID_OPS, ids=[t for t, *_ in INVALID_OPS]
)
def test_validation_rules(op_text: str, op_name: str, marker: str | None, fragment: str) -> None:
    text = '(context-tx (base-version 7) (reason "r")\n  (create fine (x))\n  ' + op_text + ")"
    parse_tx(text)  # well-formed
    with pytest.raises(ValidationError) as info:
        read_tx(text)
    err = info.value
    assert err.code == "validation" and err.op == op_name and err.op_index == 1
    assert fragment in err.message
    column = 3 + (0 if marker is None else op_text.index(marker))
    assert (err.line, err.column) == (3, column)


@pytest.mark.parametrize(
    "op_text",
    [
        "(create a retire)",  # an operation name as an atom is plain data
        '(create a (note "retire b"))',
        "(create a (note retire b))",
        "(derive a (from b) (from-note b))",
        "(relate a r b)",
        "(place a (before b))",
        "(retire a b @e1 @e2)",
        "(derive a (from b @e1) x)",
    ],
)
def test_validation_accepts(op_text: str) -> None:
    read_tx('(context-tx (base-version 7) (reason "r") ' + op_text + ")")


def test_validation_of_the_same_target_in_two_operations_is_the_mind_layers_call() -> None:
    tx = read_tx('(context-tx (base-version 1) (reason "r") (retire a) (retire a))')
    assert len(tx.ops) == 2


# ------------------------------------------------------------------ property tests

ID_CHARS = st.sampled_from(string.ascii_letters + string.digits + "_-.:/" + "éßЖ中")
IDS = st.one_of(
    st.text(ID_CHARS, min_size=1, max_size=16).filter(is_id),
    st.sampled_from(["deployment/current", "deployment/old", "a", "n/" + "z" * 254]),
)
REFS = st.integers(1, 10**18 - 1).map(lambda n: f"@e{n}")
TARGETS = st.one_of(IDS, REFS)


def _not_from(item: SExpr) -> bool:
    return not (isinstance(item, SList) and item.head == "from")


ATOM_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters='()";').filter(
    lambda c: not c.isspace()
)
LEAVES = st.one_of(
    st.text(ATOM_CHARS, min_size=1, max_size=8).map(Atom),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12).map(Str),
)
SEXPRS: st.SearchStrategy[SExpr] = st.recursive(
    LEAVES, lambda kids: st.lists(kids, max_size=4).map(lambda xs: SList(tuple(xs))), max_leaves=12
)
BODIES = st.lists(SEXPRS.filter(_not_from), min_size=1, max_size=3).map(tuple)


def _distinct(items: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(items, min_size=1, max_size=3, unique=True).map(tuple)


OPS: st.SearchStrategy[o.Op] = st.one_of(
    st.builds(lambda i, b: o.Create(i, b, to_text_seq(b)), IDS, BODIES),
    st.builds(lambda i, s, b: o.Derive(i, s, b, to_text_seq(b)), IDS, _distinct(TARGETS), BODIES),
    st.builds(
        lambda i, s, b: o.Revise(i, s, b, to_text_seq(b)),
        IDS,
        st.none() | _distinct(TARGETS),
        BODIES,
    ),
    st.builds(o.Retire, _distinct(TARGETS)),
    st.builds(o.Restore, _distinct(TARGETS)),
    st.builds(o.Protect, _distinct(TARGETS)),
    st.builds(o.Unprotect, _distinct(TARGETS)),
    st.builds(o.Relate, IDS, IDS, IDS),
    st.builds(o.Unrelate, IDS, IDS, IDS),
    st.builds(o.Place, IDS, st.sampled_from(["first", "last"]), st.none()),
    st.builds(o.Place, IDS, st.sampled_from(["before", "after"]), IDS),
    st.builds(o.Checkpoint, IDS),
    st.builds(o.Rollback, IDS),
    st.builds(o.DropCheckpoint, _distinct(IDS)),
    st.builds(o.RetireSession, _distinct(IDS)),
    st.builds(o.RestoreSession, _distinct(IDS)),
)
# a reason shows something: only whitespace and invisible characters is refused (review 16b)
REASONS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30).filter(
    lambda reason: not is_blank(reason)
)
TXS = st.builds(
    o.Tx,
    base_version=st.integers(0, 10**18 - 1),
    reason=st.none() | REASONS,
    ops=st.lists(OPS, min_size=1, max_size=5).map(tuple),
)


def _same(a: o.Tx, b: o.Tx) -> bool:
    return (a.base_version, a.reason, a.ops) == (b.base_version, b.reason, b.ops)


def _printed(tx: o.Tx) -> str:
    """print_tx of ``tx``, printed from its parts (never the source handed back)."""
    return print_tx(o.Tx(tx.base_version, tx.reason, tx.ops))


def _check_canonical_flag(tx: o.Tx) -> None:
    """A Tx marked canonical is exactly its own printing, which print_tx then hands back."""
    if tx.canonical:
        assert _printed(tx) == tx.source
        assert print_tx(tx) is tx.source
    else:
        assert print_tx(tx) == _printed(tx)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TXS, st.integers(12, 100))
def test_print_parse_round_trip(tx: o.Tx, width: int) -> None:
    flat = print_tx(tx)
    parsed = parse_tx(flat)
    assert _same(parsed, tx)
    assert parsed.source == flat
    assert print_tx(parsed) == flat  # canonical text is a fixpoint
    _check_canonical_flag(parsed)
    nice = print_tx(tx, pretty=True)
    assert _same(parse_tx(nice), tx)
    # any layout of the same S-expression is the same transaction
    assert _same(parse_tx(pretty(read_one(flat), width=width)), tx)


FRAGMENTS = [
    "(",
    ")",
    "((",
    "))",
    '"',
    "\\",
    ";",
    "\n",
    " ",
    "(context-tx",
    "context-tx",
    "(base-version 3)",
    "(base-version",
    "base-version",
    "(reason",
    '(reason "r")',
    '(reason "")',
    *[f"({name}" for name in o.OP_NAMES],
    *o.OP_NAMES,
    "(from",
    "(from @e1 a)",
    "(from)",
    "@e0",
    "@e1",
    "@e01",
    "@x",
    "@",
    "first",
    "last",
    "(before a)",
    "(after",
    "before",
    "42",
    "-1",
    "007",
    "²",
    "٣",
    "a/b",
    "x" * 257,
    "(fact (region cn))",
    '"free \\" text"',
    '"bad \\q"',
]
TOKEN_RE = re.compile(r'\(|\)|"(?:[^"\\]|\\.)*"|[^\s()"]+', re.DOTALL)


@st.composite
def near_miss_texts(draw: st.DrawFn) -> str:
    """Real tx syntax, damaged: truncated, sliced, spliced with fragments, tokens shuffled."""
    text = print_tx(draw(TXS), pretty=draw(st.booleans()))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "delete", "insert", "swap", "shuffle"]))
        i = draw(st.integers(0, len(text)))
        if kind == "truncate":
            text = text[:i]
        elif kind == "delete":
            text = text[:i] + text[draw(st.integers(i, min(len(text), i + 12))) :]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
        else:
            tokens = TOKEN_RE.findall(text)
            if len(tokens) < 2:
                continue
            if kind == "swap":
                j = draw(st.integers(0, len(tokens) - 2))
                tokens[j], tokens[j + 1] = tokens[j + 1], tokens[j]
            else:
                j = draw(st.integers(0, len(tokens) - 1))
                k = draw(st.integers(j, min(len(tokens), j + 6)))
                tokens[j:k] = draw(st.permutations(tokens[j:k]))
            text = " ".join(tokens)
    return text


FRAGMENT_SOUP = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=25
).map(" ".join)


def _close_open_lists(text: str) -> str:
    """Balance the parentheses outside strings, so the reader lets the parser see the text."""
    depth = 0
    for token in TOKEN_RE.findall(text):
        depth += {"(": 1, ")": -1}.get(token, 0)
    return text + ")" * max(depth, 0)


HEADED_SOUP = FRAGMENT_SOUP.map(lambda s: _close_open_lists("(context-tx (base-version 0) " + s))

# Well-formed S-expressions that are close to real syntax: spliced into a parsed tx in place of
# any node, the reader accepts the text and the parser's own checks must refuse or accept it.
NODE_FRAGMENTS = [
    read_one(text)
    for text in [
        "()",
        "(())",
        "(from)",
        "(from @e1 a)",
        "(from @e0)",
        "(before a)",
        "(after)",
        "(first)",
        "(base-version 3)",
        "(base-version ²)",
        '(reason "r")',
        '(reason "")',
        "(retire a)",
        "(place a (before b))",
        "(context-tx)",
        "@e0",
        "@e1",
        "@e01",
        "@",
        "first",
        "last",
        "42",
        "-1",
        "²",
        "٣",
        "a/b",
        "x" * 257,
        '"s"',
        '""',
        *o.OP_NAMES,
    ]
]


def _paths(expr: SExpr, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    out = [path]
    if isinstance(expr, SList):
        for i, item in enumerate(expr.items):
            out.extend(_paths(item, (*path, i)))
    return out


def _edit(expr: SExpr, path: tuple[int, ...], change: Callable[[SList, int], SList]) -> SExpr:
    """Apply ``change(parent, index)`` to the parent of the node at ``path``."""
    assert isinstance(expr, SList) and path
    if len(path) == 1:
        return change(expr, path[0])
    items = list(expr.items)
    items[path[0]] = _edit(items[path[0]], path[1:], change)
    return SList(tuple(items))


@st.composite
def mutated_trees(draw: st.DrawFn) -> str:
    """A valid tx whose S-expression tree had nodes replaced, deleted, duplicated or swapped."""
    tree = read_one(print_tx(draw(TXS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(tree)[1:]))
        kind = draw(st.sampled_from(["replace", "delete", "duplicate", "swap", "insert"]))
        fragment = draw(st.sampled_from(NODE_FRAGMENTS))

        def change(parent: SList, i: int, kind: str = kind, new: SExpr = fragment) -> SList:
            items = list(parent.items)
            if kind == "replace":
                items[i] = new
            elif kind == "delete":
                del items[i]
            elif kind == "duplicate":
                items.insert(i, items[i])
            elif kind == "insert":
                items.insert(i, new)
            elif i + 1 < len(items):
                items[i], items[i + 1] = items[i + 1], items[i]
            return SList(tuple(items))

        tree = _edit(tree, path, change)
    return pretty(tree, width=draw(st.integers(10, 80)))


def _only_parse_errors(text: str) -> None:
    try:
        tx = parse_tx(text)
    except ParseError as err:
        assert err.line is not None and err.column is not None
        return
    with contextlib.suppress(ValidationError):
        read_tx(text)
    _check_canonical_flag(tx)
    assert _same(parse_tx(print_tx(tx)), tx)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=100))
def test_arbitrary_text_raises_only_parse_error(text: str) -> None:
    _only_parse_errors(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated_trees(), near_miss_texts(), FRAGMENT_SOUP, HEADED_SOUP))
def test_near_miss_text_raises_only_parse_error(text: str) -> None:
    _only_parse_errors(text)


def test_canonical_flag_on_the_fast_path_only() -> None:
    """The canonical fast path marks its Tx canonical (print_tx returns the source itself);
    a base version with leading zeros, other spacing or a comment is printed afresh."""
    flat = (
        '(context-tx (base-version 7) (reason "newer evidence from @e3") '
        "(derive c/2 (from @e3 c/1) (fact (region cn-shanghai) (replicas 3))) "
        "(relate c/2 supersedes c/1) (retire c/1))"
    )
    tx = parse_tx(flat)
    assert tx.canonical and print_tx(tx) is flat and _printed(tx) == flat
    for other in (
        flat.replace("(base-version 7)", "(base-version 007)"),
        flat.replace(" (retire", "  (retire"),
        flat.replace("(retire c/1))", "(retire c/1) ; done\n)"),
        print_tx(tx, pretty=True),
    ):
        again = parse_tx(other)
        assert not again.canonical and _same(again, tx)
        assert print_tx(again) == flat
    assert print_tx(tx, pretty=True) == print_tx(parse_tx(flat.replace("7)", "07)")), pretty=True)
