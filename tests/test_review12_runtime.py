"""Review 12, runtime: the model-tool loop as ``morphz exec`` and the engine API run it, with
ContextDelta on and off (engine.py, requests.py, batches.py, report.py). Every test fails on the
code it was written against; each docstring states the behaviour expected. The fix added the
tests of a cancel during a later call and of a refused request's figures in the report."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import (
    ECHO,
    SMALL_BUDGET,
    WRITE_A,
    approving_writes,
    asking,
    end_of,
    make_engine,
    results_of,
)
from morphz.capacity import Budget
from morphz.encoding.prefix import request_text
from morphz.interfaces import render
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.report import RequestStats, pick_activations, request_stats, total
from morphz.runtime.tools.base import ApprovalEnded, Tool

_BATCH = re.compile(r'\(batch "(\d+) of (\d+) shown, (\d+) left out"\)')


def test_interrupted_activation_keeps_the_results_of_calls_that_already_ran(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A reply asks for two calls: ``write_file`` (approved, so it runs and writes the file) and
    ``exec``, whose approval prompt ends (end of input, ``ApprovalEnded``). The activation ends
    interrupted, but the write really happened: its ``tool_result`` must be recorded before
    ``activation_finished``, so the next activation (and recall) knows the file was written.
    Today the outcomes are recorded only once every call of the reply is done, so the write's
    result is lost: the workspace changed and the context never says so (DESIGN §13: never a
    crash that loses state). The same holds for Ctrl-C while the second call runs."""
    replies = 0

    def model(request: ModelRequest) -> ModelResponse:
        nonlocal replies
        replies += 1
        if replies == 1:
            write = WRITE_A
            run = ECHO
            return ModelResponse(None, (write, run))
        return ModelResponse("done", ())

    async def approver(tool: Tool, args: dict[str, Any]) -> bool:
        if tool.name == "write_file":
            return True
        raise ApprovalEnded(f"input ended at the approval prompt for {tool.name}")

    engine = make_engine(ctx, FunctionModel(model), workspace, approver=approver)
    with pytest.raises(ApprovalEnded):
        asyncio.run(engine.run("write a.txt, then run echo", session="s"))
    assert (workspace / "a.txt").read_text(encoding="utf-8") == "hi\n"  # the write happened
    finished, results = end_of(ctx), results_of(ctx, "c1")
    assert results, "the write_file call ran, but no tool_result of it was recorded"
    assert results[0].seq < finished
    assert ctx.audit().ok


def test_a_cancel_during_a_later_call_keeps_the_results_of_calls_that_already_ran(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Ctrl-C (the activation's task cancelled) while the reply's second call waits for its
    approval: the first call's write happened, so its ``tool_result`` is recorded before the
    interrupted ``activation_finished``, as a batch that ticks the clock once."""
    asked = asyncio.Event()

    async def scenario() -> None:
        engine = make_engine(
            ctx, asking(WRITE_A, ECHO), workspace, approver=approving_writes(asked)
        )
        task = asyncio.create_task(engine.run("write a.txt, then run echo", session="s"))
        await asked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    clock = ctx.status().clock
    asyncio.run(scenario())
    events = list(ctx.events())
    finished = next(e for e in events if e.kind == "activation_finished")
    assert [a.state for a in ctx.activations()] == ["interrupted"]
    results = [e for e in events if e.kind == "tool_result"]
    assert [(e.meta or {}).get("call") for e in results] == ["c1"]
    assert results[0].seq < finished.seq
    assert ctx.status().clock == clock + 2  # the user's message, then the one batch of results
    assert ctx.audit().ok


def test_a_maintenance_request_that_fits_is_not_a_batch_that_leaves_nothing_out(
    ctx: morphz.Context, workspace: Path
) -> None:
    """At critical pressure the activation enters maintenance; the maintenance request (only
    context_tx and recall offered) fits the hard limit whole. The engine's docstring: "When the
    whole request exceeds the hard limit, the model is shown a batch of the inbox". Today
    ``_fits`` compares the maintenance figure, which counts the schemas of the work tools that
    are *not* sent, with the hard limit, so a request that fits is sent as a "batch" whose
    kernel says ``(batch "N of N shown, 0 left out")``, whose pressure drops to warning without
    anything retired, and (with ContextDelta) every such step is a new seed recorded as
    ``maintenance-batch``. Expected: a batch is only sent when it leaves something out."""
    for i in range(2):
        (workspace / f"f{i}.txt").write_text(f"line 0 of file {i}, some text here\n" * 60)
    sent: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        if len(sent) <= 2:
            path = json.dumps({"path": f"f{len(sent) - 1}.txt"})
            return ModelResponse(None, (ToolCall(f"c{len(sent)}", "read_file", path),))
        return ModelResponse("done", ())

    engine = make_engine(ctx, FunctionModel(model), workspace, delta=True, budget=SMALL_BUDGET)
    result = asyncio.run(engine.run("read the files", session="s"))
    assert result.state == "delivered", result.reason
    assert len(sent) == 3
    assert '(mode "maintenance")' in sent[2].encoding  # critical pressure reached
    batches = [m.groups() for r in sent for m in _BATCH.finditer(r.encoding)]
    empty = [b for b in batches if b[2] == "0"]
    assert not empty, f"batches that leave nothing out were sent: {empty}"


def _refused_once(sent: list[ModelRequest]) -> FunctionModel:
    def model(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        if len(sent) == 1:
            raise ContextTooLongError(
                "maximum context length is 3600 tokens, however you requested 4000 tokens"
            )
        return ModelResponse("ok", ())

    return FunctionModel(model)


@pytest.mark.parametrize("delta", [False, True])
def test_requests_report_counts_the_requests_a_provider_refused(
    ctx: morphz.Context, workspace: Path, delta: bool
) -> None:
    """`morphz context requests` gives "the number of requests" an activation sent to its model
    and their bytes, "the benchmarks' prefix-reuse meter applied to real runs". A request the
    provider refused as too long was sent (the engine measures it with its meter, and the next
    reply records ``refused``), but the report counts only model replies: an activation that
    sent two requests reports one, and the refused request's bytes are missing from the meter's
    totals. Expected: the report's ``requests`` equals the requests sent (refused ones included,
    or at least reported apart as refused)."""
    sent: list[ModelRequest] = []
    engine = make_engine(ctx, _refused_once(sent), workspace, delta=delta)
    result = asyncio.run(engine.run("hello", session="s"))
    assert result.state == "delivered", result.reason
    assert len(sent) == 2
    (stats,) = request_stats(ctx, pick_activations(ctx))
    data = stats.to_dict()
    assert data["requests"] == len(sent) or data.get("refused") == 1, data


def test_a_refused_request_is_counted_as_sent_with_its_bytes_and_apart_as_refused(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The report's ``requests`` is the requests sent, ``refused`` the ones refused as too long,
    and the meter's figures include the refused request's (the next one is measured against it);
    the text table shows the figure. A reply recorded before each refused request's figures were
    (only ``refused``: N) still counts N requests sent and refused."""
    sent: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        sent.append(request)
        if len(sent) == 2:  # the second activation's first request, refused with numbers
            # (a ceiling of 90%, about 4,200 tokens: above the smallest request, about 3,520
            # since the protocol names recovered results; the guessed 75% is now below it)
            raise ContextTooLongError(
                "input length and `max_tokens` exceed context limit: 4000 + 0 > 3600"
            )
        return ModelResponse("ok", ())

    engine = make_engine(ctx, FunctionModel(model), workspace, delta=True)
    asyncio.run(engine.run("hello", session="s"))
    asyncio.run(engine.run("again", session="s"))
    stats = request_stats(ctx, pick_activations(ctx, last=2))
    first, second = (s.to_dict() for s in stats)
    assert (first["requests"], first["refused"], first["measured"]) == (1, 0, 0)
    assert (second["requests"], second["refused"], second["measured"]) == (2, 1, 2)
    sizes = [len(request_text(r.encoding, [t.text for t in r.tools]).encode()) for r in sent[1:]]
    assert second["bytes"] == sum(sizes)  # the refused request's bytes included
    assert sum(second["delta"]["seeds"].values()) + second["delta"]["increments"] == 2
    text = render.request_stats(stats, total(stats))
    assert "refused" in text.splitlines()[0]
    old = RequestStats("a", "s", "delivered")
    old.add_reply({"request": {"bytes": 10, "prefix": 5, "refused": 2}})
    assert (old.requests, old.refused, old.measured) == (3, 2, 1)


def test_failure_under_a_provider_ceiling_does_not_advise_raising_the_budget(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The provider refuses requests above a window far below the context's budget (hard limit
    30,000). When even the minimum maintenance request is above the ceiling the refusals taught,
    the activation fails, and ``batches.floor_reason`` should give "only the remedies that can
    help". Raising the budget cannot help: the provider's window, not the budget, is what the
    request does not fit. Today the reason still says "raise the budget (`morphz context budget
    --limit N` or `--window N`)", measured against the ceiling as if it were the budget."""
    budget = Budget(window=64_000, output_reserve=2_000, configured=30_000, reserve=1_000)

    def model(request: ModelRequest) -> ModelResponse:
        raise ContextTooLongError(
            "maximum context length is 2000 tokens, however you requested 4500 tokens"
        )

    engine = make_engine(ctx, FunctionModel(model), workspace, budget=budget)
    result = asyncio.run(engine.run("hello", session="s"))
    assert result.state == "failed"
    assert result.reason is not None and "the provider refused larger" in result.reason
    assert "raise the budget" not in result.reason, result.reason
