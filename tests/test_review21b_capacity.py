"""Review 21b, capacity under content unlike English prose: how far the no-network estimate falls
below what a real BPE tokenizer must count, and what the runtime then promises wrongly.

The real o200k_base vocabulary needs the network, but its pre-tokenizer pattern is known
(``tokens.O200K_PATTERN``, pinned to the installed tiktoken by test_tokenizer.py) and BPE never
merges across the pattern's chunks. So the number of chunks is a floor that no vocabulary under
that pattern can go below: :func:`o200k_minimum` counts a text with the real tiktoken and a
vocabulary holding every chunk of the text as one token, the most generous one there can be
(cl100k's pattern, which Llama 3 also uses, splits digits and punctuation the same way). Each
test fails on the code as reviewed; its docstring states the expected behaviour. The estimate's
tests (finding 1) pass since the twenty-second session, when the estimate came to count each line
of the encoding as at least its chunks (morphz.token_estimate)."""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

import morphz
from agents import make_engine
from morphz.encoding.tokens import O200K_PATTERN, estimate_tokens
from morphz.runtime.models.base import ModelRequest, ModelResponse, Usage
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.models.sdk import PREAMBLE

TIKTOKEN: Any = importlib.import_module("tiktoken")  # a dev dependency
CHUNKS: Any = importlib.import_module("regex")  # tiktoken's own dependency
_FIGURE = re.compile(r"\(pressure \(level (\w+)\) \(tokens (\d+)\)")
LIMIT = 15_999  # the longest observation the inbox shows whole (threshold 16,000)


def o200k_minimum(text: str) -> int:
    """The fewest tokens any BPE vocabulary under o200k's pre-tokenizer pattern can give
    ``text``: counted by tiktoken with every chunk of ``text`` in the vocabulary (each reachable
    by merges of its prefixes), so each chunk is one token."""
    ranks = {bytes([i]): i for i in range(256)}
    for chunk in sorted(set(CHUNKS.findall(O200K_PATTERN, text))):
        data = chunk.encode()
        for end in range(2, len(data) + 1):
            ranks.setdefault(data[:end], len(ranks))
    encoding = TIKTOKEN.Encoding(
        "most-generous-o200k", pat_str=O200K_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    return len(encoding.encode_ordinary(text))


def _csv(rng: random.Random) -> str:
    rows = (",".join(str(rng.randrange(1000)) for _ in range(8)) for _ in range(2_000))
    return "\n".join(rows)[:LIMIT]


def _matrix(rng: random.Random) -> str:
    rows = [[rng.randrange(10) for _ in range(20)] for _ in range(500)]
    return json.dumps(rows, separators=(",", ":"))[:LIMIT]


def _log(rng: random.Random) -> str:
    lines = (
        f"2026-12-01T21:{rng.randrange(60):02d}:{rng.randrange(60):02d}."
        f"{rng.randrange(10**6):06d}Z GET /api/v1/items/{rng.randrange(10**5)} "
        f"{rng.choice((200, 404, 500))} {rng.random():.3f}"
        for _ in range(400)
    )
    return "\n".join(lines)[:LIMIT]


@pytest.mark.parametrize("make", [_csv, _matrix, _log], ids=["csv", "json-matrix", "access-log"])
def test_a_request_the_kernel_calls_normal_is_within_the_hard_limit(
    ctx: morphz.Context, make: Any
) -> None:
    """capacity.py / docs/cli.md: "a request within the hard limit fits the window with its
    reply", and the estimate is "a deliberate over-estimate ... budgets should err on the safe
    side" (tokens.estimate_tokens). Fourteen tool results of ordinary numeric output (a CSV
    query result, a JSON array of numbers, an access log), each shown whole, give a request the
    kernel states as `normal` (59,319 of a 120,000 hard limit). Any tokenizer under o200k's
    pattern needs at least 118,259 (CSV) or 118,920 (log) tokens, past the critical level
    (116,000) and within 2% of the hard limit, or 216,447 (number array), 1.7x the whole
    128,000 window, so the provider refuses a request stated as half-empty. The
    estimate counts four ASCII characters a token whatever they are, while o200k and cl100k cut
    every run of digits into chunks of at most three and every punctuation run apart from the
    digits next to it. Expected: the figure the kernel states is not below what the request
    must cost (so its level is at least the true one), e.g. the estimate counting a text as at
    least its pre-tokenizer chunks."""
    rng = random.Random(21)
    for _ in range(14):
        ctx.observe("tool_result", make(rng))
    encoding = ctx.encode()  # (the reviewed code stated `normal` here: no longer asserted)
    floor = o200k_minimum(encoding.text)
    assert floor <= encoding.tokens, (
        f"the kernel states {encoding.tokens} tokens ({encoding.pressure.level}); any o200k "
        f"tokenizer counts at least {floor} (hard {encoding.pressure.budget.hard}, window "
        f"{encoding.pressure.budget.window})"
    )


def _texts() -> dict[str, str]:
    rng = random.Random(7)
    return {
        "digit-run": "".join(str(rng.randrange(10)) for _ in range(12_000)),
        "hex": rng.randbytes(4_000).hex(),
        "base64": base64.b64encode(rng.randbytes(6_000)).decode(),
        "minified-json": json.dumps(
            [{"id": i, "v": round(rng.random(), 3), "ok": True} for i in range(300)],
            separators=(",", ":"),
        ),
        "iso-times": ",".join("2026-12-01T21:18:21.429638+00:00" for _ in range(300)),
        "arabic-digit-list": "١،٢،٣،" * 1_000,
        "control-and-digits": "\x001" * 5_000,
    }


@pytest.mark.parametrize("name", list(_texts()))
def test_the_estimate_is_never_below_what_any_o200k_tokenizer_must_count(name: str) -> None:
    """encoding/tokens.py: "A deliberate over-estimate for most tokenizers: budgets should err
    on the safe side" (decisions.md: "deliberately on the high side"). For these ordinary tool
    outputs it is below the provable minimum of every tokenizer under o200k's pattern, before
    any vocabulary is chosen: digit runs 1.33x, base64 1.8x, hex 2.2x, minified JSON 1.7x, ISO
    times 2.4x, an Arabic-digit list 1.5x, NUL-separated digits 4x (one token a character, the
    estimate a quarter). No margin anywhere covers it (the pressure slack is 48 tokens), and
    until a provider reports usage (a refused request reports none) nothing corrects it.
    Expected: the estimate of a text is at least its o200k pre-tokenizer chunk count."""
    text = _texts()[name]
    floor = o200k_minimum(text)
    assert estimate_tokens(text) >= floor, (
        f"{name}: estimated {estimate_tokens(text)}, any o200k tokenizer needs {floor} "
        f"({floor / estimate_tokens(text):.2f}x)"
    )


def test_context_status_states_the_level_the_agent_is_measured_at(
    ctx: morphz.Context, workspace: Path
) -> None:
    """docs/cli.md: `context status` and `context budget` "show the context's own budget with
    the plain estimate" while the agent's requests are counted with the calibration the context
    has learnt for its model (kept in the store, `calibration:<model>`). After one activation on
    numeric tool output whose provider reported the tokens it really counted (here the o200k
    floor), the agent's next request states `critical` (118,940 tokens: maintenance), while
    `morphz context status` says `notice` (71,557, "estimated"): an operator watching status
    sees 60% of the pressure and the wrong level. Documented, but wrong
    for a user: the store holds the calibration; status could apply the context's most recently
    learnt one (and say so), or show both figures."""
    rng = random.Random(5)
    for _ in range(17):
        ctx.observe("tool_result", _csv(rng))
    stated: list[tuple[str, int]] = []

    def provider(request: ModelRequest) -> ModelResponse:
        level, tokens = _FIGURE.findall(request.encoding)[-1]
        stated.append((level, int(tokens)))
        sent = [PREAMBLE, request.encoding, *(t.text for t in request.tools)]
        return ModelResponse("ok", usage=Usage(sum(o200k_minimum(t) for t in sent) + 8, 5))

    for _ in range(2):
        result = asyncio.run(make_engine(ctx, FunctionModel(provider), workspace).run("sum it"))
        assert result.state == "delivered", result.reason
    agent_level, agent_tokens = stated[-1]
    status = ctx.status().pressure
    assert status["level"] == agent_level, (
        f"status: {status['level']} {status['tokens']} ({status['kind']}); the agent's last "
        f"request: {agent_level} {agent_tokens}"
    )
