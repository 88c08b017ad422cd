"""Review 9c (core): code written in the ninth session — the `budget` refusal and the kept
frame-token total (committing._check_room, store/sqlite_txn.py, migration 0009), the store's
connection changes (store/sqlite.py), encoding options and txlang's new refusals. Each test
fails on the code it was written against; its docstring states the expected behaviour."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

import morphz
from agents import SMALL_BUDGET
from morphz.capacity import Budget
from morphz.encoding.protocol import PROTOCOL_TOKENS
from morphz.errors import BudgetError, InputError, ParseError, StoreError
from morphz.interfaces.cli_agent import build_tools
from morphz.mind.lifecycle import frame_tokens
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang import read_tx

SMALL = SMALL_BUDGET  # critical 4,800


def _frames_in_view(ctx: morphz.Context) -> int:
    with ctx.db.store.read(ctx.id) as r:
        return r.active.frame_tokens()


# --- the budget refusal's rule ---


def test_a_transaction_that_moves_observations_into_frames_past_critical_is_refused(
    ctx: morphz.Context,
) -> None:
    """The refusal exists so that the frames in view (with the protocol) never pass the critical
    level: maintenance cuts observations, never the mind. But it only looks at the sign of the
    summed immediate effects, so a transaction that retires a long observation (whose relief
    counts all its characters, though the encoding only showed a preview of it) and creates a
    frame of about the same size commits, and leaves frames of ~9,200 tokens against a critical
    level of 8,800: exactly the unservable state the refusal was written to prevent. Expected:
    a transaction that grows the frames in view past the critical level is refused with
    `budget`, whatever observations it retires."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    ctx.observe("user_message", "y" * 30_000)
    assert ctx.encode().pressure.level == "normal"
    critical = ctx.budget().critical
    try:
        ctx.commit(
            '(context-tx (base-version 0) (reason "summarised") (retire @e1) '
            f'(create notes "{"z" * 28_000}"))'
        )
    except BudgetError:
        return
    left = _frames_in_view(ctx) + PROTOCOL_TOKENS
    pytest.fail(f"committed: frames with the protocol now {left} tokens, critical {critical}")


def test_a_rollback_that_brings_frames_back_past_critical_is_refused(
    ctx: morphz.Context,
) -> None:
    """A rollback to a checkpoint brings back every frame the checkpoint held, but its effect
    says immediate 0, so the refusal (which only refuses a negative effect sum) never looks at
    it: with frames of ~4,000 tokens brought back against a critical level of 4,800 (the
    protocol makes it ~6,250), it commits and the context can no longer be maintained under
    critical. Expected: a rollback that leaves the frames in view past the critical level is
    refused with `budget` (and its receipt states the tokens it adds)."""
    big = "x" * 8_000
    ctx.set_window(0)
    ctx.commit(
        f'(context-tx (base-version 0) (create a "{big}") (create b "{big}") (checkpoint cp))'
    )
    ctx.commit('(context-tx (base-version 1) (reason "done") (retire a b))')
    ctx.set_budget(SMALL)
    assert _frames_in_view(ctx) == 0
    with pytest.raises(BudgetError):
        ctx.commit('(context-tx (base-version 2) (reason "back") (rollback cp))')
    assert _frames_in_view(ctx) == 0


def test_the_budget_refusal_advice_can_be_followed(ctx: morphz.Context) -> None:
    """Over the critical level, a transaction that retires two large frames and derives a short
    summary of them is refused, and the refusal says "Retire or shorten frames in the same
    transaction". Retiring them in the same transaction is what it already did: with an
    organizing window a retired frame stays in view until the window ends, so that advice can
    never make such a transaction commit. Expected: the refusal names something that works for
    retiring frames — superseding them (relate NEW supersedes OLD, retired at once) or retiring
    them first and deriving once their window has ended."""
    big = "x" * 8_000
    ctx.commit(f'(context-tx (base-version 0) (create a "{big}") (create b "{big}"))')
    ctx.set_budget(SMALL)
    with pytest.raises(BudgetError) as refused:
        ctx.commit(
            '(context-tx (base-version 1) (reason "consolidate") (retire a b) '
            '(derive s (from a b) "the summary of a and b"))'
        )
    message = refused.value.message
    assert "supersede" in message or "window" in message, message


def test_the_refusal_uses_the_budget_the_engine_measures_requests_against(
    ctx: morphz.Context, workspace: Path
) -> None:
    """An engine's [budget] keys (RuntimeConfig.budget_keys, e.g. `limit = 9000` in
    morphz.toml) are what its requests are measured against, but ctx.commit checks the
    context's stored budget (here the default, critical ~116,000): the agent's context_tx
    creating a ~10,000-token frame commits although the engine's own critical level is 8,800,
    and every request after it is past critical with frames alone. Expected: a context_tx run by
    an engine is refused with `budget` against the budget that engine uses."""
    calls: list[ModelRequest] = []
    huge = "x" * 40_000
    tx = f'(context-tx (base-version 0) (create notes "{huge}"))'

    def model(request: ModelRequest) -> ModelResponse:
        calls.append(request)
        if len(calls) == 1:
            return ModelResponse(None, (ToolCall("c1", "context_tx", json.dumps({"tx": tx})),))
        return ModelResponse("done", ())

    config = RuntimeConfig(workspace=workspace, budget_keys={"configured": 9_000})
    engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), config)
    asyncio.run(engine.run("hi"))
    assert ctx.mind().frame("notes") is None, "the frame committed past the engine's budget"


# --- the kept total on an upgraded store ---


def test_the_upgrade_backfill_counts_a_frame_body_holding_a_nul(tmp_path: Path) -> None:
    """Frame bodies may hold a NUL character (a string literal in a transaction takes it).
    Migration 0009 backfills the frame-token total with SQLite's length(), which stops at the
    first NUL, so a store upgraded from schema 8 starts with a total below the frames' real
    size and its audit reports "frame tokens in view: replay N, stored M" on a store that is
    fine. Expected: after the upgrade the kept total equals the frames' tokens and the audit
    is clean."""
    path = tmp_path / "store.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.commit(f'(context-tx (base-version 0) (create f1 "a\x00{"b" * 200}"))')
    conn = sqlite3.connect(path)  # the store as schema 8 left it: no kept total yet
    try:
        conn.execute("DROP TABLE frame_tokens")
        conn.execute("DELETE FROM schema_migrations WHERE number = 9")
        conn.commit()
    finally:
        conn.close()
    with morphz.open(path) as db:
        ctx = db.context("c")
        with db.store.read("c") as r:
            real = sum(frame_tokens(f) for f in r.active.frames())
            assert r.active.frame_tokens() == real
        assert ctx.audit().ok, ctx.audit()


# --- the store's connections ---


def test_another_tools_database_with_its_own_schema_migrations_is_left_alone(
    tmp_path: Path,
) -> None:
    """`schema_migrations` is the table name Rails, Ecto, golang-migrate and dbmate use. Such a
    database passes the "not a Morphz store" check (it only asks whether a table of that name
    exists), so the store then switches the file to WAL journal mode — a persistent change to
    another application's database — and fails with "cannot open the store ...: no such column:
    number". Expected (docs/decisions.md: "a file that is not a Morphz store is left alone"):
    the file is refused as not a Morphz store before anything is written, its journal mode and
    bytes unchanged."""
    path = tmp_path / "development.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version varchar NOT NULL PRIMARY KEY)")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO schema_migrations VALUES ('20240101000000')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as refused:
        morphz.open(path)
    assert "not a Morphz store" in refused.value.message, refused.value.message
    assert path.read_bytes() == before
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


def test_a_closed_store_refuses_its_reader_queries(tmp_path: Path) -> None:
    """read() and write() on a closed store raise "the store is closed", but the reader queries
    routed through _query (context_ids, schema_version, stale_recall, integrity_check) open a
    fresh reader connection and answer, and that connection stays open (registered in the
    closed store) until the thread ends. Expected: each raises StoreError("the store is closed")
    and opens no connection."""
    db = morphz.open(tmp_path / "m.db")
    db.context("c", create=True)
    store = db.store
    db.close()
    for query in (db.contexts, store.schema_version, store.stale_recall, store.integrity_check):
        with pytest.raises(StoreError, match="closed"):
            query()
    assert store._readers == []


# --- encoding options and the transaction language ---


def test_a_binding_nested_too_deep_is_an_input_error(ctx: morphz.Context) -> None:
    """checked() turns a binding value JSON cannot state into an InputError naming the
    binding, catching TypeError and ValueError from value_text; a value nested deeper than
    json.dumps can recurse raises RecursionError out of ctx.encode instead. Expected: an
    InputError naming the binding, like a set or a circular value."""
    deep: list[object] = []
    node = deep
    for _ in range(5_000):
        child: list[object] = []
        node.append(child)
        node = child
    with pytest.raises(InputError, match="binding w"):
        ctx.encode(bindings={"w": deep})


@pytest.mark.parametrize(
    "text",
    [
        "1) retire the old notes:\n(context-tx (base-version 0) (create a (x 1)))",
        'The user said "hi\n(context-tx (base-version 0) (create a (x 1)))',
        "(context-tx (base-version 0) (create a (x 1)))\nThis creates a (the first frame)).",
    ],
    ids=["numbered-prose", "quote-in-prose", "prose-after"],
)
def test_a_transaction_wrapped_in_any_prose_is_told_to_send_only_the_form(text: str) -> None:
    """docs/decisions.md: "A transaction wrapped in prose or a code fence is refused at its first
    character with 'send only that form'" (or, after the form, "send one transaction and nothing
    after it"). Prose holding a stray ')' (a numbered list, "1)"), an odd double quote or an
    unbalanced parenthesis is refused by the reader first: "unbalanced ')'" or "unterminated
    string" at the prose's punctuation, with no word about sending only the form — the prose
    a model most often writes. Expected: the refusal says to send only the (context-tx ...)
    form / nothing around it."""
    with pytest.raises(ParseError) as refused:
        read_tx(text)
    message = str(refused.value)
    assert "send only that form" in message or "nothing after it" in message, message
