"""Review 12 (protocol): the protocol region read as the only thing a model knows, and the
transactions a model would write from it committed through ``ctx.commit`` and the
``context_tx`` tool. Each test fails against the code as it was reviewed; its docstring states
the behaviour expected."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

import morphz
from agents import make_engine
from morphz.encoding.protocol import PROTOCOL
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang import SList, Str, read_one

_ROOT = re.compile(r"\(observation (@e\d+) \(kind user_message\)")
_VERSION = re.compile(r"\(mind-version (\d+)\)")


def _receipts(ctx: morphz.Context) -> list[dict[str, object]]:
    return [json.loads(e.text or "{}") for e in ctx.events() if e.kind == "tx_receipt"]


def _one_step(ctx: morphz.Context, workspace: Path, call: ToolCall | None = None, **build) -> None:
    """One activation in session ``ops``: a first reply with one tool call (``call``, or one
    built from the first request by ``build['make']``), then "done"."""
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            return ModelResponse(None, (call or build["make"](request),))
        return ModelResponse("done", ())

    result = asyncio.run(make_engine(ctx, FunctionModel(model), workspace).run("hi", session="ops"))
    assert result.state == "delivered", result.reason


# --- the protocol's own quoting example -------------------------------------------------------


def test_the_quoting_example_of_the_rules_is_inside_the_rules_string() -> None:
    """The context-tx rules say "inside a string, write a double quote as backslash-quote" and,
    in the same string, show how to keep an operation name as data: (fact ("place" paris)). The
    example's quotes are not escaped, so the protocol region (an S-expression, compiled into
    every request) breaks its own rule: read as the encoding's grammar reads it, the rules entry
    is three items, the string ends at '(fact (', `place` is a bare atom and '" paris)), or
    use another word...' a second string. The one example of quoting a word in a body is the
    place where the contract's text stops parsing as it reads. Expected: the rules entry is one
    string (the example's quotes escaped, as the form entry's (reason \\"why\\") is), and that
    string shows the example whole: (fact ("place" paris))."""
    protocol = read_one(PROTOCOL)
    assert isinstance(protocol, SList)
    tx = next(i for i in protocol.items if isinstance(i, SList) and i.head == "context-tx")
    rules = next(i for i in tx.items if isinstance(i, SList) and i.head == "rules")
    assert len(rules.items) == 2 and isinstance(rules.items[1], Str), (
        f"the rules entry reads as {len(rules.items) - 1} items: {rules.items[1:]!r:.300}"
    )
    assert '(fact ("place" paris))' in rules.items[1].value


# --- the running root request -----------------------------------------------------------------


def test_unprotecting_the_running_root_request_does_not_say_it_is_unprotected(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The protocol says "a running activation's root is protected" and "protected content
    must be unprotected before it can be retired"; retiring the root is refused as
    `protected` ("the root request of a running activation and stays until its reply is
    delivered"). A model that then does what the protocol says, (unprotect ROOT), is told the
    opposite: a `validation` error "@e1 is not protected: drop this operation". Expected: the
    refusal of unprotecting the root says why it stays (it is the root request of a running
    activation, protected until its reply is delivered), never that it is not protected."""

    def make(request: ModelRequest) -> ToolCall:
        root = _ROOT.search(request.encoding)
        version = _VERSION.search(request.encoding)
        assert root is not None and version is not None
        tx = (
            f'(context-tx (base-version {version.group(1)}) (reason "make room") '
            f"(unprotect {root.group(1)}))"
        )
        return ToolCall("c1", "context_tx", json.dumps({"tx": tx}))

    _one_step(ctx, workspace, make=make)
    receipt = _receipts(ctx)[0]
    assert receipt.get("ok") is False, receipt
    error = receipt["error"]
    assert isinstance(error, dict)
    assert "not protected" not in error["message"], error
    assert "root request" in error["message"], error


# --- the context_tx tool's schema -------------------------------------------------------------


def test_context_tx_refuses_an_argument_its_schema_does_not_have(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The context_tx schema declares one property, tx, with additionalProperties false, and
    the recall tool (like every workspace tool) refuses an argument it does not take. context_tx
    ignores any other: a call {"tx": "...", "reason": "..."} (a model putting the reason, or the
    base version, beside the text) commits as if the extra value had been read, and the model
    is never told it was dropped. Expected: the call is refused with an error naming the unknown
    argument and saying it takes only tx (the reason goes inside the form), nothing committed."""
    tx = '(context-tx (base-version 0) (create notes/plan "ship friday"))'
    call = ToolCall("c1", "context_tx", json.dumps({"tx": tx, "reason": "plan agreed"}))
    _one_step(ctx, workspace, call)
    receipt = _receipts(ctx)[0]
    assert receipt.get("ok") is False, f"committed, the extra argument ignored: {receipt}"
    assert "reason" in json.dumps(receipt["error"])
    assert ctx.version == 0


# --- ids --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fid",
    [
        "user/preferences/भाषा",  # Hindi "language": vowel signs are combining marks
        "ผู้ใช้/ชื่อ",  # Thai "user/name": tone and vowel marks
        "notes/\u0b95\u0bbe\u0baa\u0bcd\u0baa\u0bbf",  # Tamil (a decomposed café is no id: NFC)
    ],
)
def test_an_id_of_letters_written_with_combining_marks_is_an_id(
    ctx: morphz.Context, fid: str
) -> None:
    """The protocol's ids entry says frame, checkpoint and session ids are "1-256 characters of
    letters, digits and _ - . : /". The check is the regex class \\w, which has no combining
    marks, so a word of most Indic and Southeast Asian scripts (whose vowel signs and tone marks
    are combining marks) and a decomposed accent are refused, with a message saying ids are
    letters and digits, while "日本語" and a precomposed "é" are accepted. A model naming a frame
    in the user's language cannot tell what is wrong. Expected: an id whose letters carry
    combining marks commits (or the protocol and the refusal name the exclusion)."""
    ctx.commit(f'(context-tx (base-version 0) (create {fid} "x"))')
    assert [f.id for f in ctx.mind().frames] == [fid]


# --- a refusal that names no place ------------------------------------------------------------


def test_a_base_version_ahead_of_the_mind_names_its_line_and_column(ctx: morphz.Context) -> None:
    """The receipts entry promises that a refused transaction's typed error names "the
    operation, line and column". A base version ahead of the mind (a model writing its after
    version plus one, or the clock) is refused with line and column null, though the text has
    the (base-version N) form to point at; every other header refusal (missing, not a number,
    given twice) names it. Expected: the refusal names the line and column of the base-version
    form (or of its number)."""
    ctx.commit('(context-tx (base-version 0) (create a "x"))')
    text = '(context-tx\n  (base-version 7)\n  (create b "y"))'
    with pytest.raises(morphz.errors.TxError) as refused:
        ctx.commit(text)
    assert refused.value.line == 2 and refused.value.column is not None, refused.value.to_dict()


# --- what a rollback's receipt says -----------------------------------------------------------


def test_a_rollback_receipt_names_no_version_whose_mind_it_does_not_restore(
    ctx: morphz.Context,
) -> None:
    """Checkpoints "snapshot the mind as it stands at that point of the tx" (decisions.md), so a
    checkpoint taken before other operations of its transaction holds a mind the transaction's
    version never had. The rollback's receipt still says "mind rolled back to version N" with
    N that transaction's version: here version 2 had frame z (created after the checkpoint in
    the same transaction), and the rollback that claims to return to version 2 removes z. A
    model trusting the receipt believes z is still there. Expected: the receipt names the
    checkpoint, and any version it names is one whose mind the rollback restores (here 1)."""
    ctx.commit('(context-tx (base-version 0) (create a "x"))')
    ctx.commit('(context-tx (base-version 1) (checkpoint before-z) (create z "z body"))')
    ctx.commit('(context-tx (base-version 2) (revise a "y"))')
    receipt = ctx.commit('(context-tx (base-version 3) (reason "undo") (rollback before-z))')
    assert [f.id for f in ctx.mind().frames] == ["a"]  # z is gone: the mind of version 1
    change = receipt.to_dict()["changes"][0]["change"]
    named = re.search(r"version (\d+)", change)
    assert named is None or named.group(1) == "1", change
