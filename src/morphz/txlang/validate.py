"""Rules a well-formed transaction text can still break (DESIGN §5), checked before any state
is read. Each refusal is a :class:`~morphz.errors.ValidationError` naming the operation and the
line and column of the offending node.

- ``reason`` is required when the tx retires, unprotects, unrelates, rolls back, drops a
  checkpoint or retires a session;
- no target, source, checkpoint or session is listed twice in one operation;
- a frame cannot cite itself, be related to itself, or be placed relative to itself;
- an operation nested inside a body is refused (operations go at the top level).
"""

from __future__ import annotations

import re

from morphz.errors import ValidationError
from morphz.txlang import ops as o
from morphz.txlang.parse import parse_tx
from morphz.txlang.sexpr import SExpr, SList, line_col, walk


def _fail(tx: o.Tx, index: int, pos: int, message: str) -> ValidationError:
    line, column = line_col(tx.source, pos) if tx.source else (None, None)
    op = tx.ops[index]
    return ValidationError(message, op=op.name, op_index=index, line=line, column=column)


def _names(op: o.Op) -> tuple[str, ...]:
    if isinstance(op, o.Retire | o.Restore | o.Protect | o.Unprotect):
        return op.targets
    if isinstance(op, o.Derive | o.Revise):
        return op.sources or ()
    if isinstance(op, o.DropCheckpoint):
        return op.checkpoints
    if isinstance(op, o.RetireSession | o.RestoreSession):
        return op.sessions
    return ()


def _self_reference(op: o.Op) -> str | None:
    if isinstance(op, o.Derive | o.Revise) and op.id in (op.sources or ()):
        return f"frame '{op.id}' cannot cite itself"
    if isinstance(op, o.Relate | o.Unrelate) and op.subject == op.object:
        return f"a frame cannot be related to itself ('{op.subject}')"
    if isinstance(op, o.Place) and op.anchor == op.id:
        return f"cannot place '{op.id}' relative to itself"
    return None


_MAYBE_OP = re.compile(r"\((?:context-tx|" + "|".join(map(re.escape, o.OP_NAMES)) + r")[\s)]")


def _nested_op(body: tuple[SExpr, ...], body_text: str) -> SList | None:
    if _MAYBE_OP.search(body_text) is None:  # fast path: no "(op " anywhere in the text
        return None
    for item in body:
        for node in walk(item):
            if isinstance(node, SList) and (node.head in o.OP_NAMES or node.head == "context-tx"):
                return node
    return None


def check_tx(tx: o.Tx) -> o.Tx:
    """Return ``tx`` when it keeps every text-level rule; raise ValidationError otherwise."""
    for index, op in enumerate(tx.ops):
        if tx.reason is None and op.name in o.REASON_REQUIRED:
            raise _fail(
                tx,
                index,
                op.pos,
                f'{op.name} requires a reason: add (reason "why") after (base-version N)',
            )
        names = _names(op)
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise _fail(tx, index, op.pos, f"'{twice}' is listed twice in {op.name}")
        problem = _self_reference(op)
        if problem is not None:
            raise _fail(tx, index, op.pos, problem)
        if isinstance(op, o.Create | o.Derive | o.Revise):
            nested = _nested_op(op.body, op.body_text)
            if nested is not None:
                raise _fail(
                    tx,
                    index,
                    nested.pos,
                    f"operation '{nested.head}' nested inside a body: operations go at the top "
                    "level of the context-tx",
                )
    return tx


def read_tx(text: str) -> o.Tx:
    """Parse and validate: the transaction the mind layer may apply, or a typed TxError."""
    return check_tx(parse_tx(text))
