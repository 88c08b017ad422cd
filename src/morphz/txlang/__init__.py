"""The context-tx language: S-expression reader/printer, transaction parser and printer."""

from morphz.txlang.ops import OP_NAMES, Op, Tx
from morphz.txlang.parse import op_text, parse_tx, print_tx
from morphz.txlang.sexpr import Atom, SExpr, SList, Str, line_col, read, read_one, to_text
from morphz.txlang.validate import check_tx, read_tx

__all__ = [
    "OP_NAMES",
    "Atom",
    "Op",
    "SExpr",
    "SList",
    "Str",
    "Tx",
    "check_tx",
    "line_col",
    "op_text",
    "parse_tx",
    "print_tx",
    "read",
    "read_one",
    "read_tx",
    "to_text",
]
