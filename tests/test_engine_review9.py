"""Review 9 findings on the engine: the cache anchor a new request sequence carries, the output a
request asks for, what a maintenance batch keeps, and what the pressure figure counts.

The first four tests are the reviewers' (tests/test_review9_adapters.py and
tests/test_review9_capacity.py, each failing on the code they were written against; their
docstrings say what was expected); the others pin the choices made in fixing them
(docs/decisions.md, "Review 9 findings on the engine")."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import import_log_lines as _history
from agents import make_engine as _engine
from loopback import Request, Server, anthropic_message, keep_alive
from morphz.capacity import Budget
from morphz.encoding.blocks import CacheLayout
from morphz.encoding.prefix import LOOKBACK, BlockCacheMeter
from morphz.encoding.tokens import estimate_tokens
from morphz.errors import InputError
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.requests import FRAMING, KEPT_SESSIONS

_OBSERVATION = re.compile(r"^ \(observation (@e\d+) ", re.M)
_FIGURE = re.compile(r"\(pressure \(level \w+\) \(tokens (\d+)\)")


def _figure(request: ModelRequest) -> int:
    """The token figure the request's kernel states."""
    return int(_FIGURE.findall(request.encoding)[-1])


def _shown(request: ModelRequest) -> set[str]:
    return set(_OBSERVATION.findall(request.encoding))


def _reads(*paths: str) -> ModelResponse:
    calls = tuple(
        ToolCall(f"c{i}-{path}", "read_file", json.dumps({"path": path}))
        for i, path in enumerate(paths)
    )
    return ModelResponse(None, calls)


# --- a new request sequence marks where the previous request stored its prefix --------------------


class CachingAnthropic:
    """An Anthropic Messages server on loopback keeping a prompt cache by Anthropic's rules
    (BlockCacheMeter: entries only at blocks marked cache_control, found at block boundaries
    up to 20 back from a mark), over tools + system + the first user turn's blocks, as
    tests/test_anthropic_loopback.py does. Records, per request, the cached prefix read, the
    text, and where its marked blocks end."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.cache = BlockCacheMeter()
        self.reads: list[int] = []
        self.texts: list[str] = []
        self.marks: list[list[int]] = []
        self.server = keep_alive(Server(self.answer))

    def answer(self, request: Request) -> dict[str, Any]:
        _, _, body = request
        text = json.dumps(body["tools"], sort_keys=True) + body["system"]
        cuts: list[int] = []
        marks: list[int] = []
        for index, block in enumerate(body["messages"][0]["content"]):
            if index:
                cuts.append(len(text))
            text += block["text"]
            if "cache_control" in block:
                marks.append(len(text))
        self.reads.append(self.cache.add(text, CacheLayout(len(text), tuple(cuts), tuple(marks))))
        self.texts.append(text)
        self.marks.append(marks)
        if len(self.texts) == 1:  # many reads at once: many tool results arrive in one step
            calls = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{i}",
                    "name": "read_file",
                    "input": {"path": "a"},
                }
                for i in range(self.calls)
            ]
            return anthropic_message(calls)
        return anthropic_message([{"type": "text", "text": "ok"}])


@pytest.fixture
def caching(loopback_only: None) -> Iterator[CachingAnthropic]:
    serving = CachingAnthropic(calls=LOOKBACK + 4)
    with serving.server:
        yield serving


def test_a_new_activation_marks_where_the_previous_request_stored_its_prefix(
    ctx: morphz.Context, workspace: Path, caching: CachingAnthropic
) -> None:
    """blocks.py: "Every request thus marks the end of the prefix the previous request stored,
    when it still shares it, so a provider that finds entries only at marks, without looking
    back, reads it too." With ContextDelta, the first request of the next activation on the same
    engine (the next `morphz chat` turn) is a fresh seed that shares the previous request's
    prefix up to the previous seed's inbox end, where that request put a mark. Expected: the new
    seed is anchored there (as DeltaEncoder._reseed and PlainLayouts anchor within an
    activation), so a cache by Anthropic's rules reads that whole prefix. Today each activation
    starts a new DeltaEncoder with no anchor: when more than 20 observations arrived in the
    previous activation, the mark at the new inbox end cannot look back that far and only the
    tools, system and evaluation-profile are read; the whole earlier inbox is written again."""
    (workspace / "a").write_text("alpha\n", encoding="utf-8")
    model = AnthropicMessagesModel("claude-loop", base_url=caching.server.root, api_key="k")
    engine = Engine(ctx, model, build_tools(Settings()), RuntimeConfig(workspace, delta=True))

    async def two_turns() -> None:  # one event loop: what a chat should be
        try:
            for prompt in ("read the file many times", "and now?"):
                result = await engine.run(prompt, session="s1")
                assert result.state == "delivered", result.reason
        finally:
            await model.aclose()

    asyncio.run(two_turns())
    assert len(caching.texts) == 3  # the tool calls, the reply, the second turn's reply
    previous, new = caching.texts[1], caching.texts[2]
    shared = next(
        (i for i, (a, b) in enumerate(zip(previous, new, strict=False)) if a != b),
        min(len(previous), len(new)),
    )
    stored = max(m for m in caching.marks[1] if m <= shared)  # what it stored and still shares
    profile = caching.marks[2][0]
    assert stored > profile  # the earlier inbox is there to be read
    assert caching.reads[2] >= stored, (
        f"read {caching.reads[2]} of the {stored} characters the previous request stored "
        f"(the fixed prefix alone is {profile})"
    )


def _stored_mark(answered: ModelRequest, new: ModelRequest) -> int:
    """The furthest mark of ``answered`` that ends a prefix ``new`` shares, past the fixed one."""
    assert answered.layout is not None
    marks = answered.layout.marks
    shared = [m for m in marks if new.encoding[:m] == answered.encoding[:m]]
    assert shared and shared[-1] > marks[0], (marks, shared)
    return shared[-1]


def test_without_delta_a_new_activation_marks_where_the_previous_request_stored_its_prefix(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Without ContextDelta too, the first request of an activation marks the inbox end of the
    last request answered in its session (it used to start a layout run of its own, anchored on
    nothing, and relied on the provider's lookback from its own inbox end)."""
    (workspace / "a").write_text("alpha\n", encoding="utf-8")
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return _reads("a", "a", "a") if len(seen) == 1 else ModelResponse("ok")

    engine = _engine(ctx, FunctionModel(model), workspace)
    for prompt in ("read a three times", "and now?"):
        assert asyncio.run(engine.run(prompt, session="s1")).state == "delivered"
    assert len(seen) == 3
    answered, new = seen[1], seen[2]
    assert new.layout is not None
    assert _stored_mark(answered, new) in new.layout.marks


def test_the_seed_after_a_refused_increment_marks_what_the_last_answered_request_stored(
    ctx: morphz.Context, workspace: Path
) -> None:
    """With ContextDelta, the fresh seed sent after a too-long refusal of piled increments
    starts a new sequence; its layout is anchored on the last request the provider answered
    (the refused one stored nothing), as a new activation's is."""
    (workspace / "a").write_text("alpha\n", encoding="utf-8")
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if len(seen) == 1:
            return _reads("a", "a")
        if len(seen) == 2:
            raise ContextTooLongError("prompt is too long")
        return ModelResponse("ok")

    result = asyncio.run(_engine(ctx, FunctionModel(model), workspace, delta=True).run("read"))
    assert result.state == "delivered", result.reason
    assert len(seen) == 3
    replies = [e for e in ctx.events() if e.kind == "model_reply"]
    assert [e.payload["request"]["delta"] for e in replies if e.payload] == ["first", "too-long"]
    answered, new = seen[0], seen[2]
    assert new.layout is not None
    assert _stored_mark(answered, new) in new.layout.marks


# --- the output a request asks for ---------------------------------------------------------------


def test_a_request_never_asks_for_more_output_than_the_window_leaves(
    ctx: morphz.Context, workspace: Path
) -> None:
    """DESIGN §10: hard = min(configured, window - output reserve): the output reserve is the
    room kept in the model's window for the reply. A request whose input is within the hard
    limit must therefore not ask for more output than the window leaves (input + max_tokens <=
    window), or the provider refuses it as too long (vLLM: "N in the messages, K in the
    completion"; Anthropic: "input length and max_tokens exceed context limit") although the
    budget said it fits. The engine asks for RuntimeConfig.max_output_tokens (4,096) whatever
    the context's output reserve is (here 1,000, which `morphz context budget --output-reserve`
    and `[budget] output_reserve` accept)."""
    budget = Budget(window=12_000, output_reserve=1_000, reserve=500)  # hard 11,000
    ctx.set_budget(budget)
    lines = 0
    while (
        _engine(ctx, FunctionModel(lambda r: ModelResponse("ok")), workspace)
        .encoding("default")
        .tokens
        < 8_500
    ):
        _history(ctx, 1)
        lines += 1
    assert lines > 0
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("ok")

    result = asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi"))
    assert result.state == "delivered", result.reason
    (request,) = requests
    assert _figure(request) <= budget.hard  # within the budget: sent whole, in work mode
    assert _figure(request) + request.max_output_tokens <= budget.window, (
        _figure(request),
        request.max_output_tokens,
        budget.window,
    )


@pytest.mark.parametrize(
    ("budget", "asked"),
    [
        (Budget(), 4_096),  # the reserve (8,000) leaves more than max_output_tokens
        (Budget(window=12_000, output_reserve=1_000, reserve=500), 1_000),  # the reserve
        (Budget(window=32_000, output_reserve=0, configured=9_000), 4_096),  # the window's rest
        (Budget(window=32_000, output_reserve=2_000, configured=30_000), 2_000),
        (Budget(window=12_000, output_reserve=0, reserve=500), 1),  # nothing left: the least
    ],
)
def test_the_output_asked_for_is_what_the_budget_leaves_above_the_hard_limit(
    ctx: morphz.Context, workspace: Path, budget: Budget, asked: int
) -> None:
    """A request asks for max_output_tokens, no more than window - hard (the output reserve, or
    more under a smaller configured limit) and at least 1 token: an output reserve of 0 with no
    smaller limit leaves nothing, and a provider takes no request for no output."""
    ctx.set_budget(budget)
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("ok")

    assert asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi")).state == (
        "delivered"
    )
    assert [r.max_output_tokens for r in requests] == [asked]


# --- what a maintenance batch keeps ------------------------------------------------------------


def test_a_batch_keeps_what_earlier_steps_of_the_activation_produced(
    ctx: morphz.Context, workspace: Path
) -> None:
    """DESIGN §10: a batch is "the current request and its causal dependencies plus the oldest
    unprotected observations". The engine takes the dependencies to be the root request and
    what the previous step produced only, not transitively: here the user asks for notes.txt to
    be summarised, step 1 reads it (the request is then over the hard limit: a batch), step 2
    (shown the file) makes a recall search, and step 3's batch drops the file, the activation's
    own working material and a dependency of the step that led to it, in favour of older
    unrelated log lines. Expected: every observation an earlier step of this activation
    produced and that is still active is in the batch (the minimum), as the root is."""
    _history(ctx, 18)
    (workspace / "notes.txt").write_text(
        "".join(f"note {i}: the build of module {i} passed\n" for i in range(380)),
        encoding="utf-8",
    )
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    seen: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if len(seen) == 1:
            call = ToolCall("c1", "read_file", json.dumps({"path": "notes.txt"}))
            return ModelResponse(None, (call,))
        if len(seen) == 2:
            call = ToolCall("c2", "recall", json.dumps({"op": "search", "query": "module"}))
            return ModelResponse(None, (call,))
        return ModelResponse("done")

    result = asyncio.run(_engine(ctx, FunctionModel(agent), workspace).run("Summarise notes.txt"))
    assert result.state == "delivered", result.reason
    assert len(seen) == 3
    file_result = next(
        e.ref for e in ctx.events() if e.kind == "tool_result" and e.meta and e.meta["call"] == "c1"
    )
    assert "note 379" in (ctx.event(file_result).text or "")  # the file was read whole
    assert {t.name for t in seen[0].tools} != {"context_tx", "recall"}  # step 1 was work
    assert file_result in _shown(seen[1])  # step 2: the previous step's result
    assert file_result in _shown(seen[2]), sorted(_shown(seen[2]))
    # a batch says so: how many of the active observations its inbox shows (tenth session)
    fact = re.search(r'\(batch "(\d+) of (\d+) shown, (\d+) left out"\)', seen[2].encoding)
    assert fact is not None
    shown, active, left = map(int, fact.groups())
    assert shown == len(_shown(seen[2])) and active - shown == left > 0
    assert "(batch " not in seen[0].encoding  # a whole request is no batch


def test_when_the_activations_results_do_not_all_fit_the_batch_keeps_the_last_steps(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Two steps each read a file of about 3,500 tokens under a hard limit of 9,000: the third
    request is over it, and the minimum with both results would be too. The batch then keeps
    the root and the last step's result (the first file's keeps its state, out of view), so the
    activation goes on instead of failing for a minimum it could have done without."""
    for name in ("a", "b"):
        lines = (f"{name} line {i}: the build passed\n" for i in range(400))
        (workspace / f"{name}.txt").write_text("".join(lines), encoding="utf-8")
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    seen: list[ModelRequest] = []

    def agent(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if len(seen) <= 2:
            return _reads("ab"[len(seen) - 1] + ".txt")
        return ModelResponse("done")

    result = asyncio.run(_engine(ctx, FunctionModel(agent), workspace).run("Read a and b"))
    assert result.state == "delivered", result.reason
    first, second = (
        e.ref for e in ctx.events() if e.kind == "tool_result" and e.meta and e.meta["tool"]
    )
    assert {t.name for t in seen[1].tools} != {"context_tx", "recall"}  # step 2 read b.txt
    assert first in _shown(seen[1])
    assert {t.name for t in seen[2].tools} == {"context_tx", "recall"}  # a batch
    assert second in _shown(seen[2]) and first not in _shown(seen[2])
    both = ctx.encode(only_observations=frozenset({1, int(first[2:]), int(second[2:])}))
    assert both.tokens > 9_000  # the minimum with both results: over the hard limit


# --- what the pressure figure counts -------------------------------------------------------------


def test_the_pressure_figure_covers_the_system_message_the_adapters_send(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Issue 4 item 4 / DESIGN §10: the estimate covers the whole model request (encoding, tool
    schemas, messages). Both SDK adapters send a fixed system message (PREAMBLE, about 36
    tokens) before the encoding, which no figure counts (EncodeOptions.extra_parts holds the
    tool schemas only; the 48-token slack is spent on the pressure figures' own text). So the
    kernel's figure is below the estimate of what is sent, and with an exact tokenizer the
    figure stated as "exact" is lower than what the provider counts. Expected: the figure is at
    least the estimate of preamble + encoding + tool schemas."""
    ctx.observe("user_message", "earlier question " * 20)
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("ok")

    result = asyncio.run(_engine(ctx, FunctionModel(model), workspace).run("hi"))
    assert result.state == "delivered", result.reason
    (request,) = requests
    sent = (
        estimate_tokens(PREAMBLE)
        + estimate_tokens(request.encoding)
        + sum(estimate_tokens(t.text) for t in request.tools)
    )
    assert _figure(request) >= sent, (_figure(request), sent)


def test_a_provider_counting_what_the_figure_counts_teaches_no_correction(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Calibration compares like with like: the estimate of the texts sent (preamble, encoding,
    schemas) with the report less the framing, which figures add uncalibrated. A provider whose
    count is exactly that leaves the factor at 1 (it used to learn the preamble and framing as
    a ratio, then figures added them again)."""

    def model(request: ModelRequest) -> ModelResponse:
        texts = [PREAMBLE, request.encoding, *(t.text for t in request.tools)]
        counted = sum(estimate_tokens(text) for text in texts) + FRAMING
        return ModelResponse("ok", usage=Usage(counted, 1))

    engine = _engine(ctx, FunctionModel(model), workspace)
    assert asyncio.run(engine.run("hi")).state == "delivered"
    assert (engine.calibration.samples, engine.calibration.factor) == (1, 1.0)


def test_the_framing_option_is_a_whole_number_of_tokens(ctx: morphz.Context) -> None:
    """EncodeOptions.framing is added to the figure as it is: a whole number, at least 0."""
    bare = ctx.encode(local_time="2026-01-01T00:00:00+00:00")
    framed = ctx.encode(local_time="2026-01-01T00:00:00+00:00", framing=8)
    assert framed.tokens == bare.tokens + 8
    for wrong in (-1, 1.5, True):
        with pytest.raises(InputError, match="framing"):
            ctx.encode(framing=wrong)


def test_an_engine_keeps_the_last_answered_request_of_its_most_recent_sessions(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The anchors an engine keeps are bounded: the last answered request of each of the
    KEPT_SESSIONS sessions answered most recently (a request can be hundreds of KB)."""
    engine = _engine(ctx, FunctionModel(lambda request: ModelResponse("ok")), workspace)
    sessions = [f"s{i}" for i in range(KEPT_SESSIONS + 2)]
    for session in [*sessions, "s0"]:
        assert asyncio.run(engine.run("hi", session=session)).state == "delivered"
    assert list(engine.answered) == [*sessions[3:], "s0"]
