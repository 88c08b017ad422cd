"""``morphz demo``: the seed's deployment example, step by step, on a fresh store.

A user asks for a deployment; the agent records Hangzhou as the target region in
``deployment/target-v1``; the production configuration arrives as a tool result saying
Shanghai; the agent commits the seed's second transaction (with the real base version and the
real ref of the configuration observation) and the demo prints each context object before and
after that commit. Every value shown is read back from the library; no model, no network.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import morphz
from morphz.interfaces.render import lifecycle, table
from morphz.results import Mind

Echo = Callable[[str], None]

OLD, NEW = "deployment/target-v1", "deployment/target-v2"
USER_MESSAGE = "Please prepare the deployment of the checkout service to production."
CONFIG_RESULT = "production.yaml (current production configuration)\nregion: cn-shanghai"

FIRST_TX = """(context-tx
  (base-version {version})
  (reason "plan the deployment the user asked for")
  (derive deployment/target-v1
    (from {user})
    (fact (region cn-hangzhou)))
  (derive deployment/plan
    (from {user})
    (steps "confirm the production configuration" "build" "roll out")))"""

# The seed's second transaction (tests/test_seed_examples.py SEED_TX_2), with the actual base
# version and the actual ref of the configuration observation substituted.
SECOND_TX = """(context-tx
  (base-version {version})
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from {config} deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire {config}))"""


def run(echo: Echo, *, keep: Path | None = None) -> bool:
    """Run the demo in a temp folder (deleted afterwards), or at ``keep`` (kept). True when the
    final audit passes."""
    if keep is not None:
        ok = run_at(keep, echo)
        echo(f"\nthe store is kept at {keep}: try `morphz context show --db {keep}`")
        return ok
    with tempfile.TemporaryDirectory(prefix="morphz-demo-") as folder:
        return run_at(Path(folder) / "morphz.db", echo)


def run_at(path: Path, echo: Echo) -> bool:
    echo(f"Morphz demo: the seed's deployment example on a fresh store at {path}\n")
    with morphz.open(path) as db:
        ctx = db.context(create=True)
        return _story(ctx, echo)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _story(ctx: morphz.Context, echo: Echo) -> bool:
    user = ctx.observe("user_message", USER_MESSAGE)
    echo(f"1. The user asks for a deployment; it arrives as {user.ref} (user_message):")
    echo(_indent(USER_MESSAGE))

    first = FIRST_TX.format(version=ctx.version, user=user.ref)
    echo(f"\n2. The agent records its plan, citing {user.ref}:")
    echo(_indent(first))
    receipt = ctx.commit(first)
    echo(f"   -> committed {receipt.tx_id} as {receipt.event}, version {receipt.after_version}")

    config = ctx.observe("tool_result", CONFIG_RESULT)
    echo(f"\n3. A tool reads the production configuration; it arrives as {config.ref}:")
    echo(_indent(CONFIG_RESULT))

    second = SECOND_TX.format(version=ctx.version, config=config.ref)
    echo("\n4. The agent commits the seed's transaction (base version and ref filled in):")
    echo(_indent(second))
    before = ctx.mind(all_observations=True)
    receipt = ctx.commit(second)
    after = ctx.mind(all_observations=True)

    echo("")
    echo(before_after(ctx, before, after, config.ref))
    rebased = "rebased" if receipt.rebased else "not rebased"
    echo(
        f"\nreceipt: {receipt.tx_id} as {receipt.event}, version {receipt.before_version} -> "
        f"{receipt.after_version} ({rebased}), {len(receipt.effects)} changes:"
    )
    for effect in receipt.effects:
        echo(f"  {effect.op} {effect.target}: {effect.change}")
    report = ctx.audit()
    verdict = "ok" if report.ok else "FAILED: " + "; ".join(report.differences)
    echo(f"audit: {verdict} ({report.events} events replayed)")
    return report.ok


def _frame_cell(mind: Mind, frame_id: str) -> str:
    frame = mind.frame(frame_id)
    if frame is None:
        return "does not exist"
    lines = [f"{lifecycle(frame)}, revision {frame.revision}", frame.body]
    if frame.sources:
        lines.append("from " + " ".join(frame.sources))
    lines.extend(f"{rel} {obj}" for subj, rel, obj in mind.relations if subj == frame_id)
    return "\n".join(lines)


def _observation_cell(ctx: morphz.Context, mind: Mind, ref: str) -> str:
    obs = mind.observation(ref)
    if obs is None:
        return "not in the mind"
    if obs.lifecycle == "active":
        return f"active in context ({obs.kind}, {obs.chars} chars)"
    text = " ".join((ctx.event(ref).text or "").split())
    return f"{obs.lifecycle}; still readable by ref:\n{text}"


def _others(before: Mind, after: Mind, skip: set[str]) -> tuple[str, str]:
    """Every other frame and observation: its state before, and after whether it changed."""
    was: list[str] = []
    now: list[str] = []
    for frame in before.frames:
        if frame.id not in skip:
            was.append(f"{frame.id}: {lifecycle(frame)}, revision {frame.revision}")
            now.append(f"{frame.id}: " + _compare(frame, after.frame(frame.id)))
    for obs in before.observations:
        if obs.ref not in skip:
            was.append(f"{obs.ref} {obs.kind}: {obs.lifecycle}")
            now.append(f"{obs.ref} {obs.kind}: " + _compare(obs, after.observation(obs.ref)))
    return "\n".join(was) or "nothing else", "\n".join(now) or "nothing else"


def _compare(earlier: object, later: object) -> str:
    if later == earlier:
        return "unchanged"
    return "gone" if later is None else "changed"


def before_after(ctx: morphz.Context, before: Mind, after: Mind, config_ref: str) -> str:
    """The seed's table: Context object | Before commit | After commit."""
    other_before, other_after = _others(before, after, {OLD, NEW, config_ref})
    rows = [
        (f"Old frame {OLD}", _frame_cell(before, OLD), _frame_cell(after, OLD)),
        (f"New frame {NEW}", _frame_cell(before, NEW), _frame_cell(after, NEW)),
        (
            f"Configuration observation {config_ref}",
            _observation_cell(ctx, before, config_ref),
            _observation_cell(ctx, after, config_ref),
        ),
        ("Other cognition", other_before, other_after),
    ]
    headers = ("Context object", "Before commit", "After commit")
    return table(headers, rows, grid=True, max_width=40)
