"""Review 10 (protocol): the protocol region (src/morphz/encoding/protocol.py) read as the only
thing a model knows, checked against what the engine and the kernel really do. Each test fails
against the code as it was reviewed; its docstring states the behaviour expected."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path

import pytest

import morphz
from agents import make_engine
from morphz.capacity import Budget
from morphz.encoding.protocol import PROTOCOL
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang import SList, Str, read_one

_CLOCK = re.compile(r"\n \(clock (\d+)\)")


def _entry(name: str) -> str:
    """The text of one top-level entry of the protocol region, its lines joined."""
    node = read_one(PROTOCOL)
    assert isinstance(node, SList)
    found = next(i for i in node.items if isinstance(i, SList) and i.head == name)
    return " ".join(" ".join(i.value for i in found.items if isinstance(i, Str)).split())


def _history(ctx: morphz.Context, count: int, words: int = 60) -> None:
    for i in range(count):
        ctx.observe("external_event", f"log line {i}: " + "status ok " * words, session="feed")


# --- the clock: only real tool results tick it ------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["withdrawn-in-maintenance", "unknown-tool", "denied-approval"],
)
def test_a_tool_call_that_never_ran_does_not_tick_the_clock(
    ctx: morphz.Context, workspace: Path, case: str
) -> None:
    """The protocol's lifecycle entry (and DESIGN §7) says the cognitive clock ticks when "a
    real tool result arrives", not for receipts, recall results or time passing. The engine
    records the refusal of a call that never ran (an external tool withdrawn during
    maintenance, a tool name that does not exist, a call the approver denied) as a
    `tool_result`, a clock kind, so each such refusal ticks the clock: organizing windows run
    out and retiring frames retire while no work happened (a model that retries a withdrawn
    tool in maintenance advances its own clock once per try). Expected: the refusal of a call
    that never ran arrives without a tick (the clock stays where it was)."""
    if case == "withdrawn-in-maintenance":
        _history(ctx, 25)
        ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=3_000))
        assert ctx.encode().pressure.level == "critical"
        call = ToolCall("c1", "list_files", "{}")
    elif case == "unknown-tool":
        call = ToolCall("c1", "browse_web", '{"url": "https://example.org"}')
    else:  # write_file is "ask" by default; without an approver the answer is deny
        call = ToolCall("c1", "write_file", '{"path": "notes.txt", "content": "x"}')
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(requests) == 1:
            return ModelResponse(None, (call,))
        return ModelResponse("done", ())

    result = asyncio.run(make_engine(ctx, FunctionModel(model), workspace).run("hi", session="ops"))
    assert result.state == "delivered", result.reason
    refused = [e for e in ctx.events() if e.kind == "tool_result"]
    assert len(refused) == 1 and refused[0].meta is not None and refused[0].meta["error"]
    before = int(_CLOCK.findall(requests[0].encoding)[-1])
    after = int(_CLOCK.findall(requests[1].encoding)[-1])
    assert after == before, f"{case}: the clock went from {before} to {after}: {refused[0].text}"


# --- a maintenance batch hides part of the inbox without saying so -----------------------------


def test_a_maintenance_batch_says_that_its_inbox_leaves_observations_out(
    ctx: morphz.Context, workspace: Path
) -> None:
    """When the whole request exceeds the hard limit the engine sends a maintenance batch: the
    root request, the activation's own results, protected items, then the oldest observations
    that fit. The protocol describes the inbox as "observations that arrived ... in arrival
    order" and promises that "nothing is summarised behind your back", yet nothing in a batch
    request says that active observations were left out: the session directory lists only the
    refs the batch shows, and the kernel's scheduling states only (mode "maintenance"). A model
    maintaining from the batch cannot know that more is in its context (what it would have to
    retire, or that the newest arrivals are hidden), nor why its figures differ from what the
    next request shows. Expected: a batch request states that it is a batch and how many active
    observations it leaves out (e.g. in the kernel's scheduling: (batch (left-out N)))."""
    _history(ctx, 60)
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=8_000, reserve=3_000))
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("done", ())

    engine = make_engine(ctx, FunctionModel(model), workspace)
    engine.clock = lambda: "2026-08-04T09:05:00+00:00"  # the store's clock: feed is recent
    result = asyncio.run(engine.run("hi", session="ops"))
    assert result.state == "delivered", result.reason
    text = requests[0].encoding
    shown = set(re.findall(r"\n \(observation (@e\d+) ", text))
    # (the agent_reply the delivered reply adds after that request is not one it hid)
    active = {o.ref for o in ctx.mind().observations if o.kind != "agent_reply"}
    hidden = active - shown
    assert len(hidden) > 10, "the first request is a batch that leaves observations out"
    after_inbox = text[text.find("\n(observation-state") :]
    said = ("batch" in after_inbox or "left-out" in after_inbox) and re.search(
        rf"\b{len(hidden)}\b", after_inbox
    )
    assert said, f"{len(hidden)} active observations hidden, and the request does not say so"


# --- the model's own replies ---------------------------------------------------------------


def test_a_later_activation_sees_what_the_agent_replied_before(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Tool results come back as observations and the encoding is the whole context (no chat
    history is sent), but a delivered reply is a `model_reply` event, not an observation: the
    next activation in the same session (the next line of `morphz chat`) shows the user's
    earlier messages and not one word of what the agent answered them. The protocol never says
    so: its inbox lists user messages, tool results, events, recall results, approvals and
    receipts, so a model cannot know it must keep what it told the user in a frame, and "what
    did you just say?" cannot be answered from the encoding. Expected: the agent's earlier
    replies in the session are visible to its later activations (e.g. as an inbox observation
    it can retire), or at the least the protocol's regions entry says where its replies are
    (not shown; recall finds them)."""
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse("The release code is PINEAPPLE-42.", ())

    engine = make_engine(ctx, FunctionModel(model), workspace)
    first = asyncio.run(engine.run("what is the release code?", session="ops"))
    assert first.state == "delivered" and first.reply is not None
    asyncio.run(engine.run("repeat exactly what you told me", session="ops"))
    second = requests[1].encoding
    regions = _entry("regions")
    assert "PINEAPPLE-42" in second or "repl" in regions, (
        "the agent's earlier reply is nowhere in its next request, and the protocol does not "
        "say where its replies are"
    )


# --- a refusal that names no operation -------------------------------------------------------


def test_a_budget_refusal_names_the_operation_that_grows_the_mind(ctx: morphz.Context) -> None:
    """The protocol's receipts entry says a refused transaction "returns a typed error (parse,
    validation, stale-version, conflict, protected, not-found, budget) naming the operation,
    line and column". A `budget` refusal names none (op, op_index, line and column are all
    null), so a model that created several frames in one transaction cannot tell which one
    to shorten. Expected: the budget refusal names the operation that takes the frames in view
    past the critical level (here the second create, line 1), with its line and column."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000, configured=9_000, reserve=200))
    small = "(x 1)"
    huge = '"' + "x" * 40_000 + '"'
    tx = f"(context-tx (base-version 0) (create small {small}) (create notes {huge}))"
    with pytest.raises(morphz.errors.BudgetError) as refused:
        ctx.commit(tx)
    err = refused.value.to_dict()
    assert ctx.version == 0
    assert err["op"] == "create" and err["op_index"] == 1, json.dumps(err)[:400]
    assert err["line"] == 1 and err["column"] == tx.index("(create notes") + 1, err


# --- "read the rest with recall" with a small preview threshold ---------------------------------


def test_a_recall_read_shows_its_text_whatever_preview_threshold_the_view_allows(
    ctx: morphz.Context,
) -> None:
    """The inbox's preview marker says "read @eN with recall for the full text", and a delivered
    read is cut so that it shows whole in the inbox, but never below 500 characters. The view
    takes any preview threshold from 1 character: at 400 (accepted without a word), every
    delivered read (a page of at least 500 characters in a JSON envelope of about 250) is
    itself shown as a preview, head 200 characters of the envelope and tail 100, so the middle
    of a long observation can never be read from the encoding, however the model pages (each
    read of the result is previewed again). Expected: either such a threshold is refused when
    the view is set (an InputError naming the least that lets a read show), or the delivered
    page (read with the defaults, as the marker suggests) shows whole in the inbox."""
    view = ctx.view()
    try:
        ctx.set_view(dataclasses.replace(view, preview_threshold=400))
    except morphz.errors.InputError:
        return  # refusing a threshold that no recall page fits under is a fix
    text = "".join(f"[{i:05d}]" for i in range(600))  # 4,200 characters, each marker unique
    ctx.observe("tool_result", text)
    _, delivered = ctx.recall.deliver("read", ref="@e1", offset=700)  # as the marker says
    encoding = ctx.encode().text
    item = encoding[encoding.find(f"(observation {delivered.ref} ") :]
    item = item[: item.find("\n(observation-state")]
    assert "(preview " not in item, item[:600]
    assert "[00100]" in item  # characters 700-706 of the observation
