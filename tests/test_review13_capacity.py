"""Review 13, capacity, token accounting and ContextDelta (src/morphz/capacity.py,
encoding/tokens.py, encoding/delta.py, encoding/blocks.py, runtime/requests.py,
runtime/costs.py, runtime/batches.py; issue 4 items 4-6). Each test fails on the code it was
written against because of the defect its docstring describes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from agents import invoke, make_engine
from morphz.capacity import Budget
from morphz.interfaces.cli import main
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel

SRC = str(Path(morphz.__file__).resolve().parents[1])
HANG_GUARD = 60  # seconds: only stops a hung child from hanging the suite
_VERSION = re.compile(r"\(mind-version (\d+)\)")


def _tx(request: ModelRequest, ops: str, number: int) -> ModelResponse:
    version = _VERSION.findall(request.encoding)[-1]
    text = f'(context-tx (base-version {version}) (reason "done with it") {ops})'
    return ModelResponse(
        None, (ToolCall(f"call_{number}", "context_tx", json.dumps({"tx": text})),)
    )


# --- maintenance: when work resumes --------------------------------------------------------------


def test_work_resumes_after_maintenance_when_a_small_window_never_reaches_normal(
    ctx: morphz.Context, workspace: Path
) -> None:
    """An 8k-window model (window 8,192, output reserve 1,024, maintenance reserve 512: hard
    7,168, notice 3,584, critical 6,656). The protocol, kernel and work tool schemas alone are
    about 4,000 tokens, so even an empty context is at notice pressure. An observation pushes the
    request to critical: the activation enters maintenance, and the agent retires it at once,
    leaving nothing but the floor. The engine resumes work only when pressure is back to
    *normal* (engine.py `_decide`: ``if level != "normal" ... return encoding``), which this
    budget can never reach: every later request of the activation offers only context_tx and
    recall, so the agent cannot read a file or run a command again in this activation however
    much it maintains. Expected: once maintenance has brought the request back to its floor
    (well below warning, far below critical), the external tools come back."""
    ctx.set_budget(Budget(window=8_192, output_reserve=1_024, reserve=512))
    big = ctx.observe("external_event", "build log: status ok " * 600).ref  # ~3,000 tokens
    offered: list[set[str]] = []

    def model(request: ModelRequest) -> ModelResponse:
        offered.append({t.name for t in request.tools})
        if len(offered) == 1:
            return _tx(request, f"(retire {big})", 1)
        return ModelResponse("done")

    engine = make_engine(ctx, FunctionModel(model), workspace)
    result = asyncio.run(engine.run("read the log and summarise it", session="ops"))
    assert result.state == "delivered", result.reason
    assert "read_file" not in offered[0]  # critical: maintenance, as it should be
    floor = engine.encoding("ops").pressure
    assert floor.level == "notice" and floor.tokens < floor.budget.warning  # nothing left to do
    assert "read_file" in offered[1], (floor.to_dict(), sorted(offered[1]))


# --- the budget refusal ---------------------------------------------------------------------------


def _notes(items: int) -> str:
    """A create of one frame of ``items`` items of 40 words (about 53 tokens each)."""
    body = " ".join(f'(item{i} "{"word " * 40}")' for i in range(items))
    return f"(create notes {body})"


def test_a_commit_the_budget_refusal_lets_through_leaves_a_request_that_can_be_served(
    ctx: morphz.Context, workspace: Path
) -> None:
    """The `budget` refusal exists so that no commit leaves the context where "no request could
    be served" (committing.py `_check_room`, docs/decisions.md "budget refusals"). It compares
    frames + protocol with the critical level (hard - reserve), but a request also carries the
    kernel, the tool schemas (even the maintenance set: context_tx and recall), the system
    preamble and the framing: several hundred tokens more. With a small maintenance reserve
    (limit 6,000, reserve 500: critical 5,500) the agent's own context_tx commits a frame that
    the refusal accepts, and the very next request fails: "even the minimum maintenance request
    needs ... tokens of 6000", whose advice (retire or revise frames) the agent can no longer
    follow, since it is sent nothing more. Expected: a commit is refused when what it leaves
    cannot be served, so the agent is told (a `budget` result) and its activation goes on."""
    ctx.set_budget(Budget(window=128_000, output_reserve=8_000, configured=6_000, reserve=500))
    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        return _tx(request, _notes(60), 1) if len(asked) == 1 else ModelResponse("done")

    engine = make_engine(ctx, FunctionModel(model), workspace)
    result = asyncio.run(engine.run("write the notes down", session="ops"))
    assert result.state == "delivered", result.reason


def test_context_tx_refuses_by_the_budget_the_configuration_gives_the_agent(env: Path) -> None:
    """`morphz context encoding`, `exec` and `chat` apply the configuration's [budget] keys over
    the context's budget (docs/cli.md), and the agent's context_tx refuses a growing commit by
    that budget. `morphz context tx` ignores the configuration (cli.py: ``ctx.commit(text,
    session=session)``): with ``[budget] limit = 6000`` it commits frames of about 4,300
    tokens against the stored hard limit of 120,000, after which every `exec` on the context
    fails before sending anything ("even the minimum maintenance request needs ..."). Expected:
    the refusal uses the budget the runtime will measure requests with, code `budget`."""
    (env / "morphz.toml").write_text("[budget]\nlimit = 6000\nreserve = 500\n", encoding="utf-8")
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    (env / "big.tx").write_text(f"(context-tx (base-version 0) {_notes(80)})", encoding="utf-8")
    result = invoke(
        ["context", "tx", "--file", str(env / "big.tx"), "--db", db, "--format", "json"]
    )
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["error"]["code"] == "budget"


def test_a_budget_whose_critical_level_is_below_the_empty_request_still_offers_the_tools(
    ctx: morphz.Context, workspace: Path
) -> None:
    """``[budget] window = 8192, output_reserve = 1024`` (an 8k local model; the maintenance
    reserve keeps its default of 4,000): hard 7,168, critical 3,168. Budget accepts it, the
    engine runs with it, yet the protocol, kernel and work tool schemas alone are about 4,000
    tokens: every request of every activation, even on an empty context, is at critical
    pressure, so the engine (engine.py `_decide`) puts each activation in maintenance before
    its first request and the agent is never offered read_file, exec or any external tool. The
    run is "delivered" and nothing says why the tools never came. Expected: either such a
    budget is refused up front (InputError saying the critical level is below what any
    request needs), or the first request on an empty context offers the work tools."""
    budget = Budget(window=8_192, output_reserve=1_024)
    offered: list[set[str]] = []

    def model(request: ModelRequest) -> ModelResponse:
        offered.append({t.name for t in request.tools})
        return ModelResponse("done")

    engine = make_engine(ctx, FunctionModel(model), workspace, budget=budget)
    try:
        result = asyncio.run(engine.run("list the files", session="ops"))
    except morphz.InputError:
        return  # refused up front: fine
    assert result.state == "delivered", result.reason
    assert "read_file" in offered[0], (engine.encoding("ops").pressure.to_dict(), offered)


# --- what an impossible budget says --------------------------------------------------------------


def test_a_window_below_the_output_reserve_is_explained_by_the_window(env: Path) -> None:
    """`morphz context budget --window 6000` on a new context (output reserve 8,000) is refused,
    rightly, but the message says "the hard limit (-2000 tokens: min(budget, window - output
    reserve)) must exceed the maintenance reserve (4000): raise the budget or lower the
    reserve" (capacity.py `Budget.__post_init__`). A negative hard limit, and "raise the
    budget", which cannot help: no --limit raises hard above window - output reserve. Expected:
    the message names what binds (the window leaves nothing above the output reserve) and the
    remedies that can help (a larger window, a smaller output reserve)."""
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    result = invoke(["context", "budget", "--window", "6000", "--db", db, "--format", "json"])
    assert result.exit_code == 1
    message = json.loads(result.output)["error"]["message"]
    assert "-2000" not in message, message
    assert "lower the output reserve" in message or "raise the window" in message, message


def test_a_configured_limit_that_makes_no_budget_is_named_as_the_file_names_it(env: Path) -> None:
    """docs/decisions.md: "Configuration errors name the key as the file spells it ([budget]
    limit)". ``[budget] limit = 3000`` (below the context's maintenance reserve of 4,000) is
    refused by `exec` as "the configured budget (configured 3000): ..." (capacity.py
    `budget_over`, which shows the Budget field, not the file's key): the file has no
    `configured`. Expected: the error names ``[budget] limit``."""
    (env / "morphz.toml").write_text("[budget]\nlimit = 3000\n", encoding="utf-8")
    (env / "s.json").write_text(json.dumps([{"reply": "ok"}]), encoding="utf-8")
    db = str(env / "m.db")
    result = invoke(["exec", "hi", "--model", f"scripted:{env / 's.json'}", "--db", db])
    assert result.exit_code == 1
    assert "configured 3000" not in result.output, result.output
    assert "limit" in result.output.replace("hard limit", ""), result.output


# --- concurrency: changing one budget key ---------------------------------------------------------


def test_two_operators_changing_different_budget_keys_at_once_keep_both_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`morphz context budget CTX --window N` reads the stored budget (``ctx.budget()``, a read
    transaction), changes the key it was given and writes the whole budget back
    (``ctx.set_budget``, another transaction): interfaces/cli_encoding.py:131-140. When another
    process changes another key in between (`morphz context budget CTX --reserve 3000`, run
    from a script or a second terminal), that change is silently overwritten with the value
    read before it: a lost update, and both commands printed success. Expected: each command
    changes only the keys it names, as one write (read and written under the writer lock), so
    both changes stand. The other command runs to completion in a child process right after
    this command's read, the interleaving that loses it."""
    store = tmp_path / "store.db"
    with morphz.open(store) as db:
        db.context("c", create=True)
    read_budget = morphz.Context.budget
    other: list[subprocess.CompletedProcess[str]] = []

    def budget_then_another_operator(self: morphz.Context) -> morphz.Budget:
        current = read_budget(self)
        if not other:  # once: the other operator's whole command, between read and write
            argv = [sys.executable, "-m", "morphz", "context", "budget", "c", "--reserve", "3000"]
            env = {**os.environ, "PYTHONPATH": SRC}
            other.append(
                subprocess.run(
                    [*argv, "--db", str(store)],
                    env=env,
                    check=False,
                    capture_output=True,
                    text=True,
                    timeout=HANG_GUARD,
                )
            )
        return current

    monkeypatch.setattr(morphz.Context, "budget", budget_then_another_operator)
    result = CliRunner().invoke(
        main, ["context", "budget", "c", "--window", "150000", "--db", str(store)]
    )
    assert result.exit_code == 0, result.output
    assert other and other[0].returncode == 0, other[0].stderr if other else "not run"
    monkeypatch.undo()

    with morphz.open(store) as db:
        budget = db.context("c").budget()
    assert budget.window == 150_000
    assert budget.reserve == 3_000, "the other operator's --reserve 3000 was overwritten"


# --- the fixes' own edges ---------------------------------------------------------------------


def test_the_commit_allowance_covers_the_smallest_maintenance_request() -> None:
    """Without a runtime's measured floor, the `budget` refusal counts the protocol and
    MINIMUM_ALLOWANCE beside the frames: that must cover the smallest maintenance request the
    command line's tools make (kernel, empty regions, context_tx and recall, preamble, framing)."""
    from morphz.committing import MINIMUM_ALLOWANCE
    from morphz.encoding.protocol import PROTOCOL_TOKENS
    from morphz.interfaces.cli_agent import build_tools
    from morphz.runtime.config import Settings
    from morphz.runtime.floor import empty_request, request_options

    floor = empty_request(request_options(build_tools(Settings()), maintenance=True))
    assert PROTOCOL_TOKENS < floor <= PROTOCOL_TOKENS + MINIMUM_ALLOWANCE


def test_update_budget_and_view_change_only_the_keys_named(ctx: morphz.Context) -> None:
    ctx.update_budget({"reserve": 3_000})
    ctx.update_budget({"window": 150_000, "configured": 60_000})
    budget = ctx.update_budget({"configured": None})
    assert (budget.window, budget.reserve, budget.configured) == (150_000, 3_000, None)
    assert ctx.budget() == budget
    ctx.update_view({"session_count": 7})
    view = ctx.update_view({"preview_threshold": 900})
    assert (view.session_count, view.preview_threshold) == (7, 900) and ctx.view() == view
    with pytest.raises(morphz.InputError, match="unknown budget field"):
        ctx.update_budget({"windw": 1})


def test_a_budget_under_which_an_empty_request_is_at_warning_is_said(env: Path) -> None:
    """`context budget` says on stderr (JSON stays clean) what a budget too small for even an
    empty request to be under warning does to maintenance."""
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    result = CliRunner().invoke(
        main, ["context", "budget", "--limit", "5000", "--reserve", "200", "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert "work resumes below the critical level" in result.stderr, result.stderr
    result = CliRunner().invoke(main, ["context", "budget", "--limit", "3000", "--db", db])
    assert result.exit_code == 0, result.output
    assert "pressure never starts maintenance" in result.stderr, result.stderr
    fine = CliRunner().invoke(main, ["context", "budget", "--limit", "60000", "--db", db])
    assert fine.exit_code == 0 and fine.stderr == "", fine.stderr


def test_a_budget_option_that_makes_no_budget_is_named_as_given(env: Path) -> None:
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    result = invoke(["context", "encoding", "--budget", "3000", "--db", db])
    assert result.exit_code == 1
    assert "--budget = 3000" in result.output and "configured" not in result.output, result.output
