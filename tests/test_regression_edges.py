"""Regressions in the changes of 2026-11-30 (013c773..), found by a review of them; each failed
on the code as it then was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from test_engine_edges import AGENT_TOOLS, _engine, _history, _sent_tokens


def test_batch_after_a_refused_increment_offers_only_the_maintenance_tools(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A too-long refusal of a ContextDelta increment keeps the run in work mode and sets a
    ceiling. When the fresh seed is over that ceiling, _request serves a maintenance batch
    (compiled with scheduling mode maintenance and measured with the two maintenance tools),
    but self.maintenance is still False: the batch goes out with the external tools, larger
    than measured, and the model may run them."""
    _history(ctx, 40)
    sent: list[tuple[int, set[str], str]] = []
    refused: list[int] = []

    def provider(request: ModelRequest) -> ModelResponse:
        size = _sent_tokens(request)
        names = {t.name for t in request.tools}
        sent.append((size, names, request.encoding))
        if len(sent) == 1:  # the seed: look something up, so the next request is an increment
            call = ToolCall("c1", "recall", json.dumps({"op": "search", "query": "status"}))
            return ModelResponse(None, (call,))
        if len(sent) == 2:  # the increment: refused, the provider says it takes 60% of it
            refused.append(size)
            window = int(size * 0.6)
            raise ContextTooLongError(f"prompt is too long: {size} tokens > {window} maximum")
        return ModelResponse("done")

    asyncio.run(_engine(ctx, FunctionModel(provider), workspace, delta=True).run("Hi"))
    assert refused, sent
    later = sent[2:]
    assert later
    window = int(refused[0] * 0.6)
    for size, names, text in later:
        if '(mode "maintenance")' in text:
            assert names == AGENT_TOOLS, (size, window, sorted(names))


def _apply_tx_as_before(view: Any, tx: Any, env: Any = None) -> Any:
    """apply_tx as it was at 013c773: the fast path tried after every operation."""
    from morphz.mind import apply as ap
    from morphz.mind import supersede

    a = ap._Apply(view, tx, ap.REPLAY_ENV if env is None else env)
    for index, op in enumerate(tx.ops):
        a.index, a.op = index, op
        ap._HANDLERS[type(op)](a, op)
        if a.retired:
            supersede.fast_path(a, list(a.retired))  # every frame retired so far, as it was
    return a.changes


@pytest.mark.parametrize(
    "tail",
    [
        "(checkpoint c1)",  # a checkpoint after the three: an ordinary tx
        "(revise new (from @e1) (n 2))",  # the citation dropped later in the tx
    ],
)
def test_a_history_recorded_before_the_fast_path_change_still_audits_clean(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    """DESIGN: audit replays the events through the same pure layer and must find the
    projection equal. A store written before 221ca57 holds commits whose supersede fast path
    fired mid-tx (here one that later drops the citation, or takes a checkpoint after the three);
    the new apply_tx replays them to another state, so every such store now fails its audit
    (decisions.md warns of this only for the body-depth change)."""
    from morphz import committing

    ctx.observe("user_message", "evidence")
    ctx.commit("(context-tx (base-version 0) (create old (o 1)))")
    monkeypatch.setattr(committing, "apply_tx", _apply_tx_as_before)  # recorded by the old code
    version = ctx.version
    ctx.commit(
        f'(context-tx (base-version {version}) (reason "r") (derive new (from old) (n 1)) '
        f"(retire old) (relate new supersedes old) {tail})"
    )
    monkeypatch.undo()
    report = ctx.audit()
    assert not report.differences, report.differences[:4]


# --- recall: the chronological walk pinned by document --------------------------------------------


def _commit(ctx: morphz.Context, *ops: str) -> None:
    ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "r") ' + " ".join(ops) + ")")


def _frame_keys(page: Any) -> list[str]:
    return [f"frame:{h.frame_id}" for h in page.hits]


def _walk(ctx: morphz.Context, first: Any, **kw: Any) -> list[str]:
    pages = _frame_keys(first)
    cursor = first.next_cursor
    while cursor is not None:
        page = ctx.recall.search(cursor=cursor, **kw)
        pages.extend(_frame_keys(page))
        cursor = page.next_cursor
    return pages


def test_chronological_walk_does_not_skip_a_frame_revised_before_it_is_reached(
    ctx: morphz.Context,
) -> None:
    """Paging (decisions.md): each document of the evidence set is returned at most once and
    none is skipped; the ranked walk pins frames by key, so a frame revised between pages and
    not yet returned is still found. 1bbad79 pins the chronological walk by document id
    instead: the revised frame's new document is outside the pin and its old one is gone, so a
    frame present on every page is never returned (the key pin returned it once)."""
    for name in ("alpha", "beta", "gamma"):
        _commit(ctx, f"(create notes/{name} (note {name}))")
    kw: dict[str, Any] = {"since": "2000-01-01T00:00:00Z", "kinds": ["frames"], "limit": 1}
    first = ctx.recall.search(**kw)
    assert _frame_keys(first) == ["frame:notes/alpha"]
    _commit(ctx, "(revise notes/beta (note beta revised))")  # not yet reached by the walk
    ranked_first = ctx.recall.search("note", kinds=["frames"], limit=1)
    _commit(ctx, "(revise notes/gamma (note gamma revised))")
    ranked = _walk(ctx, ranked_first, query="note", kinds=["frames"], limit=1)
    assert sorted(ranked) == ["frame:notes/alpha", "frame:notes/beta", "frame:notes/gamma"]
    pages = _walk(ctx, first, **kw)
    assert sorted(pages) == ["frame:notes/alpha", "frame:notes/beta", "frame:notes/gamma"], pages


# --- database.open: the recall rebuild after migration 0008 ---------------------------------------


def _store_before_0008(path: Path, contexts: list[str]) -> None:
    """A store as an older Morphz left it: each context holding an accented word, its index
    emptied (tokens of the old kind), migration 0008 not applied."""
    import sqlite3

    with morphz.open(path) as db:
        for cid in contexts:
            db.context(cid, create=True).observe("user_message", "my résumé is attached")
    conn = sqlite3.connect(path)
    for (table,) in conn.execute("SELECT fts_table FROM recall_meta").fetchall():
        conn.execute(f"DELETE FROM {table}")
    conn.execute("DELETE FROM schema_migrations WHERE number = 8")
    conn.commit()
    conn.close()


def test_an_interrupted_upgrade_rebuild_is_done_at_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """morphz.open rebuilds every context's index when it applies 0008, but the migration is
    recorded before the rebuilds run: when one fails (the store busy, the process stopped),
    the next open sees 0008 applied and never rebuilds, so the remaining contexts keep the old
    tokens until an operator happens to run recall-index rebuild."""
    from morphz.errors import StoreBusyError
    from morphz.recall.api import RecallIndex

    path = tmp_path / "m.db"
    _store_before_0008(path, ["alpha", "beta"])
    real = RecallIndex.rebuild
    calls: list[str] = []

    def busy_on_the_second(self: RecallIndex, *args: Any, **kw: Any) -> Any:
        calls.append(self.ctx.id)
        if len(calls) == 2:
            raise StoreBusyError("the store is locked: try again")
        return real(self, *args, **kw)

    monkeypatch.setattr(RecallIndex, "rebuild", busy_on_the_second)
    with pytest.raises(StoreBusyError):
        morphz.open(path)
    monkeypatch.undo()
    with morphz.open(path) as db:
        for cid in ("alpha", "beta"):
            hits = db.context(cid).recall.search("resume", limit=10).hits
            assert [h.ref for h in hits] == ["@e1"], (cid, calls)


# --- exec --format json: the events an activation produced ----------------------------------------


def test_exec_event_records_leave_out_a_concurrent_activation_in_the_same_session(
    ctx: morphz.Context, workspace: Path
) -> None:
    """cli_agent._produced lists every event of the activation's *session* between its start
    and finish records. Nothing keeps a session to one activation at a time (Engine: several
    activations may run at once; two `morphz exec` on one session do), so the event_records of
    one exec claim the other activation's request, start record and reply as its own."""
    from morphz.interfaces.cli_agent import _produced

    a_sent, b_done = asyncio.Event(), asyncio.Event()

    async def model(request: ModelRequest) -> ModelResponse:
        if "question a" in request.encoding and not a_sent.is_set():
            a_sent.set()
            await b_done.wait()  # A's reply comes back after B has run whole
            return ModelResponse("answer a")
        b_done.set()
        return ModelResponse("answer b")

    engine = _engine(ctx, FunctionModel(model), workspace)

    async def both() -> list[Any]:
        async def b_after_a() -> Any:
            await a_sent.wait()
            return await engine.run("question b", session="shared")

        return list(await asyncio.gather(engine.run("question a", session="shared"), b_after_a()))

    ra, rb = asyncio.run(both())
    assert (ra.state, rb.state) == ("delivered", "delivered")
    claimed = {e.ref for e in _produced(ctx, ra)}
    assert not claimed & set(rb.events), sorted(claimed & set(rb.events))


# --- the ceiling from a vLLM/OpenAI refusal that counts the completion ----------------------------


def test_a_vllm_refusal_stating_the_completion_sets_a_ceiling_that_fits(
    ctx: morphz.Context, workspace: Path
) -> None:
    """vLLM (and OpenAI's 'you requested' wording) state the total with the completion:
    'maximum context length is 8192 tokens. However, you requested 10473 tokens (6377 in the
    messages, 4096 in the completion)'. The input that fits is 8192 - 4096 of 6377, but
    refused_share takes 8192/10473 of the input as the ceiling (as if the completion shrank
    with it), so the next request is refused again, and again, each step closing only half of
    the remaining gap (the Anthropic 'N + K > M' form is handled; this one is not)."""
    _history(ctx, 40)
    window = 9_000
    refused: list[int] = []

    def provider(request: ModelRequest) -> ModelResponse:
        size = _sent_tokens(request)
        total = size + request.max_output_tokens
        if total > window:
            refused.append(size)
            raise ContextTooLongError(
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {total} tokens ({size} in the messages, {request.max_output_tokens} "
                "in the completion). Please reduce the length of the messages or completion."
            )
        return ModelResponse("seen")

    result = asyncio.run(_engine(ctx, FunctionModel(provider), workspace).run("Tidy up."))
    assert result.state == "delivered", result.reason
    assert len(refused) == 1, refused


# --- finish: recorded, then taken as ended --------------------------------------------------------


def test_a_cancel_while_the_end_is_being_recorded_stays_a_cancel(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """269a11e makes _Run.finish set the state only after finish_activation returns. When the
    task is cancelled (Ctrl-C in chat, asyncio.run's KeyboardInterrupt) while that write runs in
    its thread, the write still commits but the await raises CancelledError with the state
    still 'running'; Engine.run's cleanup then calls finish('interrupted'), whose write is
    refused (the activation is no longer running), and that InputError replaces the
    cancellation."""
    import threading
    import time

    real = ctx.finish_activation
    written = threading.Event()

    def slow_finish(
        activation: str, state: str = "delivered", reason: str | None = None, **kw: Any
    ) -> list[morphz.Event]:
        events = real(activation, state, reason, **kw)  # committed
        written.set()
        time.sleep(0.3)  # the thread is still returning when the task is cancelled
        return events

    monkeypatch.setattr(ctx, "finish_activation", slow_finish)
    engine = _engine(ctx, FunctionModel(lambda request: ModelResponse("done")), workspace)

    async def cancel_during_finish() -> None:
        task = asyncio.ensure_future(engine.run("hello"))
        while not written.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancel_during_finish())


# --- a reply with a lone surrogate: recorded clean, printed raw -----------------------------------


def test_exec_prints_a_reply_holding_a_lone_surrogate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b8eb754 records model replies as valid Unicode (a provider's JSON may carry "\\udfff"),
    but ActivationResult.reply keeps the raw text (engine.py _handle), so `morphz exec` records
    the activation as delivered and then dies printing the reply, in text and in JSON."""
    from click.testing import CliRunner

    import morphz.interfaces.cli_agent  # noqa: F401  (registers exec)
    from morphz.interfaces.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    script.write_text('[{"reply": "done \\udfff"}]')
    for fmt in ("text", "json"):
        args = ["exec", "hi", "--model", f"scripted:{script}", "--workspace", str(workspace)]
        result = CliRunner().invoke(main, [*args, "--db", str(tmp_path / "m.db"), "--format", fmt])
        assert result.exception is None, (fmt, repr(result.exception))
        assert result.exit_code == 0, (fmt, result.output)
