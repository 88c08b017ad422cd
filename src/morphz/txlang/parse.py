"""Parse context-tx text into a :class:`~morphz.txlang.ops.Tx`, and print it back canonically.

Only the shape of the text is checked here: the envelope, known operations, argument forms and
id syntax. Every refusal is a :class:`~morphz.errors.ParseError` with the operation and its line
and column. The rules a well-formed text can still break (a missing reason, a duplicate target,
an operation nested in a body) are :mod:`morphz.txlang.validate`'s; whether a frame exists or may
be retired is the mind layer's call.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from morphz.errors import InputError, ParseError
from morphz.ids import describe_id_rules, is_ref, is_stored_id
from morphz.txlang import ops as o
from morphz.txlang.sexpr import (
    CANONICAL_ITEMS,
    Atom,
    SExpr,
    SList,
    Str,
    describe_char,
    invisible_char,
    line_col,
    list_items,
    offset_of,
    quote,
    read,
    read_one,
    source_text_seq,
    unicode_problem,
)

_MAX_BASE_VERSION = 2**62
_DIGITS = re.compile(r"[0-9]{1,18}")


class _Ctx:
    """The source text and the operation being parsed, for positioned errors."""

    __slots__ = ("index", "op", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.op: str | None = None
        self.index: int | None = None

    def error(self, node_pos: int, message: str) -> ParseError:
        line, column = line_col(self.text, node_pos)
        return ParseError(message, op=self.op, op_index=self.index, line=line, column=column)


def _atom(ctx: _Ctx, node: SExpr, what: str) -> str:
    if not isinstance(node, Atom):
        raise ctx.error(node.pos, f"expected {what}, found {_describe(node)}")
    return node.text


def _describe(node: SExpr) -> str:
    if isinstance(node, Atom):
        return f"'{node.text}'"
    if isinstance(node, Str):
        return "a string"
    return "a list"


def _frame_id(ctx: _Ctx, node: SExpr, what: str = "a frame id") -> str:
    text = _atom(ctx, node, what)
    if not is_stored_id(text):  # what a stored tx may hold; check_new holds new ids to more
        raise ctx.error(
            node.pos, f"'{text}' is not a valid id for {what}: {describe_id_rules(text)}"
        )
    return text


def _target(ctx: _Ctx, node: SExpr) -> str:
    text = _atom(ctx, node, "a frame id or an event ref like @e42")
    if is_ref(text) or is_stored_id(text):
        return text
    raise ctx.error(
        node.pos, f"'{text}' is neither a frame id nor an event ref: {describe_id_rules(text)}"
    )


def _each(
    ctx: _Ctx, nodes: tuple[SExpr, ...], parse: Callable[[_Ctx, SExpr], str]
) -> tuple[str, ...]:
    return tuple([parse(ctx, node) for node in nodes])


def _targets(ctx: _Ctx, form: SList) -> tuple[str, ...]:
    if len(form.items) < 2:
        raise ctx.error(form.pos, f"({ctx.op} TARGET...) needs at least one target")
    return _each(ctx, form.items[1:], _target)


def _ids(ctx: _Ctx, form: SList, what: str) -> tuple[str, ...]:
    if len(form.items) < 2:
        raise ctx.error(form.pos, f"({ctx.op} {what.upper()}...) needs at least one {what}")
    return _each(ctx, form.items[1:], lambda c, n: _frame_id(c, n, f"a {what} id"))


def _check_body(ctx: _Ctx, body: tuple[SExpr, ...], form: SList) -> None:
    if not body:
        raise ctx.error(form.pos, f"({ctx.op} ID ...) needs a body: one or more S-expressions")
    for item in body:
        if isinstance(item, SList) and item.head == "from":
            raise ctx.error(
                item.pos,
                "(from ...) is only allowed right after the frame id of derive or revise; if "
                'this list is data, quote its first word: ("from" ...)',
            )


def _body_text(ctx: _Ctx, body: tuple[SExpr, ...], form: SList) -> str:
    return source_text_seq(ctx.text, body, form.end - 1)


def _from_clause(ctx: _Ctx, node: SExpr) -> tuple[str, ...] | None:
    if not (isinstance(node, SList) and node.head == "from"):
        return None
    if len(node.items) < 2:
        raise ctx.error(node.pos, "(from SRC...) needs at least one source frame or event ref")
    return _each(ctx, node.items[1:], _target)


def _create(ctx: _Ctx, form: SList) -> o.Op:
    if len(form.items) < 2:
        raise ctx.error(form.pos, "(create ID BODY...) needs a frame id")
    fid = _frame_id(ctx, form.items[1])
    body = form.items[2:]
    if body and _from_clause(ctx, body[0]) is not None:
        raise ctx.error(
            body[0].pos, "create takes no sources: use (derive ID (from SRC...) BODY...)"
        )
    _check_body(ctx, body, form)
    return o.Create(fid, body, _body_text(ctx, body, form), form.pos)


def _derive(ctx: _Ctx, form: SList) -> o.Op:
    if len(form.items) < 3:
        raise ctx.error(
            form.pos, "(derive ID (from SRC...) BODY...) needs an id, sources and a body"
        )
    fid = _frame_id(ctx, form.items[1])
    sources = _from_clause(ctx, form.items[2])
    if sources is None:
        raise ctx.error(form.items[2].pos, "derive needs (from SRC...) right after the frame id")
    body = form.items[3:]
    _check_body(ctx, body, form)
    return o.Derive(fid, sources, body, _body_text(ctx, body, form), form.pos)


def _revise(ctx: _Ctx, form: SList) -> o.Op:
    if len(form.items) < 3:
        raise ctx.error(form.pos, "(revise ID [(from SRC...)] BODY...) needs an id and a body")
    fid = _frame_id(ctx, form.items[1])
    sources = _from_clause(ctx, form.items[2])
    body = form.items[3:] if sources is not None else form.items[2:]
    _check_body(ctx, body, form)
    return o.Revise(fid, sources, body, _body_text(ctx, body, form), form.pos)


def _edge(ctx: _Ctx, form: SList) -> tuple[str, str, str]:
    if len(form.items) != 4:
        raise ctx.error(form.pos, f"({ctx.op} SUBJECT RELATION OBJECT) takes exactly three ids")
    for end in (form.items[1], form.items[3]):
        if isinstance(end, Atom) and is_ref(end.text):
            raise ctx.error(
                end.pos,
                f"both ends of an edge are frames, and {end.text} is an observation: to link "
                f"one, cite it in a frame, (derive ID (from {end.text}) ...) or (revise ID "
                f"(from {end.text} ...) ...)",
            )
    subject = _frame_id(ctx, form.items[1], "the subject frame id")
    relation = _frame_id(ctx, form.items[2], "a relation name")
    obj = _frame_id(ctx, form.items[3], "the object frame id")
    return subject, relation, obj


def _place(ctx: _Ctx, form: SList) -> o.Op:
    usage = "(place ID first|last|(before ID2)|(after ID2))"
    if len(form.items) != 3:
        raise ctx.error(form.pos, f"expected {usage}")
    fid = _frame_id(ctx, form.items[1])
    where = form.items[2]
    if isinstance(where, Atom) and where.text in ("first", "last"):
        return o.Place(fid, "first" if where.text == "first" else "last", None, form.pos)
    if isinstance(where, SList) and where.head in ("before", "after") and len(where.items) == 2:
        anchor = _frame_id(ctx, where.items[1])
        return o.Place(fid, "before" if where.head == "before" else "after", anchor, form.pos)
    raise ctx.error(where.pos, f"expected {usage}")


def _one_checkpoint(ctx: _Ctx, form: SList) -> str:
    if len(form.items) != 2:
        raise ctx.error(form.pos, f"({ctx.op} NAME) takes exactly one checkpoint name")
    return _frame_id(ctx, form.items[1], "a checkpoint name")


_OPS: dict[str, Callable[[_Ctx, SList], o.Op]] = {
    "create": _create,
    "derive": _derive,
    "revise": _revise,
    "retire": lambda c, f: o.Retire(_targets(c, f), f.pos),
    "restore": lambda c, f: o.Restore(_targets(c, f), f.pos),
    "protect": lambda c, f: o.Protect(_targets(c, f), f.pos),
    "unprotect": lambda c, f: o.Unprotect(_targets(c, f), f.pos),
    "relate": lambda c, f: o.Relate(*_edge(c, f), f.pos),
    "unrelate": lambda c, f: o.Unrelate(*_edge(c, f), f.pos),
    "place": _place,
    "checkpoint": lambda c, f: o.Checkpoint(_one_checkpoint(c, f), f.pos),
    "rollback": lambda c, f: o.Rollback(_one_checkpoint(c, f), f.pos),
    "drop-checkpoint": lambda c, f: o.DropCheckpoint(_ids(c, f, "checkpoint"), f.pos),
    "retire-session": lambda c, f: o.RetireSession(_ids(c, f, "session"), f.pos),
    "restore-session": lambda c, f: o.RestoreSession(_ids(c, f, "session"), f.pos),
}
assert tuple(_OPS) == o.OP_NAMES


def _header(ctx: _Ctx, items: tuple[SExpr, ...]) -> tuple[int, str | None, int, int]:
    """Parse (base-version N) and optional (reason "..."); return them, the first op index and
    where (base-version N) stands."""
    base: int | None = None
    base_pos = 0
    reason: str | None = None
    i = 1
    while i < len(items):
        node = items[i]
        head = node.head if isinstance(node, SList) else None
        if head not in ("base-version", "reason"):
            break
        assert isinstance(node, SList)
        if len(node.items) != 2:
            raise ctx.error(node.pos, f"({head} ...) takes exactly one value")
        value = node.items[1]
        if head == "base-version":
            if base is not None:
                raise ctx.error(node.pos, "base-version is given twice")
            text = value.text if isinstance(value, Atom) else ""
            if _DIGITS.fullmatch(text) is None or int(text) > _MAX_BASE_VERSION:
                raise ctx.error(value.pos, "base-version must be a non-negative integer")
            base, base_pos = int(text), node.pos
        else:
            if reason is not None:
                raise ctx.error(node.pos, "reason is given twice")
            if not isinstance(value, Str) or not value.value.strip():
                raise ctx.error(value.pos, 'reason must be a non-empty string: (reason "why")')
            reason = value.value
        i += 1
    if base is None:
        raise ctx.error(items[0].pos, "missing (base-version N): state the mind version you read")
    return base, reason, i, base_pos


_ONLY = (
    "expected (context-tx (base-version N) OP...) and nothing around it: send only that form, "
    "without code fences or other text"
)
_AFTER_ONLY = (
    "stray text after the (context-tx ...) form: send one transaction and nothing after it"
)


def _around(ctx: _Ctx, text: str, fault: ParseError) -> ParseError | None:
    """For text the reader refused with ``fault``: when no ``(context-tx`` opens it (prose or
    a fence before it), or its first form is whole and the fault lies after that form (prose
    after it), the error that says to send only the form; None when the fault is the
    transaction's own (the reader's error stands)."""
    start = _first_form(text)
    if _TX_OPEN.match(text, start) is None:
        return ctx.error(start, _ONLY)
    end = _form_end(text, start)
    if end is None or _offset(text, fault.line, fault.column) < end:
        return None
    at = end + len(text[end:]) - len(text[end:].lstrip())
    return ctx.error(at, f"{_AFTER_ONLY} (the reader found: {fault.message})")


def _in_operation(text: str, fault: ParseError) -> ParseError:
    """``fault``, a reader error within the transaction, naming the operation whose text holds
    it (its head and index, counted as :func:`_parse_general` counts them: after the header's
    base-version and reason), when it lies in one."""
    at = _offset(text, fault.line, fault.column)
    items = list_items(text, _first_form(text))[1:]  # (the first is context-tx itself)
    while items and items[0][2] in ("base-version", "reason"):
        items.pop(0)
    for index, (start, end, head) in enumerate(items):
        if start <= at < end:
            return ParseError(
                fault.message,
                op=head,
                op_index=index,
                line=fault.line,
                column=fault.column,
                details=fault.details,
            )
    return fault


_TX_OPEN = re.compile(r"\(\s*context-tx(?=[\s()\";]|$)")


def _first_form(text: str) -> int:
    """Where the first form starts: after blanks and ``;`` comments."""
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text[i] == ";":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline + 1
        else:
            break
    return i


def _offset(text: str, line: int | None, column: int | None) -> int:
    """The character offset of a 1-based line and column (the end when they are unknown)."""
    if line is None or column is None:
        return len(text)
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1
    return start + column - 1


def _form_end(text: str, start: int) -> int | None:
    """The index just after the list that opens at ``start`` (strings and ``;`` comments
    skipped), or None when it never closes."""
    depth, i, size = 0, start, len(text)
    while i < size:
        c = text[i]
        if c == '"':
            i += 1
            while i < size and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == ";":
            while i < size and text[i] != "\n":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def parse_tx(text: str) -> o.Tx:
    """Parse ``(context-tx (base-version N) [(reason "...")] OP...)``.

    Raises only :class:`ParseError`. Use :func:`morphz.txlang.read_tx` to also check the rules
    of :mod:`morphz.txlang.validate`.
    """
    if not isinstance(text, str):
        raise ParseError(
            f"a context transaction is text, not {type(text).__name__}: "
            "(context-tx (base-version N) OP...) as a str (decode bytes as UTF-8 first)"
        )
    problem = unicode_problem(text)
    if problem is not None:
        raise _Ctx(text).error(problem[0], problem[1])
    tx = _parse_canonical(text)
    if tx is not None:
        return tx
    try:
        return _parse_general(text)
    except ParseError as exc:
        named = _naming_invisible(text, exc)
        if named is exc:
            raise
        raise named from None


def _naming_invisible(text: str, exc: ParseError) -> ParseError:
    """``exc``, or when the node it points at holds an invisible character in its own atoms (a
    zero-width space pasted into ``create``, a byte-order mark before the form) the same error
    naming it: the message alone describes text that looks right."""
    if exc.line is None or exc.column is None:
        return exc
    at = invisible_char(text, offset_of(text, exc.line, exc.column))
    if at is None:
        return exc
    line, column = line_col(text, at)
    message = (
        f"{exc.message}; the text holds an invisible character {describe_char(text[at])} at "
        f"line {line}, column {column}: remove it"
    )
    return ParseError(
        message,
        op=exc.op,
        op_index=exc.op_index,
        line=exc.line,
        column=exc.column,
        details=exc.details,
    )


def _parse_general(text: str) -> o.Tx:
    """parse_tx for any text the fast path did not take; raises every refusal."""
    ctx = _Ctx(text)
    try:
        forms = read(text)
    except ParseError as exc:
        raise _around(ctx, text, exc) or _in_operation(text, exc) from None
    form = forms[0] if forms else read_one(text)  # read_one: the error for empty input
    if not isinstance(form, SList) or form.head != "context-tx":
        raise ctx.error(form.pos, _ONLY)
    if len(forms) > 1:
        raise ctx.error(forms[1].pos, _AFTER_ONLY)
    base, reason, first, base_pos = _header(ctx, form.items)
    ops: list[o.Op] = []
    for index, node in enumerate(form.items[first:]):
        ctx.index = index
        ctx.op = None
        if not isinstance(node, SList) or node.head is None:
            raise ctx.error(node.pos, f"expected an operation, found {_describe(node)}")
        name = node.head
        handler = _OPS.get(name)
        if handler is None:
            header = name in ("base-version", "reason")
            hint = (
                " (base-version and reason go before the operations)"
                if header
                else f"; known operations: {', '.join(o.OP_NAMES)}"
            )
            ctx.op = name
            raise ctx.error(node.pos, f"unknown operation '{name}'{hint}")
        ctx.op = name
        ops.append(handler(ctx, node))
    if not ops:
        raise ctx.error(form.pos, "a context-tx needs at least one operation")
    return o.Tx(base, reason, tuple(ops), text, base_pos=base_pos)


# ---------------------------------------------------------------- canonical fast path
#
# Every stored transaction is canonical (print_tx wrote it), and so are most submitted ones: one
# line, single spaces. For those, a few anchored regexes find the header and each operation
# without building a tree for anything but the bodies. The fast path returns None as soon as the
# text is anything else (other spacing, an operation it does not know, a bad id, a missing
# part...), and parse_tx takes the general path above, which also produces every error; so both
# paths give the same Tx for every text the fast path accepts. A text the fast path accepts is
# its own canonical printing (save a base version written with leading zeros), so its Tx is
# marked ``canonical`` and print_tx hands the source back instead of printing it again.

# The rules of morphz.ids (keep them in step) for an atom followed by " " or ")": an id, and an
# id or event ref (a target or source).
_END = r"(?=[ )])"
_ID = rf"(?!\d++{_END})[\w.:/-]{{1,256}}+{_END}"
_TARGET = rf"(?:@e[1-9][0-9]{{0,17}}+{_END}|{_ID})"
_HEAD = re.compile(r'\(context-tx \(base-version ([0-9]{1,18})\)(?: \(reason "([^"\\]*+)"\))?')
_OP = re.compile(
    rf" \((?:(create|derive|revise) ({_ID})(?: \(from((?: {_TARGET})++)\))? "
    rf"(?P<body>{CANONICAL_ITEMS})"
    rf"|(retire|restore|protect|unprotect)(?P<targets>(?: {_TARGET})++)"
    rf"|(relate|unrelate) ({_ID}) ({_ID}) (?P<object>{_ID}))\)"
)
_TARGET_OPS: dict[str, Callable[[tuple[str, ...], int], o.Op]] = {
    "retire": o.Retire,
    "restore": o.Restore,
    "protect": o.Protect,
    "unprotect": o.Unprotect,
}


def _parse_canonical(text: str) -> o.Tx | None:
    head = _HEAD.match(text)
    if head is None:
        return None
    base, reason = int(head.group(1)), head.group(2)
    if base > _MAX_BASE_VERSION or (reason is not None and not reason.strip()):
        return None
    ops: list[o.Op] = []
    last = len(text) - 1
    at = head.end()
    while at < last:
        match = _OP.match(text, at)
        if match is None:
            return None
        kind = match.lastgroup
        if kind == "body":
            op = _canonical_body_op(text, match)
            if op is None:
                return None
            ops.append(op)
        elif kind == "targets":
            targets = tuple(match.group(6)[1:].split(" "))
            ops.append(_TARGET_OPS[match.group(5)](targets, at + 1))
        else:
            name, subject, relation, obj = match.group(7, 8, 9, 10)
            edge = o.Relate if name == "relate" else o.Unrelate
            ops.append(edge(subject, relation, obj, at + 1))
        at = match.end()
    if at != last or text[last] != ")" or not ops:
        return None
    digits = head.group(1)  # "007" reads as 7 but prints as "7": then the text is not canonical
    canonical = len(digits) == 1 or digits[0] != "0"
    return o.Tx(base, reason, tuple(ops), text, canonical, len("(context-tx "))


def _canonical_body_op(text: str, match: re.Match[str]) -> o.Op | None:
    """A create, derive or revise from its match, or None."""
    name, fid, cited, body_text = match.group(1, 2, 3, 4)
    if "(from" in body_text:
        return None  # perhaps (from ...) out of place: the general path knows
    pos, body = match.start() + 1, o.BodySpan(text, match.start(4))
    if cited is None:
        if name == "create":
            return o.Create(fid, body, body_text, pos)
        return o.Revise(fid, None, body, body_text, pos) if name == "revise" else None
    if name == "create":
        return None
    sources = tuple(cited[1:].split(" "))
    if name == "derive":
        return o.Derive(fid, sources, body, body_text, pos)
    return o.Revise(fid, sources, body, body_text, pos)


# ---------------------------------------------------------------- printing


_TARGETED = (o.Retire, o.Restore, o.Protect, o.Unprotect)
_EDGED = (o.Relate, o.Unrelate)
_CHECKPOINTED = (o.Checkpoint, o.Rollback)


def _op_text(op: o.Op) -> str:
    if isinstance(op, o.Derive):
        return f"(derive {op.id} (from {' '.join(op.sources)}) {op.body_text})"
    if isinstance(op, _TARGETED):
        return f"({op.name} {' '.join(op.targets)})"
    if isinstance(op, _EDGED):
        return f"({op.name} {op.subject} {op.relation} {op.object})"
    if isinstance(op, o.Create):
        return f"(create {op.id} {op.body_text})"
    if isinstance(op, o.Revise):
        src = f" (from {' '.join(op.sources)})" if op.sources is not None else ""
        return f"(revise {op.id}{src} {op.body_text})"
    if isinstance(op, o.Place):
        where = op.where if op.anchor is None else f"({op.where} {op.anchor})"
        return f"(place {op.id} {where})"
    if isinstance(op, _CHECKPOINTED):
        return f"({op.name} {op.checkpoint})"
    if isinstance(op, o.DropCheckpoint):
        return f"(drop-checkpoint {' '.join(op.checkpoints)})"
    return f"({op.name} {' '.join(op.sessions)})"


def op_text(op: o.Op) -> str:
    """Canonical text of one operation."""
    return _op_text(op)


def print_tx(tx: o.Tx, *, pretty: bool = False) -> str:
    """Canonical text of ``tx`` (one line), or one operation per line when ``pretty``."""
    if not isinstance(tx, o.Tx):
        raise InputError(
            f"print_tx takes a parsed transaction, not {type(tx).__name__}: pass it "
            "morphz.read_tx(text) (its text, canonical: print_tx(read_tx(text)))"
        )
    if tx.canonical and not pretty:
        return tx.source  # already canonical: the fast path matched every byte of it
    parts = [f"(base-version {tx.base_version})"]
    if tx.reason is not None:
        parts.append(f"(reason {quote(tx.reason)})")
    parts.extend(_op_text(op) for op in tx.ops)
    if pretty:
        return "(context-tx\n  " + "\n  ".join(parts) + ")"
    return "(context-tx " + " ".join(parts) + ")"
