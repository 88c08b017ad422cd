"""The protocol region's entries as text, for tests of what it says."""

from __future__ import annotations

from morphz.encoding.protocol import PROTOCOL
from morphz.txlang import SList, Str, read_one


def entry(*path: str) -> str:
    """One entry of the protocol, e.g. ("context-tx", "operations", "rollback") or
    ("lifecycle",): its strings joined, whitespace collapsed."""
    node = read_one(PROTOCOL)
    for name in path:
        assert isinstance(node, SList)
        node = next(i for i in node.items if isinstance(i, SList) and i.head == name)
    assert isinstance(node, SList)
    return " ".join(" ".join(i.value for i in node.items if isinstance(i, Str)).split())
