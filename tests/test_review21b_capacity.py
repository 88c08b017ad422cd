"""Review 21b, capacity under content unlike English prose: how far the no-network estimate falls
below what a real BPE tokenizer must count, and what the runtime then promises wrongly.

The real o200k_base vocabulary needs the network, but its pre-tokenizer pattern is known
(``tokens.O200K_PATTERN``, pinned to the installed tiktoken by test_tokenizer.py) and BPE never
merges across the pattern's chunks. So the number of chunks is a floor that no vocabulary under
that pattern can go below: :func:`o200k_minimum` counts a text with the real tiktoken and a
vocabulary holding every chunk of the text as one token, the most generous one there can be
(cl100k's pattern, which Llama 3 also uses, splits digits and punctuation the same way). Each
test fails on the code as reviewed; its docstring states the expected behaviour.

Fix 21b kept only the status test here: the estimate's tests (finding 1) are left out until
the estimate counts chunks (see the fix's report)."""

from __future__ import annotations

import asyncio
import importlib
import random
import re
from pathlib import Path
from typing import Any

import morphz
from agents import make_engine
from morphz.encoding.tokens import O200K_PATTERN
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
