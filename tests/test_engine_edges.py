"""Edge cases of the runtime engine's tool, maintenance, too-long, ContextDelta and reporting paths
(found in a review of 2026-11-30; each failed against the code as it was)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import import_log_lines as _history
from agents import make_engine as _engine
from morphz.encoding.tokens import estimate_tokens
from morphz.ids import ref_seq
from morphz.runtime.engine import ActivationResult
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

AGENT_TOOLS = {"context_tx", "recall"}


def _sent_tokens(request: ModelRequest) -> int:
    return estimate_tokens(request.encoding) + sum(estimate_tokens(t.text) for t in request.tools)


# --- 1. a model's broken recall arguments crash the activation ---------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"op": "read"},  # the required ref left out
        {"op": "frame"},  # the required frame_id left out
        {"op": "search", "query": 5},  # a number for the query
        {"op": "search", "query": "x", "kinds": 5},
    ],
)
def test_broken_recall_arguments_are_a_tool_error_not_a_crash(
    ctx: morphz.Context, workspace: Path, arguments: dict[str, Any]
) -> None:
    """DESIGN §13: a model that returns broken tool arguments yields an observation the agent can
    act on, never a crash. A recall call missing its required argument (or with a wrong type)
    raises an untyped TypeError/AttributeError out of Engine.run, and the activation is recorded
    as interrupted by a process that did not stop."""
    steps: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        steps.append(request)
        if len(steps) == 1:
            return ModelResponse(None, (ToolCall("c1", "recall", json.dumps(arguments)),))
        return ModelResponse("done")

    result = asyncio.run(_engine(ctx, FunctionModel(agent), workspace).run("hi"))
    assert result.state == "delivered", result.reason
    told = [e for e in ctx.events() if e.meta and e.meta.get("call") == "c1"]
    assert told and told[-1].meta is not None and told[-1].meta["error"] is True


# --- 2. a too-long refusal: the maintenance request is no smaller ------------------------------


def test_after_a_too_long_refusal_a_smaller_request_is_tried_before_failing(
    ctx: morphz.Context, workspace: Path
) -> None:
    """DESIGN §10: after a provider rejects an oversized input the activation is in
    maintenance, and when the full request does not fit the window the runtime serves a smaller
    batch; it fails only when even the minimum maintenance request cannot fit. Here the
    provider's real window (about 4,000 tokens) is smaller than the configured budget: the
    engine sends the whole inbox again (only the external tool schemas left out), is refused
    again, and fails although a batch with the root request fits easily."""
    _history(ctx, 40)  # about 40 x 160 tokens: well under the default budget, over the window
    window = 4_000
    sent: list[int] = []

    def provider(request: ModelRequest) -> ModelResponse:
        sent.append(_sent_tokens(request))
        if sent[-1] > window:
            raise ContextTooLongError(f"prompt is too long: {sent[-1]} tokens > {window} maximum")
        return ModelResponse("seen")

    result = asyncio.run(_engine(ctx, FunctionModel(provider), workspace).run("Tidy up."))
    # the minimum maintenance request (protocol, kernel, two tools, the root request) fits
    root = ref_seq(result.events[0])
    minimum = ctx.encode(only_observations=frozenset({root}))
    assert minimum.tokens + 300 < window  # with room for context_tx and recall

    assert result.state == "delivered", (result.reason, sent)


def test_work_does_not_resume_with_a_request_as_large_as_the_one_refused(
    ctx: morphz.Context, workspace: Path
) -> None:
    """After a too-long refusal the engine waits for a commit to "measure again", but what it
    measures is the same uncorrected estimate that let the refused request through: a commit
    that frees nothing (here one that derives a small frame) sends the work request again, larger
    than the one the provider just refused, which is refused again; work and maintenance
    alternate, each round a refused request, until the step limit fails the activation."""
    _history(ctx, 40)
    window = 10_500  # the work request (about 11,000) is over it, the maintenance one (9,900) not
    sent: list[tuple[int, set[str]]] = []
    refused: list[int] = []

    def provider(request: ModelRequest) -> ModelResponse:
        size = _sent_tokens(request)
        names = {t.name for t in request.tools}
        sent.append((size, names))
        if size > window:
            refused.append(size)
            raise ContextTooLongError(f"prompt is too long: {size} tokens > {window} maximum")
        if names == AGENT_TOOLS:  # maintenance: commit something small, then look again
            version = request.encoding.split("(mind-version ")[-1].split(")")[0]
            number = len(sent)
            tx = f"(context-tx (base-version {version}) (create note/n{number} (seen {number})))"
            tx_call = ToolCall(f"c{number}", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (tx_call,))
        return ModelResponse("done")

    result = asyncio.run(
        _engine(ctx, FunctionModel(provider), workspace, step_limit=8).run("Tidy up.")
    )
    first = refused[0]
    later_work = [size for size, names in sent[1:] if names != AGENT_TOOLS]
    assert all(size < first for size in later_work), (sent, result.reason)


# --- 3. ContextDelta: a seed after a batch is recorded as a tool-set change ----------------------


def test_the_seed_after_a_batch_is_not_recorded_as_a_tool_set_change(
    ctx: morphz.Context, workspace: Path
) -> None:
    """`morphz context requests` traces low prefix reuse to its rebuilds by the reason recorded
    in each model_reply (docs/cli.md: ``tool-set`` = work and maintenance switched). A batch
    followed by the full maintenance request (still maintenance, the same two tools) is recorded
    as ``tool-set``, though the tool set did not change."""
    from morphz.capacity import Budget

    _history(ctx, 40)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=1_000))
    seen: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        names = {t.name for t in request.tools}
        if names == AGENT_TOOLS and len(seen) < 6:
            refs = [
                part.split(" ")[0]
                for part in request.encoding.split("(observation ")[1:]
                if "(kind external_event)" in part.split("(text")[0]
            ][:12]
            version = request.encoding.split("(mind-version ")[-1].split(")")[0]
            tx = (
                f'(context-tx (base-version {version}) (reason "read") '
                + " ".join(f"(retire {r})" for r in refs)
                + ")"
            )
            tx_call = ToolCall(f"c{len(seen)}", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (tx_call,))
        return ModelResponse("done")

    result = asyncio.run(_engine(ctx, FunctionModel(agent), workspace, delta=True).run("Tidy up."))
    assert result.state == "delivered", result.reason
    replies = [
        e.payload
        for e in ctx.events()
        if e.kind == "model_reply" and e.payload and e.payload["activation"] == result.activation
    ]
    kinds = [p["request"]["delta"] for p in replies]
    tools = [frozenset(t.name for t in r.tools) for r in seen]
    assert "maintenance-batch" in kinds, kinds
    for before, after, kind in zip(tools, tools[1:], kinds[1:], strict=False):
        if kind == "tool-set":
            assert before != after, (kinds, [sorted(t) for t in tools])


# --- 4. the prefix meter measures in reply order, not in the order requests were sent ----------


def test_concurrent_requests_are_measured_against_the_request_sent_before_them(
    ctx: morphz.Context, workspace: Path
) -> None:
    """report.py / `context requests`: each request's reuse is "the bytes that began the
    previous request the same engine sent". Activations run concurrently on one engine
    (engine.py: "Several activations may run at once"), but Engine.measure is called when the
    reply arrives: here A's request is sent first and answered last, so A is recorded as
    measured against B (sent after it) and B, which followed A, as the engine's first."""
    a_sent, b_done = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def model(request: ModelRequest) -> ModelResponse:
        if "\n (session a)\n" in request.encoding:  # the kernel's current session
            order.append("a")
            a_sent.set()
            await b_done.wait()
        else:
            order.append("b")
            b_done.set()
        return ModelResponse("done")

    engine = _engine(ctx, FunctionModel(model), workspace)

    async def both() -> list[ActivationResult]:
        async def b_after_a() -> ActivationResult:
            await a_sent.wait()
            return await engine.run("question b", session="b")

        return list(await asyncio.gather(engine.run("question a", session="a"), b_after_a()))

    ra, rb = asyncio.run(both())
    assert order == ["a", "b"]
    recorded = {
        e.payload["activation"]: e.payload["request"]
        for e in ctx.events()
        if e.kind == "model_reply" and e.payload
    }
    assert recorded[ra.activation]["prefix"] is None, recorded  # the first request sent
    assert recorded[rb.activation]["prefix"] is not None, recorded  # it followed A's


# --- 5. a failed finish is not retried: the activation stays running -----------------------------


def test_an_activation_is_not_left_running_when_recording_its_end_fails_once(
    ctx: morphz.Context, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DESIGN §13: a database that is locked yields a clear error, never state left
    half-written. _Run.finish sets the in-memory state before finish_activation is written; when
    that write fails (the store busy), Engine.run's handler calls finish("interrupted"), which
    returns at once because the state is no longer "running": the activation row stays
    "running" in the store though the process has given up on it."""
    from morphz.errors import StoreBusyError

    real = ctx.finish_activation
    calls: list[str] = []

    def busy_once(
        activation: str, state: str = "delivered", reason: str | None = None, **kw: Any
    ) -> list[morphz.Event]:
        calls.append(state)
        if len(calls) == 1:
            raise StoreBusyError("the database is locked: try again")
        return real(activation, state, reason, **kw)

    monkeypatch.setattr(ctx, "finish_activation", busy_once)
    engine = _engine(ctx, FunctionModel(lambda request: ModelResponse("done")), workspace)
    with pytest.raises(StoreBusyError):
        asyncio.run(engine.run("hello"))
    (row,) = ctx.activations()
    assert row.state != "running", (row.state, calls)


@pytest.mark.parametrize(
    ("name", "share"),
    [
        ("anthropic_context_too_long.json", 200_000 / 215_211),
        ("openai_context_too_long.json", 128_000 / 131_467),
        ("vllm_context_too_long.json", (8_192 - 4_096) / 6_377),  # the input left the output
        ("llamacpp_context_too_long.json", 0.75),  # its message states no numbers
    ],
)
def test_what_a_refusal_says_it_would_take(name: str, share: float) -> None:
    """The share of a refused request a provider would take, from its recorded message."""
    from morphz.runtime.models.retry import refused_share

    recording = json.loads((Path(__file__).parent / "recordings" / name).read_text())
    said = recording["exchanges"][0]["response"]["json"]
    message = said["error"]["message"] if "error" in said else said["message"]
    assert refused_share(message) == pytest.approx(min(share, 0.95))
