"""Review 17a: what the Context Encoding shows against what the transaction language accepts,
for a model that maintains its context by copying what it reads.

Checked and sound (no test here): bodies of every kind (hypothesis: quotes, backslashes, CR, tabs,
NUL and other control characters, combining marks, emoji, RTL marks, nested lists) copied from a
frame's rendered ``(body ...)`` into ``(revise F ...)`` store the same body; ids, relation names,
checkpoint names and session ids of any valid spelling read back from the encoding and commit in
unrelate, drop-checkpoint, retire and place; the 196-list body limit holds in the encoding and in
increments; the same store encodes to the same bytes under other PYTHONHASHSEED, TZ and
LANG/LC_ALL values. The findings below each fail on the code they were written against.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import morphz
from morphz.encoding.protocol import PROTOCOL
from morphz.errors import TxError, ValidationError
from morphz.txlang.sexpr import SList, Str, read_one


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[morphz.Context]:
    db = morphz.open(tmp_path / "morphz.db")
    context = db.context("c", create=True, window=0)
    yield context
    db.close()


def _tx(ctx: morphz.Context, ops: str, reason: str | None = None) -> None:
    why = f' (reason "{reason}")' if reason else ""
    ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")


def _protocol_entry(*path: str) -> str:
    """The string of the protocol entry at ``path`` (heads of nested lists)."""
    node = read_one(PROTOCOL)
    for head in path:
        assert isinstance(node, SList)
        node = next(i for i in node.items if isinstance(i, SList) and i.head == head)
    assert isinstance(node, SList)
    return " ".join(i.value for i in node.items if isinstance(i, Str))


def test_an_edge_relate_calls_existing_is_one_the_mind_region_shows(ctx: morphz.Context) -> None:
    """The protocol's mind region shows "their relations (the other end may be out of view)",
    and relate says "relating an existing edge is an error". The store shows only edges whose
    SUBJECT is in view (sqlite_active.relations); an edge whose subject retired and whose object
    is still in view is neither shown with that frame nor anywhere else, yet relating it again
    is refused "already exists: drop this operation" (apply._relate): the model is told an edge
    it cannot see exists, and the mind region the unrelate refusal tells it to check does not
    list it. Either the edge is shown (it is a relation of a frame in view), or the refusal
    says why it is out of view."""
    _tx(ctx, "(create o (the plan)) (create s (a step)) (relate s depends-on o)")
    _tx(ctx, "(retire s)", reason="done")  # window 0: s is retired, o stays in view
    mind = ctx.encode().region("mind")
    assert "(frame o " in mind
    with pytest.raises(TxError) as refused:
        _tx(ctx, "(relate s depends-on o)")
    shown = "(s depends-on o)" in mind
    explained = "retired" in refused.value.message or "out of view" in refused.value.message
    assert shown or explained, (mind, refused.value.message)


def test_the_protocols_body_rule_names_context_tx_which_a_body_may_not_hold(
    ctx: morphz.Context,
) -> None:
    """The protocol's rule for bodies: "a list in a body must not start with an operation name
    or from". A list headed by ``context-tx`` is refused too (validate._nested_op), though it is
    neither; a model that follows the stated rule to the letter (say, keeping an example
    transaction as data, (example (context-tx ...))) gets a refusal the contract never
    mentioned. (The rule also over-states ``from``: only a body's top-level list headed by from
    is refused, (fact (from x)) commits.)"""
    rule = _protocol_entry("context-tx", "rules")
    with pytest.raises(ValidationError):
        _tx(ctx, "(create ex (example (context-tx (base-version 0) (create a x))))")
    sentence = rule[rule.index("Never") : rule.index("A target")]
    assert "context-tx" in sentence, sentence
