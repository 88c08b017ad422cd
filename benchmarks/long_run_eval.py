"""Long-run evaluation: facts that change over many activations, sessions and restarts.

    .venv/bin/python benchmarks/long_run_eval.py --model builtin [--quick] [--out FILE]
    ANTHROPIC_API_KEY=... .venv/bin/python benchmarks/long_run_eval.py \\
        --model anthropic:claude-sonnet-4-5 --steps 40 --out long-run.json

A long task of ``--steps`` steps on one context with a small token budget. Each step injects a
batch of observations (routine logs, tool listings, chat) and, on a seeded schedule, the first
value of a tracked setting ("remember: the KEY is VALUE") or a new value of one ("update: the KEY
is now VALUE"); then one activation asks the agent to keep working. Steps rotate over several
sessions, and the store is closed and reopened every few steps (a process restart). Every few
steps the agent is asked for the current value of the setting changed most recently; at the end,
for the current value and for the whole history of every setting.

Prints one JSON document to stdout (progress on stderr): the figures of pressure_eval.py (peak
request tokens beside the hard limit, transactions, observations retired, frames, model calls,
provider tokens, failures), the answers (current and history), how each superseded value was
handled (the frame holding the latest value was revised, or supersedes the frames that held the
older ones, rather than old and new frames both active and unrelated), and the prefix reuse of
the requests actually sent. ``--model builtin`` runs offline. See docs/evals.md.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import morphz
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
    current_question,
    fact_observation,
    filler_observation,
    history_answered,
    history_question,
    update_observation,
)
from morphz.errors import MorphzError
from morphz.observe import Observation

FULL = {
    "steps": 60,
    "keys": 5,
    "max_values": 5,
    "sessions": 3,
    "session_len": 5,
    "restart_every": 20,
    "question_every": 6,
    "budget": 8000,
}
QUICK = FULL | {"steps": 16, "keys": 3, "max_values": 3, "restart_every": 8, "question_every": 5}
TAG = "long-run-eval"


@dataclass(frozen=True, slots=True)
class Tracked:
    """A setting whose value changes: ``values[i]`` arrives at step ``steps[i]``."""

    key: str
    values: tuple[str, ...]
    steps: tuple[int, ...]

    def as_of(self, step: int) -> tuple[str, ...]:
        return tuple(v for v, s in zip(self.values, self.steps, strict=True) if s <= step)


def build_world(
    seed: int, steps: int, keys: int, max_values: int
) -> tuple[list[Tracked], list[list[Observation]]]:
    """``keys`` settings with 2-``max_values`` values each, the first in the first quarter of
    the run, the updates at seeded later steps; 3-5 routine observations per step."""
    rng = random.Random(seed)
    values = Values(rng)
    tracked: list[Tracked] = []
    for index, key in enumerate(rng.sample(KEYS, keys)):
        count = rng.randint(2, max_values)
        first = index * max(1, steps // 4) // keys
        later = sorted(rng.sample(range(first + 1, steps), count - 1))
        tracked.append(Tracked(key, tuple(values.new() for _ in range(count)), (first, *later)))
    batches: list[list[Observation]] = []
    for step in range(steps):
        items = [filler_observation(rng) for _ in range(rng.randint(3, 5))]
        for t in tracked:
            for number, (value, at) in enumerate(zip(t.values, t.steps, strict=True)):
                if at == step:
                    make = fact_observation if number == 0 else update_observation
                    items.insert(rng.randrange(len(items) + 1), make(rng, t.key, value))
        batches.append(items)
    return tracked, batches


def step_prompt(step: int, total: int) -> str:
    return (
        f"Step {step} of {total} of the long task: new observations arrived (change notices, "
        "logs, tool output, chat). Keep working: keep the current value of every setting you "
        "were told about in your mind; when a value changes, revise the frame or supersede it "
        "(keeping the earlier values findable) rather than keeping two unrelated frames; keep "
        "your context within its budget by retiring what you have processed. Reply briefly."
    )


def session_of(step: int, cfg: dict[str, Any]) -> str:
    return f"ops-{(step // cfg['session_len']) % cfg['sessions'] + 1}"


def revision_report(mind: morphz.Mind, t: Tracked) -> dict[str, Any]:
    """How the mind holds the changes of ``t``: the active frames with the latest value, whether
    one of them was revised or reaches the frames of older values through ``supersedes``, and
    active frames that still show only an older value with no supersedes edge onto them."""
    latest, old = t.values[-1].lower(), [v.lower() for v in t.values[:-1]]
    frames = {f.id: f for f in mind.frames}
    edges = [(s, o) for s, r, o in mind.relations if r == "supersedes"]
    superseded = {o for _, o in edges}
    holding = active_frames_with(mind, t.values[-1])
    stale = [
        f.id
        for f in mind.frames
        if f.lifecycle == "active"
        and latest not in f.body.lower()
        and any(v in f.body.lower() for v in old)
        and f.id not in superseded
    ]
    reached: set[str] = set()
    stack = list(holding)
    while stack:
        current = stack.pop()
        for subject, obj in edges:
            if subject == current and obj not in reached:
                reached.add(obj)
                stack.append(obj)
    related = [v for v in old if any(i in frames and v in frames[i].body.lower() for i in reached)]
    revised = any(frames[i].revision > 1 for i in holding)
    return {
        "key": t.key,
        "values": len(t.values),
        "latest_in_active_frames": holding,
        "revised": revised,
        "older_values_reached_by_supersedes": len(related),
        "stale_unrelated_frames": stale,
        "handled": bool(holding) and not stale and (revised or len(related) == len(old)),
    }


async def evaluate(
    harness: Harness, tracked: list[Tracked], batches: list[list[Observation]], cfg: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    total = len(batches)
    midrun: list[dict[str, Any]] = []
    for step, batch in enumerate(batches):
        if step and step % cfg["restart_every"] == 0:
            harness.restart()
            log(TAG, f"step {step}: store closed and reopened")
        session = session_of(step, cfg)
        harness.inject(batch, "feed")
        result = await harness.activate(f"step-{step + 1}", step_prompt(step + 1, total), session)
        turn = harness.turns[-1].to_dict()
        log(
            TAG,
            f"step {step + 1}/{total} ({session}): {result.state} in {result.steps} steps, "
            f"peak {turn['tokens_peak']} tokens, {turn['maintenance_requests']} maintenance",
        )
        if (step + 1) % cfg["question_every"] == 0:
            changed = [t for t in tracked if t.as_of(step)]
            if changed:
                # the setting whose value changed most recently (the first such on a tie)
                newest = max(changed, key=lambda t: max(s for s in t.steps if s <= step))
                expected = newest.as_of(step)
                reply = await ask(harness, f"mid-{step + 1}", current_question(newest.key))
                midrun.append(
                    {
                        "step": step + 1,
                        "key": newest.key,
                        "expected": expected[-1],
                        "answered": answered(reply, expected[-1]),
                        "stale": _stale(reply, expected),
                        "reply": _clip(reply),
                    }
                )
    mind = harness.ctx.mind()
    revisions = [revision_report(mind, t) for t in tracked]
    final: list[dict[str, Any]] = []
    for t in tracked:
        current = await ask(harness, f"final-current:{t.key}", current_question(t.key))
        history = await ask(harness, f"final-history:{t.key}", history_question(t.key))
        final.append(
            {
                "key": t.key,
                "values": list(t.values),
                "latest_in_active_frames": active_frames_with(mind, t.values[-1]),
                "current_answered": answered(current, t.values[-1]),
                "current_stale": _stale(current, t.values),
                "history_answered": history_answered(history, t.values),
                "history_values_named": sum(1 for v in t.values if answered(history, v)),
                "current_reply": _clip(current),
                "history_reply": _clip(history),
            }
        )
    return midrun, final, revisions


async def ask(harness: Harness, label: str, question: str) -> str | None:
    result = await harness.activate(label, question, "quiz")
    return result.reply if result.state == "delivered" else None


def _stale(reply: str | None, values: tuple[str, ...]) -> bool:
    """The reply names an older value and not the latest one."""
    return not answered(reply, values[-1]) and any(answered(reply, v) for v in values[:-1])


def _clip(reply: str | None) -> str | None:
    return reply[:300] if reply is not None else None


def run(args: Any) -> dict[str, Any]:
    cfg = eval_config(args, FULL, QUICK, ("steps", "budget"))
    tracked, batches = build_world(args.seed, cfg["steps"], cfg["keys"], cfg["max_values"])
    budget = eval_budget(cfg["budget"])
    model = Recorder(resolve_model(args.model))
    started = time.perf_counter()
    values = sum(len(t.values) for t in tracked)
    log(
        TAG,
        f"model {model.name}: {cfg['steps']} steps, {len(tracked)} settings with {values} "
        f"values, hard limit {budget.hard} tokens",
    )
    (midrun, final, revisions), figures, trajectory = run_harness(
        args, model, budget, "long-run", lambda harness: evaluate(harness, tracked, batches, cfg)
    )
    updated = [r for r in revisions if r["values"] > 1]
    facts = {
        "tracked_keys": len(tracked),
        "values_planted": values,
        "updates": values - len(tracked),
        "latest_in_mind": sum(1 for f in final if f["latest_in_active_frames"]),
        "current_answered": sum(1 for f in final if f["current_answered"]),
        "current_stale": sum(1 for f in final if f["current_stale"]),
        "history_answered": sum(1 for f in final if f["history_answered"]),
        "midrun_questions": len(midrun),
        "midrun_answered": sum(1 for m in midrun if m["answered"]),
        "midrun_stale": sum(1 for m in midrun if m["stale"]),
        "final": final,
        "midrun": midrun,
    }
    revised = {
        "keys_updated": len(updated),
        "handled": sum(1 for r in updated if r["handled"]),
        "revised": sum(1 for r in updated if r["revised"]),
        "superseded": sum(
            1 for r in updated if r["older_values_reached_by_supersedes"] == r["values"] - 1
        ),
        "with_stale_unrelated_frames": sum(1 for r in updated if r["stale_unrelated_frames"]),
        "details": revisions,
    }
    parts = {"facts": facts, "revisions": revised, **figures, "trajectory": trajectory}
    return report("long-run", args, cfg, started, **parts)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, help="steps of the task, 8 or more (default 60, quick 16)")
    p.add_argument("--budget", type=int, help="hard token limit of the context (default 8000)")
    args = p.parse_args(argv)
    if args.steps is not None and args.steps < 8:
        p.error("--steps must be 8 or more")
    check_args(p, args, ("budget", "step_limit"))
    try:
        doc = run(args)
    except MorphzError as exc:
        log(TAG, f"error: {exc.message}")
        return 2
    emit(doc, args.out)
    facts, rev = doc["facts"], doc["revisions"]
    log(
        TAG,
        f"done in {doc['seconds']} s: latest value in mind for {facts['latest_in_mind']}/"
        f"{facts['tracked_keys']}, {rev['handled']}/{rev['keys_updated']} updated settings "
        f"revised or superseded, prefix reuse {doc['prefix_reuse']['rate']}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
