"""Review 12, final: the latest commits (`git diff 8701b35 HEAD`): ids in composed form (NFC)
and invisible marks, an interrupted activation's results, and the advice under a provider's
ceiling. Each test fails on the code it was written against; its docstring states the behaviour
expected."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import WRITE_A, end_of, make_engine, results_of
from morphz import checks
from morphz.capacity import Budget
from morphz.errors import ParseError
from morphz.ids import is_id
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools import workspace as workspace_tools
from morphz.runtime.tools.base import Tool
from morphz.txlang import parse_tx

OHM = "\u2126"  # OHM SIGN: a letter (\w), NFC maps it to U+03A9
JAMO = "\u1100\u1161"  # conjoining Hangul jamo (macOS NFD file names): NFC is U+AC00


@pytest.mark.parametrize("fid", [f"unit/{OHM}", f"word/{JAMO}"])
def test_canonical_transaction_text_does_not_bypass_the_nfc_id_rule(fid: str) -> None:
    """The review found that parse.py's canonical fast path (the old ``[\\w.:/-]`` class) took a
    non-NFC id made only of word characters (U+2126, conjoining jamo) that the general path
    refused, breaking "both paths give the same Tx for every text the fast path accepts".
    Decided (docs/decisions.md, twelfth session): only an id with combining marks must be NFC;
    ids of word characters are taken as they are, as every earlier build took them (stores hold
    them, and the audit replays their transactions with today's parser). Expected: both paths
    agree, and accept these ids."""
    spaced = f'(context-tx  (base-version 0) (derive {fid} (from @e1) (goal "x")))'
    canonical = f'(context-tx (base-version 0) (derive {fid} (from @e1) (goal "x")))'
    assert parse_tx(spaced) == parse_tx(canonical)
    assert is_id(fid)


def test_a_decomposed_id_with_marks_is_refused_on_both_paths() -> None:
    """The NFC rule holds where it applies (an id with combining marks) whichever path parses
    the text: the fast path's class has no marks, so it leaves such ids to the general path."""
    for text in (
        '(context-tx  (base-version 0) (create cafe\u0301 (goal "x")))',
        '(context-tx (base-version 0) (create cafe\u0301 (goal "x")))',
    ):
        with pytest.raises(ParseError, match="composed form"):
            parse_tx(text)


def test_a_context_an_earlier_build_created_can_still_be_opened(
    open_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every build before this session took an id of word characters, so a store may hold a
    context (or session, checkpoint, frame) id such as ``Ω-lab`` with U+2126, or a Korean id
    from a macOS folder name (conjoining jamo, NFD). The NFC rule is now applied by
    ``check_id`` to every id given, including ``db.context(ID)`` opening one that exists: the
    context is listed by ``db.contexts()`` but nothing can open it, and the refusal tells the
    user to write the composed spelling, which names no context (ContextNotFound). Expected: a
    context the store already holds opens (the rule applies to new ids, or a migration renames
    old ones)."""
    old_rule = re.compile(r"(?!\d+\Z)[\w.:/-]{1,256}")
    monkeypatch.setattr(checks, "is_id", lambda text: old_rule.fullmatch(text) is not None)
    monkeypatch.setattr(checks, "is_new_id", checks.is_id)  # new ids too (review 21a: NFC)
    name = f"{OHM}-lab"
    db = open_db()
    db.context(name, create=True).observe("user_message", "measure the resistor")
    monkeypatch.undo()  # the store as the earlier build left it; now the current build reads it
    db = open_db()
    assert name in db.contexts()
    ctx = db.context(name)  # today: InputError, "is not a valid id ... write it as 'Ω-lab'"
    assert len(ctx.events()) == 1


@pytest.mark.parametrize("mark", ["\u17b4", "\u17b5"])
def test_default_ignorable_khmer_marks_are_not_allowed_in_ids(mark: str) -> None:
    """decisions.md: "marks that draw nothing ... are not allowed in ids"; ids.py's
    ``_invisible``: "A default-ignorable mark: it draws nothing, so an id holding it looks like
    one without". U+17B4 and U+17B5 (KHMER VOWEL INHERENT AQ/AA) are nonspacing marks (Mn) and
    Default_Ignorable_Code_Point, but ``_invisible`` lists only the grapheme joiner, the
    Mongolian selectors and the variation selectors: ``plan`` + U+17B4 is a valid id, printed
    exactly as ``plan``. Expected: refused like the variation selectors."""
    assert not is_id("plan" + "\ufe0f")  # a variation selector: refused today
    assert not is_id("plan" + mark)


def test_a_cancel_while_a_write_runs_still_records_that_write(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """decisions.md (the runtime loop): the results are recorded when the activation is
    interrupted, "after the in-flight work settles and before activation_finished, so a
    workspace change is never left out of the context; calls that never ran get no result".
    Ctrl-C while ``write_file``'s thread is writing: ``settle`` waits for the write, the file
    is created, but the call's outcome (which the settled thread produced) is never kept, so
    no ``tool_result`` says the file was written. The call that is running when Ctrl-C comes
    is the likeliest one to be interrupted (a long write, an exec). Expected: a result of the
    in-flight call (its outcome, or that it was interrupted while running) is recorded before
    ``activation_finished``."""
    started, release = threading.Event(), threading.Event()
    original = workspace_tools.create_atomic

    def slow_create(path: Path, data: bytes) -> None:
        started.set()
        release.wait(10)
        original(path, data)

    monkeypatch.setattr(workspace_tools, "create_atomic", slow_create)

    def model(request: ModelRequest) -> ModelResponse:
        write = WRITE_A
        return ModelResponse(None, (write,))

    async def approver(tool: Tool, args: dict[str, Any]) -> bool:
        return True

    async def scenario() -> None:
        engine = make_engine(ctx, FunctionModel(model), workspace, approver=approver)
        task = asyncio.create_task(engine.run("write a.txt", session="s"))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()  # Ctrl-C while the write is in its thread
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert (workspace / "a.txt").read_text(encoding="utf-8") == "hi\n"  # the write happened
    assert [a.state for a in ctx.activations()] == ["interrupted"]
    finished, results = end_of(ctx), results_of(ctx, "c1")
    assert results and results[0].seq < finished, "the file was written; the context never says"


def test_window_advice_offers_shorter_frames_only_when_frames_take_the_room(
    ctx: morphz.Context, workspace: Path
) -> None:
    """batches.floor_reason: "only the remedies that can help"; under a budget the advice to
    retire or shorten frames is added only when the frames take most of the minimum
    (``mind_share``). Under a provider's ceiling (a refusal given), when the fixed part
    alone is over the window, the reason always says "or retire, supersede or revise frames
    shorter", even with no frame at all (the mind region is a few tokens; the protocol takes
    nearly everything). Expected: with an empty mind the reason names only a larger window."""
    budget = Budget(window=64_000, output_reserve=2_000, configured=30_000, reserve=1_000)

    def model(request: ModelRequest) -> ModelResponse:
        raise ContextTooLongError(
            "maximum context length is 2000 tokens, however you requested 4500 tokens"
        )

    assert ctx.mind().frames == ()
    engine = make_engine(ctx, FunctionModel(model), workspace, budget=budget)
    result = asyncio.run(engine.run("hello", session="s"))
    assert result.state == "failed"
    assert result.reason is not None and "larger context window" in result.reason
    assert "frames shorter" not in result.reason, result.reason
