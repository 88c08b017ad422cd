"""Context pressure evaluation: does an agent keep what matters in a small context?

    .venv/bin/python benchmarks/pressure_eval.py --model builtin [--quick] [--out FILE]
    OPENAI_BASE_URL=http://localhost:11434/v1 .venv/bin/python benchmarks/pressure_eval.py \\
        --model openai:qwen2.5:14b --budget 12000 --out pressure.json

A context gets a small token budget (``--budget``, the hard limit). A synthetic project history,
generated from ``--seed``, is injected in ``--batches`` batches of observations (log bursts, tool
listings, chat, and planted facts: "remember: the KEY is VALUE", or a "note:" inside a tool's
output). After each batch one activation asks the agent to keep working and to keep its context
maintained; when the request reaches critical pressure the engine itself holds the activation in
maintenance (only context_tx and recall) until a commit brings pressure back to normal. At the end
every planted fact is asked about, one question per activation.

Prints one JSON document to stdout (progress on stderr): peak request tokens beside the hard
limit, observations retired, frames at the end, facts preserved (value in an active frame after
the last batch) and answered (value in the reply), transactions committed and refused, model
calls, the input/output tokens the provider reported, failed activations, and the trajectory of
every activation. ``--model builtin`` runs offline with the deterministic agent of
``_eval_agent.py``. See docs/evals.md.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from _eval_common import (
    Harness,
    Recorder,
    active_frames_with,
    check_args,
    emit,
    eval_budget,
    eval_config,
    log,
    parser,
    report,
    resolve_model,
    run_harness,
)
from _eval_world import (
    KEYS,
    Values,
    answered,
    batch_question,
    current_question,
    fact_observation,
    filler_observation,
)
from morphz.errors import MorphzError
from morphz.observe import Observation

FULL = {"facts": 12, "batches": 8, "filler": 14, "budget": 8000}
QUICK = {"facts": 6, "batches": 4, "filler": 14, "budget": 8000}
TAG = "pressure-eval"


@dataclass(frozen=True, slots=True)
class Planted:
    key: str
    value: str
    batch: int


def build_world(
    seed: int, facts: int, batches: int, filler: int
) -> tuple[list[Planted], list[list[Observation]]]:
    """``facts`` planted facts spread evenly over ``batches`` batches of ``filler`` routine
    observations each, at seeded positions."""
    rng = random.Random(seed)
    values = Values(rng)
    planted = [
        Planted(key, values.new(), index * batches // facts)
        for index, key in enumerate(rng.sample(KEYS, facts))
    ]
    out: list[list[Observation]] = []
    for number in range(batches):
        items = [filler_observation(rng) for _ in range(filler)]
        for fact in planted:
            if fact.batch == number:
                items.insert(
                    rng.randrange(len(items) + 1), fact_observation(rng, fact.key, fact.value)
                )
        out.append(items)
    return planted, out


async def evaluate(harness: Harness, planted: list[Planted], batches: list[list[Observation]]):
    """Inject, maintain, then ask; the per-fact details."""
    total = len(batches)
    carriers: dict[str, str] = {}
    for number, batch in enumerate(batches, start=1):
        refs = harness.inject(batch, "history")
        for fact in planted:
            if fact.batch == number - 1:
                carriers[fact.key] = next(
                    ref
                    for ref, item in zip(refs, batch, strict=True)
                    if f"the {fact.key} is {fact.value}" in item.text
                )
        result = await harness.activate(f"batch-{number}", batch_question(number, total), "work")
        turn = harness.turns[-1].to_dict()
        log(
            TAG,
            f"batch {number}/{total}: {result.state} in {result.steps} steps, "
            f"peak {turn['tokens_peak']} tokens, {turn['maintenance_requests']} maintenance",
        )
    mind = harness.ctx.mind()
    details: list[dict[str, Any]] = []
    for fact in planted:
        result = await harness.activate(f"ask:{fact.key}", current_question(fact.key), "quiz")
        details.append(
            {
                "key": fact.key,
                "value": fact.value,
                "batch": fact.batch + 1,
                "planted_in": carriers[fact.key],
                "in_active_frames": active_frames_with(mind, fact.value),
                "answered": answered(result.reply, fact.value),
                "reply": (result.reply or "")[:300] if result.state == "delivered" else None,
                "state": result.state,
            }
        )
    log(TAG, f"asked {len(planted)} questions")
    return details


def run(args: Any) -> dict[str, Any]:
    cfg = eval_config(args, FULL, QUICK, ("facts", "batches", "filler", "budget"))
    planted, batches = build_world(args.seed, cfg["facts"], cfg["batches"], cfg["filler"])
    budget = eval_budget(cfg["budget"])
    model = Recorder(resolve_model(args.model))
    started = time.perf_counter()
    log(
        TAG,
        f"model {model.name}: {len(planted)} facts in {len(batches)} batches, hard {budget.hard}",
    )
    details, figures, trajectory = run_harness(
        args, model, budget, "pressure", lambda harness: evaluate(harness, planted, batches)
    )
    in_mind = sum(1 for d in details if d["in_active_frames"])
    correct = sum(1 for d in details if d["answered"])
    facts = {
        "planted": len(planted),
        "in_mind": in_mind,
        "answered": correct,
        "in_mind_and_answered": sum(1 for d in details if d["in_active_frames"] and d["answered"]),
        "details": details,
    }
    return report("pressure", args, cfg, started, facts=facts, **figures, trajectory=trajectory)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, help="hard token limit of the context (default 8000)")
    p.add_argument("--batches", type=int, help="history batches (default 8, quick 4)")
    p.add_argument("--facts", type=int, help="planted facts, 1-20 (default 12, quick 6)")
    p.add_argument("--filler", type=int, help="routine observations per batch (default 14)")
    args = p.parse_args(argv)
    if args.facts is not None and not 1 <= args.facts <= len(KEYS):
        p.error(f"--facts must be 1-{len(KEYS)}")
    check_args(p, args, ("budget", "batches", "filler", "step_limit"))
    try:
        doc = run(args)
    except MorphzError as exc:
        log(TAG, f"error: {exc.message}")
        return 2
    emit(doc, args.out)
    facts = doc["facts"]
    log(
        TAG,
        f"done in {doc['seconds']} s: {facts['in_mind']}/{facts['planted']} facts in mind, "
        f"{facts['answered']} answered, peak {doc['peak_tokens']['request_estimate']} of "
        f"{doc['peak_tokens']['hard_limit']} tokens",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
