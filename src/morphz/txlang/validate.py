"""Rules a well-formed transaction text can still break (DESIGN §5), checked before any state
is read. Each refusal is a :class:`~morphz.errors.ValidationError` naming the operation and the
line and column of the offending node.

- ``reason`` is required when the tx retires, unprotects, unrelates, rolls back, drops a
  checkpoint or retires a session;
- no target, source, checkpoint or session is listed twice in one operation;
- a frame cannot cite itself, be related to itself, or be placed relative to itself;
- an operation nested inside a body is refused (operations go at the top level);
- new commits only (:func:`check_new`): a reason shows something, and the ids the transaction
  creates (a frame, a checkpoint, a relation's name) keep the rules for new ids
  (:func:`morphz.ids.is_new_id`: this Python's Unicode database, composed form), which the ids
  of a stored transaction (written by an earlier build, or a newer Python) need not keep.
"""

from __future__ import annotations

import re
from collections import Counter

from morphz.errors import ValidationError
from morphz.ids import describe_id_rules, is_new_id
from morphz.txlang import ops as o
from morphz.txlang.parse import parse_tx
from morphz.txlang.sexpr import MAX_DEPTH, SList, is_blank, line_col, nesting, walk


def _fail(tx: o.Tx, index: int, pos: int, message: str) -> ValidationError:
    line, column = line_col(tx.source, pos) if tx.source else (None, None)
    op = tx.ops[index]
    return ValidationError(message, op=op.name, op_index=index, line=line, column=column)


_TARGETS = (o.Retire, o.Restore, o.Protect, o.Unprotect)
_SOURCED = (o.Derive, o.Revise)
_EDGES = (o.Relate, o.Unrelate)
_SESSIONS = (o.RetireSession, o.RestoreSession)

_MAYBE_OP = re.compile(r"\((?:context-tx|" + "|".join(map(re.escape, o.OP_NAMES)) + r")[\s)]")


def _twice(op: o.Op, names: tuple[str, ...]) -> tuple[int, str] | None:
    """The first name (in list order) that the list holds more than once, counted in one pass
    (a scan of the list per name was quadratic in a long retire)."""
    if len(set(names)) == len(names):
        return None
    counts = Counter(names)
    twice = next(n for n in names if counts[n] > 1)
    return op.pos, f"'{twice}' is listed twice in {op.name}"


def _nested_op(op: o.Create | o.Derive | o.Revise) -> tuple[int, str] | None:
    if _MAYBE_OP.search(op.body_text) is None:  # fast path: no "(op " anywhere in the text
        return None
    for item in op.body:
        for node in walk(item):
            if isinstance(node, SList) and (node.head in o.OP_NAMES or node.head == "context-tx"):
                return node.pos, (
                    f"operation '{node.head}' nested inside a body: operations go at the top "
                    f"level of the context-tx; if this list is data, quote its first word: "
                    f'("{node.head}" ...)'
                )
    return None


# A body's lists sit 4 lists deep in an encoding or an increment ((context-encoding (mind (frame
# ID ... (body BODY))))), 2 deeper than in a transaction: deeper ones would commit, then give
# an encoding the reader refuses.
MAX_BODY_DEPTH = MAX_DEPTH - 4


def _too_deep(op: o.Create | o.Derive | o.Revise) -> tuple[int, str] | None:
    if op.body_text.count("(") <= MAX_BODY_DEPTH:  # fast path: not enough lists to be too deep
        return None
    for item in op.body:
        if nesting(item) > MAX_BODY_DEPTH:
            return item.pos, (
                f"the body of '{op.id}' nests lists deeper than {MAX_BODY_DEPTH} levels (the "
                "encoding shows it 4 lists deep): flatten it"
            )
    return None


def _problem(op: o.Op) -> tuple[int, str] | None:
    """The offset and message of the first rule ``op`` breaks (other than a missing reason):
    a name listed twice, then a reference to itself, then an operation nested in its body."""
    if isinstance(op, _SOURCED):
        sources = op.sources or ()
        problem = _twice(op, sources) if len(sources) > 1 else None
        if problem is None and op.id in sources:
            return op.pos, f"frame '{op.id}' cannot cite itself"
        return problem or _nested_op(op) or _too_deep(op)
    if isinstance(op, _TARGETS):
        return _twice(op, op.targets) if len(op.targets) > 1 else None
    if isinstance(op, _EDGES):
        if op.subject == op.object:
            return op.pos, f"a frame cannot be related to itself ('{op.subject}')"
        return None
    if isinstance(op, o.Create):
        return _nested_op(op) or _too_deep(op)
    if isinstance(op, o.Place):
        if op.anchor == op.id:
            return op.pos, f"cannot place '{op.id}' relative to itself"
        return None
    if isinstance(op, o.DropCheckpoint):
        return _twice(op, op.checkpoints)
    if isinstance(op, _SESSIONS):
        return _twice(op, op.sessions)
    return None


def check_tx(tx: o.Tx) -> o.Tx:
    """Return ``tx`` when it keeps every text-level rule; raise ValidationError otherwise."""
    reasonless = tx.reason is None
    for index, op in enumerate(tx.ops):
        if reasonless and op.name in o.REASON_REQUIRED:
            raise _fail(
                tx,
                index,
                op.pos,
                f'{op.name} requires a reason: add (reason "why") after (base-version N)',
            )
        problem = _problem(op)
        if problem is not None:
            raise _fail(tx, index, *problem)
    return tx


_REASON = re.compile(r"\(reason\s")


def check_new(tx: o.Tx) -> o.Tx:
    """Return ``tx`` when it keeps the rules for transactions committed from now on, which the
    ones earlier builds stored need not keep (the audit replays those with :func:`read_tx`):
    a reason shows something, not only invisible characters (a zero-width space, a NUL); an id
    the transaction creates is a new id (:func:`_new_ids`)."""
    _check_new_ids(tx)
    if tx.reason is not None and is_blank(tx.reason):
        found = _REASON.search(tx.source) if tx.source else None
        line, column = line_col(tx.source, found.start()) if found else (None, None)
        raise ValidationError(
            'reason must be a non-empty string: (reason "why"); this one holds only invisible '
            "characters",
            line=line,
            column=column,
        )
    return tx


def _new_ids(op: o.Op) -> tuple[tuple[str, str], ...]:
    """The ids ``op`` gives something new, each with what it names: the frame a create or
    derive makes, a checkpoint's name, a relation's name. (Targets, sources and the frames of a
    relation name what exists: a stored id is read as it was written.)"""
    if isinstance(op, o.Create | o.Derive):
        return ((op.id, "a frame id"),)
    if isinstance(op, o.Checkpoint):
        return ((op.checkpoint, "a checkpoint name"),)
    if isinstance(op, o.Relate):
        return ((op.relation, "a relation name"),)
    return ()


def _check_new_ids(tx: o.Tx) -> None:
    """ValidationError at the first id ``tx`` creates that is no new id (``is_new_id``)."""
    for index, op in enumerate(tx.ops):
        for new, what in _new_ids(op):
            if not is_new_id(new):
                at = tx.source.find(new, op.pos) if tx.source else -1
                message = f"'{new}' is not a valid id for {what}: {describe_id_rules(new)}"
                raise _fail(tx, index, op.pos if at < 0 else at, message)


def read_tx(text: str) -> o.Tx:
    """Parse and validate: the transaction the mind layer may apply, or a typed TxError."""
    return check_tx(parse_tx(text))
