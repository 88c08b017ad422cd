"""``morphz demo``: the seed's deployment example as a full agent run, on a fresh store.

A user asks for a deployment; the agent (a scripted model, so no key and no network) records
Hangzhou as the target region in ``deployment/target-v1``; a ``read_file`` of the production
configuration in a temporary workspace shows Shanghai; the agent commits the seed's second
transaction — derive the new target from that evidence, declare it supersedes the old one, retire
the old frame and the processed observation — and replies. The demo prints the steps, the
commits, each context object before and after that commit, and the audit. Every value shown is
read back from the library.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import morphz
from morphz.interfaces.render import lifecycle
from morphz.interfaces.tables import table
from morphz.results import Mind
from morphz.runtime.agent_tools import agent_tools
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel, ScriptedModel
from morphz.runtime.tools.base import ToolRegistry
from morphz.runtime.tools.workspace import workspace_tools

Echo = Callable[[str], None]

OLD, NEW = "deployment/target-v1", "deployment/target-v2"
USER_MESSAGE = "Please prepare the deployment of the checkout service to production."
CONFIG_FILE = "# current production configuration\nregion: cn-shanghai\nreplicas: 3\n"
REPLY = (
    "The deployment of the checkout service will target cn-shanghai, as the current production "
    "configuration says (not cn-hangzhou, which I had assumed)."
)

FIRST_TX = """(context-tx
  (base-version {version})
  (reason "plan the deployment the user asked for")
  (derive deployment/target-v1
    (from {last_ref})
    (fact (region cn-hangzhou)))
  (derive deployment/plan
    (from {last_ref})
    (steps "confirm the production configuration" "build" "roll out")))"""

# The seed's second transaction (tests/test_seed_examples.py SEED_TX_2); the scripted model fills
# in the actual base version and the ref of the configuration it read.
SECOND_TX = """(context-tx
  (base-version {version})
  (reason "current production configuration confirms cn-shanghai")
  (derive deployment/target-v2
    (from {last_ref} deployment/target-v1)
    (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1)
  (retire deployment/target-v1)
  (retire {last_ref}))"""


def run(echo: Echo, *, keep: Path | None = None) -> bool:
    """Run the demo in a temp folder (deleted afterwards), or at ``keep`` (kept). True when the
    final audit passes."""
    if keep is not None:
        ok = run_at(keep, echo)
        where = shlex.quote(str(keep))
        echo(f"\nthe store is kept at {keep}: try `morphz context show --db {where}`")
        return ok
    with tempfile.TemporaryDirectory(prefix="morphz-demo-") as folder:
        return run_at(Path(folder) / "morphz.db", echo)


def run_at(path: Path, echo: Echo) -> bool:
    echo(f"Morphz demo: the seed's deployment example on a fresh store at {path}\n")
    with tempfile.TemporaryDirectory(prefix="morphz-demo-ws-") as folder, morphz.open(path) as db:
        workspace = Path(folder)
        (workspace / "production.yaml").write_text(CONFIG_FILE, encoding="utf-8")
        ctx = db.context(create=True)
        return asyncio.run(_story(ctx, workspace, echo))


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _script() -> list[dict[str, Any]]:
    """The agent's part, as a scripted model plays it: {version} and {last_ref} are filled from
    the encoding it is shown (the kernel's mind version, the newest inbox observation)."""
    return [
        {"tool_calls": [{"name": "context_tx", "arguments": {"tx": FIRST_TX}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "production.yaml"}}]},
        {"tool_calls": [{"name": "context_tx", "arguments": {"tx": SECOND_TX}}]},
        {"reply": REPLY},
    ]


async def _story(ctx: morphz.Context, workspace: Path, echo: Echo) -> bool:
    scripted = ScriptedModel(_script(), name="scripted:demo")
    minds: list[Mind] = []

    async def agent(request: ModelRequest) -> ModelResponse:
        response = await scripted.request(request)
        if any("supersedes" in call.arguments for call in response.tool_calls):
            minds.append(ctx.mind(all_observations=True))  # the seed commit is next
        return response

    tools = ToolRegistry()
    for tool in [*agent_tools(), *workspace_tools()]:
        tools.add(tool)
    engine = Engine(ctx, FunctionModel(agent, "scripted:demo"), tools, RuntimeConfig(workspace))
    echo("An agent run with a scripted model (no key, no network); the workspace holds")
    echo(f"production.yaml:\n{_indent(CONFIG_FILE)}\n")
    result = await engine.run(USER_MESSAGE)
    _narrate(ctx, echo)
    if result.state != "delivered" or not minds:
        echo(f"the activation {result.state}: {result.reason}")
        return False
    after = ctx.mind(all_observations=True)
    config_ref = _config_ref(ctx)
    echo("")
    echo(before_after(ctx, minds[0], after, config_ref))
    receipt = _last_receipt(ctx)
    echo(
        f"\nreceipt: {receipt['tx_id']} as {receipt['event']}, version "
        f"{receipt['before_version']} -> {receipt['after_version']} "
        f"({'rebased' if receipt['rebased'] else 'not rebased'}), "
        f"{len(receipt['changes'])} changes:"
    )
    for change in receipt["changes"]:
        echo(f"  {change['op']} {change['target']}: {change['change']}")
    report = ctx.audit()
    verdict = "ok" if report.ok else "FAILED: " + "; ".join(report.differences)
    echo(f"audit: {verdict} ({report.events} events replayed)")
    return report.ok


def _narrate(ctx: morphz.Context, echo: Echo) -> None:
    """What happened, event by event."""
    step = 0
    for event in ctx.events():
        if event.kind == "user_message":
            echo(f"{event.ref} user_message:\n{_indent(event.text or '')}")
        elif event.kind == "model_reply":
            step += 1
            calls = (event.payload or {}).get("tool_calls", [])
            for call in calls:
                echo(f"\nstep {step}: the agent calls {call['name']}")
                args = json.loads(call["arguments"])
                echo(_indent(args["tx"] if "tx" in args else json.dumps(args)))
            if event.text:
                echo(f"\nstep {step}: the agent replies ({event.ref}):\n{_indent(event.text)}")
        elif event.kind == "context_tx_committed":
            payload = event.payload or {}
            echo(f"   -> committed {payload.get('tx_id')} as {event.ref}, version {event.version}")
        elif event.kind == "tool_result":
            echo(f"   -> {event.ref} tool_result ({len(event.text or '')} characters)")


def _config_ref(ctx: morphz.Context) -> str:
    return next(e.ref for e in ctx.events() if e.kind == "tool_result")


def _last_receipt(ctx: morphz.Context) -> dict[str, Any]:
    receipts = [e for e in ctx.events() if e.kind == "tx_receipt"]
    data: dict[str, Any] = json.loads(receipts[-1].text or "{}")
    return data


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
