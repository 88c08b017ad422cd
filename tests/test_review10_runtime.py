"""Review 10 (runtime): the agent runtime's tools, provider adapters and engine. Each test fails
against the code as it was reviewed and states the behaviour expected of it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

import morphz
from agents import make_engine
from morphz.runtime.agent_tools import agent_tools
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ProviderError
from morphz.runtime.models.openai_compat import OpenAIChatModel
from morphz.runtime.models.retry import Backoff
from morphz.runtime.tools.base import Tool, ToolContext, ToolError, ToolOutcome, run_guarded
from morphz.runtime.tools.shell import CappedOutput, exec_tool
from morphz.runtime.tools.workspace import (
    edit_file_tool,
    list_files_tool,
    read_file_tool,
    search_files_tool,
    write_file_tool,
)

FAULT = "(a fault of the tool)"


@pytest.fixture
def tc(ctx: morphz.Context, ws: Path) -> ToolContext:
    return ToolContext(ctx, "session-1", "activation-1", ws, (ws / "morphz.db",))


def guarded(tool: Tool, tc: ToolContext, args: dict[str, Any]) -> ToolOutcome | ToolError:
    """What the engine gets for a call: the outcome, or the typed refusal it turns into one."""
    try:
        return asyncio.run(run_guarded(tool, args, tc))
    except ToolError as exc:
        return exc


# --- exec: the output cap ------------------------------------------------------------------


def test_exec_output_just_over_the_cap_keeps_its_tail() -> None:
    """The exec tool promises output "capped at N characters keeping head and tail". Output a
    little over the cap (here 160 bytes against 100 characters; with the default cap, anything
    from 16,001 to about 40,000 bytes: a typical test run) must show its last lines: that is
    where a failing command says why. Today the tail buffer only receives bytes once the head
    buffer (4 bytes per character of its half) is full, so the cut shows the head and an empty
    tail: the end of the output is silently lost."""
    out = CappedOutput(100)
    data = b"".join(b"line%03d\n" % i for i in range(20))  # 160 bytes, ASCII
    out.add(data)
    text, truncated = out.text()
    assert truncated
    head, _, tail = text.partition("\n[... ")
    assert data.decode().startswith(head)
    tail = tail.split("omitted ...]\n", 1)[1]
    assert tail and data.decode().endswith(tail), repr(text)
    assert tail.endswith("line019\n")


def test_exec_output_under_the_cap_is_returned_byte_exact() -> None:
    """Output within the cap (12,000 CJK characters, 36,000 bytes, against the default 16,000
    characters) is returned whole and unchanged. Today the head buffer ends at byte 32,000, in
    the middle of a character, and head and tail are decoded separately: the character at the
    seam becomes two U+FFFD, while output_truncated says nothing was cut."""
    out = CappedOutput(16_000)
    data = ("数据" * 6_000).encode()
    for start in range(0, len(data), 4096):  # as a pipe delivers it
        out.add(data[start : start + 4096])
    text, truncated = out.text()
    assert not truncated
    assert text == data.decode(), text.count("\ufffd")


# --- tool arguments: JSON null -------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (read_file_tool(), {"path": None}),
        (read_file_tool(), {"path": "f.txt", "offset": None}),
        (write_file_tool(), {"path": "n.txt", "content": None}),
        (edit_file_tool(), {"path": "f.txt", "old": "x", "new": "y", "expected_sha256": None}),
        (search_files_tool(), {"query": None}),
        (list_files_tool(), {"path": None}),
        (exec_tool(), {"command": None}),
        (exec_tool(), {"command": "echo hi", "cwd": None, "timeout_s": None}),
    ],
    ids=lambda v: v.name if isinstance(v, Tool) else json.dumps(v),
)
def test_a_null_argument_is_not_a_fault_of_the_tool(
    tc: ToolContext, ws: Path, tool: Tool, args: dict[str, Any]
) -> None:
    """A JSON null is a value models send for arguments (strict function calling writes every
    optional one as null). parse_args checks types only when the value is not None, so null
    reaches the tool: a TypeError/AttributeError comes out, reported to the agent as "failed:
    TypeError ... (a fault of the tool)". Expected (DESIGN §13, decisions.md "a tool's
    arguments are checked before anything else"): a null optional argument takes its default
    (or is refused), a null required one is a ToolError naming the argument; never a fault."""
    (ws / "f.txt").write_text("x\n")
    got = guarded(tool, tc, args)
    if isinstance(got, ToolError):
        return  # a typed refusal the agent can act on
    assert FAULT not in got.text, got.text


def test_a_recall_op_that_is_not_text_is_a_tool_error(tc: ToolContext) -> None:
    """recall's op must be search, read or frame. An op that is a JSON array or object (a model
    wrapping it: {"op": ["search"]}) is tested with `op not in dict`, which raises TypeError
    (unhashable), reported as "recall failed: TypeError ... (a fault of the tool)". Expected:
    the same ToolError as for an unknown op ("recall needs op: search, read or frame")."""
    recall = next(t for t in agent_tools() if t.name == "recall")
    got = guarded(recall, tc, {"op": ["search"], "query": "x"})
    assert isinstance(got, ToolError), got


# --- search_files: line numbers ------------------------------------------------------------


def test_search_line_numbers_are_read_file_line_numbers(tc: ToolContext, ws: Path) -> None:
    """search_files reports `path:LINE`, and an agent reads around a hit with
    read_file offset=LINE-1. read_file counts lines by "\\n"; search_files splits with
    str.splitlines, which also breaks at \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028 and a lone \\r.
    A form feed (a page break, common in C and Python sources) shifts every later hit: here the
    needle is line 4 for read_file and line 5 for search. Expected: the same numbering."""
    (ws / "a.py").write_text("x = 1\n\x0c\ny = 2\nneedle\n")
    hit = guarded(search_files_tool(), tc, {"query": "needle"})
    assert isinstance(hit, ToolOutcome)
    line = hit.data["matches"][0]["line"]
    page = guarded(read_file_tool(), tc, {"path": "a.py", "offset": line - 1, "limit": 1})
    assert isinstance(page, ToolOutcome)
    assert page.text.splitlines()[1] == "needle", (line, page.text)


# --- provider adapters ---------------------------------------------------------------------


class Recorder:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[httpx2.Request] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        result: httpx2.Response = self.answer(request)
        return result

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def model(self, base_url: str = "http://127.0.0.1:9/v1", **kw: Any) -> OpenAIChatModel:
        return OpenAIChatModel(
            "gpt-4o",
            base_url=base_url,
            api_key="sk-test",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler)),
            sleep=self.sleep,
            backoff=Backoff(rand=lambda: 0.5),
            **kw,
        )


TPM = (
    "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
    "Requested 31538. The input or output tokens must be reduced in order to run successfully. "
    "Visit https://platform.openai.com/account/rate-limits to learn more."
)


def test_a_request_larger_than_the_token_rate_limit_is_not_retried_as_a_rate_limit() -> None:
    """OpenAI answers a request larger than the organisation's tokens-per-minute limit with
    HTTP 429 "Request too large for MODEL ... (TPM): Limit L, Requested R. The input or output
    tokens must be reduced" (code rate_limit_exceeded). Waiting never helps (like
    insufficient_quota, which is already not retried): the same request is refused forever.
    Today it is retried with backoff (3 sleeps) and then raised as a RateLimitError, which
    fails the activation. Expected: not retried, and raised as a ContextTooLongError so the
    engine shrinks the request (maintenance, a batch) below what the provider takes."""
    error = {"message": TPM, "type": "tokens", "param": None, "code": "rate_limit_exceeded"}
    rec = Recorder(lambda _r: httpx2.Response(429, json={"error": error}))
    model = rec.model()

    async def go() -> None:
        try:
            await model.request(ModelRequest("(evaluate)", ()))
        finally:
            await model.aclose()

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert rec.sleeps == [] and len(rec.sent) == 1, rec.sleeps
    assert isinstance(info.value, ContextTooLongError), type(info.value)


def test_base_url_credentials_are_not_recorded_in_the_store(
    ctx: morphz.Context, workspace: Path
) -> None:
    """A base URL may carry credentials (https://user:password@host/v1, a vLLM behind basic
    auth; httpx sends them as an Authorization header, so the configuration works). Every
    provider error names the base URL as configured ("cannot reach ... at https://alice:
    s3cr3t@..."), and the engine records that text as the activation's end reason: the password
    is written to the store (and printed by `morphz exec`). Expected: errors name the URL
    without its userinfo, so no secret reaches an event."""

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    rec = Recorder(refuse)
    model = rec.model("https://alice:s3cr3t-pass@llm.example/v1", max_retries=0)

    async def go() -> Any:
        try:
            return await make_engine(ctx, model, workspace).run("hello")
        finally:
            await model.aclose()

    result = asyncio.run(go())
    assert result.state == "failed"
    recorded = json.dumps([(e.text, e.payload) for e in ctx.events()], default=str)
    assert "s3cr3t-pass" not in recorded and "s3cr3t-pass" not in (result.reason or "")


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_764_460_000,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 4096, "total_tokens": 6096},
    }


def test_a_reply_cut_at_the_output_limit_is_not_delivered_as_complete(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The engine asks for at most max_output_tokens (and no more than the window leaves above
    the hard limit, as little as 1 token). A reply cut there comes back with finish_reason
    "length" (Anthropic: stop_reason "max_tokens"). The adapters drop that field, so the
    engine delivers the first half of a sentence as the activation's reply, and nothing in the
    store or the result says it was cut. Expected: a cut reply is not silently delivered as
    complete: the recorded model_reply (or the result's reason/state) says the output limit
    cut it."""
    cut = _completion({"role": "assistant", "content": "The deployment plan: first, we"}, "length")
    rec = Recorder(lambda _r: httpx2.Response(200, json=cut))
    model = rec.model(max_retries=0)

    async def go() -> Any:
        try:
            return await make_engine(ctx, model, workspace).run("Plan the deployment.")
        finally:
            await model.aclose()

    result = asyncio.run(go())
    replies = [e for e in ctx.events() if e.kind == "model_reply"]
    said = json.dumps(replies[-1].payload) + str(result.reason)
    assert result.state != "delivered" or "length" in said or "cut" in said, (
        result.state,
        said[:300],
    )
