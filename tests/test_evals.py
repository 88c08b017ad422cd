"""The real-model evaluations (benchmarks/pressure_eval.py, benchmarks/long_run_eval.py), run
offline: the builtin deterministic agent in --quick mode, a scripted model that runs out of
steps, a model SPEC without its key, and the pieces the reports are computed with (the request
recorder and the revise/supersede analysis). The scripts are not test modules; they are loaded
here from their file paths. The conftest guard fails any network connection."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import morphz
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.agent_tools import CONTEXT_TX, RECALL
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import (
    ContextTooLongError,
    ModelRequest,
    ModelResponse,
    ToolSchema,
    Usage,
)
from morphz.runtime.models.scripted import FunctionModel

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
EXEC = ToolSchema("exec", "run a command", {"type": "object"})  # an external tool


def _load(module: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded  # dataclasses look their module up while the class is built
    spec.loader.exec_module(loaded)
    return loaded


world = _load("_eval_world", "_eval_world")  # the names the scripts import them by
agent_module = _load("_eval_agent", "_eval_agent")
common = _load("_eval_common", "_eval_common")
pressure_eval = _load("morphz_bench_pressure_eval", "pressure_eval")
long_run_eval = _load("morphz_bench_long_run_eval", "long_run_eval")

COMMON_FIELDS = {
    "model_calls",
    "maintenance_requests",
    "requests_by_level",
    "provider_errors",
    "peak_tokens",
    "provider_usage",
    "prefix_reuse",
    "budget",
    "transactions",
    "observations",
    "frames_at_end",
    "relations_at_end",
    "activations",
    "failures",
    "restarts",
    "events",
    "audit_ok",
    "trajectory",
    "seconds",
}


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder with an empty home (no morphz.toml is read) and no model keys."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run_main(module: ModuleType, argv: list[str], out: Path, capsys: Any) -> dict[str, Any]:
    assert module.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert json.loads(printed) == doc  # the same document on stdout and in --out
    return doc


def check_common(doc: dict[str, Any]) -> None:
    """What every builtin run must show: requests under the hard limit, maintenance that was
    actually exercised, commits and no refusals, every activation delivered, a clean audit."""
    assert set(doc) >= COMMON_FIELDS
    peak = doc["peak_tokens"]
    assert peak["hard_limit"] == doc["budget"]["hard"] == 8000
    assert 0 < peak["request_estimate"] <= peak["hard_limit"]
    assert peak["under_hard_limit"] is True
    assert peak["provider_input"] is None  # a function model reports no usage
    assert doc["provider_usage"]["input_tokens"] is None
    assert doc["maintenance_requests"] > 0  # critical pressure was reached and worked through
    assert doc["requests_by_level"].get("critical", 0) > 0
    assert doc["model_calls"] == sum(doc["requests_by_level"].values())
    assert doc["model_calls"] == sum(t["requests"] for t in doc["trajectory"])
    assert doc["prefix_reuse"]["requests"] == doc["model_calls"]
    assert 0 < doc["prefix_reuse"]["rate"] < 1
    # the layouts lose at most part of a block where a prefix breaks, and a cache that keeps
    # every earlier entry also reads prefixes the last request alone would not offer
    assert doc["prefix_reuse"]["rate"] - 0.01 <= doc["prefix_reuse"]["mark_only_cache"] < 1
    assert doc["transactions"]["committed"] > 0
    assert doc["transactions"]["refused"] == 0
    observations = doc["observations"]
    assert observations["injected"] > 0
    assert 0 < observations["injected_retired"] <= observations["injected"]
    assert observations["retired"] >= observations["injected_retired"]
    assert doc["activations"]["run"] == doc["activations"]["delivered"] == len(doc["trajectory"])
    assert doc["failures"] == []
    assert doc["provider_errors"] == {}
    assert doc["audit_ok"] is True
    assert doc["seconds"] < 20


# --- the builtin agent, --quick ------------------------------------------------------------


def test_pressure_eval_builtin_keeps_every_planted_fact(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_main(pressure_eval, ["--model", "builtin", "--quick"], isolated / "p.json", capsys)
    assert (doc["eval"], doc["model"], doc["mode"]) == ("pressure", "builtin", "quick")
    check_common(doc)
    facts = doc["facts"]
    planted = pressure_eval.QUICK["facts"]
    assert facts["planted"] == facts["in_mind"] == facts["answered"] == planted
    assert facts["in_mind_and_answered"] == planted
    assert len(facts["details"]) == planted
    for fact in facts["details"]:
        assert fact["in_active_frames"] == [f"fact/{world.slug(fact['key'])}/1"]
        assert fact["value"] in fact["reply"] and fact["answered"] is True
    assert doc["frames_at_end"] == {"active": planted}
    # one activation per batch, then one per question
    labels = [t["label"] for t in doc["trajectory"]]
    batches = pressure_eval.QUICK["batches"]
    assert labels[:batches] == [f"batch-{n}" for n in range(1, batches + 1)]
    assert len(labels) == batches + planted
    assert not list(isolated.glob("*.db"))  # the store lived in a temporary folder


def test_the_builtin_agent_reads_context_delta_requests(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --delta, requests after the first of an activation carry increments; the builtin
    agent applies them like a model would and keeps every fact."""
    # a budget with room for more than one step between level changes: at the default (8,000)
    # the fixed part of a request (protocol, kernel, schemas) leaves about one increment
    argv = ["--model", "builtin", "--quick", "--budget", "10000", "--delta"]
    doc = run_main(pressure_eval, argv, isolated / "p.json", capsys)
    assert doc["config"]["delta"] is True
    assert doc["prefix_reuse"]["requests_with_increments"] >= 1
    facts = doc["facts"]
    planted = pressure_eval.QUICK["facts"]
    assert facts["in_mind_and_answered"] == planted
    plain = run_main(pressure_eval, argv[:-1], isolated / "q.json", capsys)
    assert plain["config"]["delta"] is False
    assert plain["prefix_reuse"]["requests_with_increments"] == 0
    # the same agent decisions, whatever the request's shape
    assert [t["label"] for t in doc["trajectory"]] == [t["label"] for t in plain["trajectory"]]


def test_long_run_eval_builtin_supersedes_instead_of_duplicating(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_main(long_run_eval, ["--model", "builtin", "--quick"], isolated / "l.json", capsys)
    assert (doc["eval"], doc["model"], doc["mode"]) == ("long-run", "builtin", "quick")
    check_common(doc)
    facts, revisions = doc["facts"], doc["revisions"]
    keys = long_run_eval.QUICK["keys"]
    assert facts["tracked_keys"] == keys and facts["updates"] >= keys  # every key changes
    assert facts["latest_in_mind"] == facts["current_answered"] == keys
    assert facts["history_answered"] == keys
    assert facts["current_stale"] == 0
    assert facts["midrun_questions"] > 0
    assert facts["midrun_answered"] == facts["midrun_questions"]
    for final in facts["final"]:
        assert final["history_values_named"] == len(final["values"])
    assert revisions["keys_updated"] == revisions["handled"] == revisions["superseded"] == keys
    assert revisions["with_stale_unrelated_frames"] == 0
    # each superseded value left a retired frame and a supersedes edge behind
    assert doc["frames_at_end"] == {"active": keys, "retired": facts["updates"]}
    assert doc["relations_at_end"] == facts["updates"]
    # several sessions, and the store was closed and reopened on the way
    assert doc["restarts"] == (long_run_eval.QUICK["steps"] - 1) // 8
    sessions = {t["session"] for t in doc["trajectory"]}
    assert {"ops-1", "ops-2", "ops-3", "quiz"} <= sessions


def test_builtin_runs_are_deterministic(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same seed gives the same report (bar the wall time); another seed another history."""
    argv = ["--model", "builtin", "--quick", "--seed", "3"]
    first = run_main(long_run_eval, argv, isolated / "a.json", capsys)
    second = run_main(long_run_eval, argv, isolated / "b.json", capsys)
    del first["seconds"]
    del second["seconds"]
    assert first == second
    other, _ = long_run_eval.build_world(4, 16, 3, 3)
    same, _ = long_run_eval.build_world(3, 16, 3, 3)
    assert same != other
    assert [t.values[-1] for t in same] == [r["values"][-1] for r in first["facts"]["final"]]


def test_db_option_keeps_the_store(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = isolated / "kept"
    argv = ["--model", "builtin", "--quick", "--batches", "2", "--db", str(kept)]
    doc = run_main(pressure_eval, argv, isolated / "p.json", capsys)
    with morphz.open(kept / "eval.db") as db:
        ctx = db.context("eval-pressure")
        assert ctx.audit().ok
        assert len(ctx.events()) == doc["events"]
    with pytest.raises(SystemExit) as refused:  # the folder exists now: not overwritten
        pressure_eval.main(argv)
    assert refused.value.code == 2
    assert "exists" in capsys.readouterr().err


# --- other models ------------------------------------------------------------------------


def test_a_scripted_model_that_runs_out_is_reported_as_failures(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = isolated / "three.json"
    script.write_text(json.dumps([{"reply": "ok"}] * 3), encoding="utf-8")
    argv = ["--model", f"scripted:{script}", "--quick"]
    doc = run_main(pressure_eval, argv, isolated / "p.json", capsys)
    activations = pressure_eval.QUICK["batches"] + pressure_eval.QUICK["facts"]
    assert doc["activations"] == {"run": activations, "delivered": 3, "failed": activations - 3}
    assert doc["provider_errors"] == {"provider-bad-response": activations - 3}
    reason = "failed: model provider error (provider-bad-response): the script has only 3 steps"
    assert doc["failures"] == [
        {"reason": reason.replace("3", "N"), "count": activations - 3, "example": reason}
    ]
    assert doc["facts"]["in_mind"] == doc["facts"]["answered"] == 0
    assert doc["transactions"]["committed"] == 0
    assert doc["model_calls"] == activations


def test_a_model_spec_without_its_key_is_a_clear_error(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert long_run_eval.main(["--model", "openai:some-model", "--quick"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "OPENAI_API_KEY" in captured.err
    assert pressure_eval.main(["--model", "nonsense:x", "--quick"]) == 2
    assert "unknown model kind" in capsys.readouterr().err


def test_arguments_are_checked(isolated: Path) -> None:
    with pytest.raises(SystemExit):
        pressure_eval.main(["--model", "builtin", "--facts", "21"])
    with pytest.raises(SystemExit):
        long_run_eval.main(["--model", "builtin", "--steps", "3"])
    with pytest.raises(SystemExit):
        long_run_eval.main(["--quick"])  # --model is required


# --- the recorder -----------------------------------------------------------------------------


def test_recorder_measures_the_requests_sent_and_the_usage_reported() -> None:
    answers = iter([Usage(100, 10, 0), Usage(120, 12, 90), Usage(140, 14, 100)])

    def reply(request: ModelRequest) -> ModelResponse:
        return ModelResponse("ok", usage=next(answers))

    recorder = common.Recorder(FunctionModel(reply, name="fake"))
    assert recorder.name == "fake"
    work = (CONTEXT_TX, RECALL, EXEC)
    texts = [
        "(kernel (pressure (level notice) (tokens 4100) (figure estimated)))",
        "(kernel (pressure (level critical) (tokens 6500) (figure estimated)))",
        "(kernel (pressure (level critical) (tokens 6400) (figure estimated)))",
    ]
    tools = [work, (CONTEXT_TX, RECALL), (CONTEXT_TX, RECALL)]
    for text, offered in zip(texts, tools, strict=True):
        asyncio.run(recorder.request(ModelRequest(text, offered)))
    figures = recorder.figures(hard=7000)
    assert figures["model_calls"] == 3
    assert figures["maintenance_requests"] == 2
    assert figures["requests_by_level"] == {"notice": 1, "critical": 2}
    peak = figures["peak_tokens"]
    assert peak["kernel_figure"] == 6500
    assert peak["provider_input"] == 140
    assert peak["request_estimate"] == max(
        common.request_tokens(ModelRequest(t, o)) for t, o in zip(texts, tools, strict=True)
    )
    usage = figures["provider_usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (360, 36)
    assert usage["cached_input_tokens"] == 190
    assert usage["cached_share_after_first"] == round(190 / 260, 4)
    # prefix reuse over tools + encoding, the first request excluded
    sent = [
        common.request_text(ModelRequest(t, o)).encode() for t, o in zip(texts, tools, strict=True)
    ]
    reused = sum(_shared_prefix(p, q) for p, q in itertools.pairwise(sent))
    assert figures["prefix_reuse"]["rate"] == round(reused / sum(len(s) for s in sent[1:]), 4)


def _shared_prefix(a: bytes, b: bytes) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def test_recorder_records_a_provider_error_and_raises_it() -> None:
    def refuse(request: ModelRequest) -> ModelResponse:
        raise ContextTooLongError("too long")

    recorder = common.Recorder(FunctionModel(refuse))
    with pytest.raises(ContextTooLongError):
        asyncio.run(recorder.request(ModelRequest("(x)", ())))
    assert recorder.figures(hard=1000)["provider_errors"] == {"provider-context-too-long": 1}


# --- the revise / supersede analysis ---------------------------------------------------------

VALUES = ("amber-otter-101", "pale-yak-202", "jade-newt-303")


def _mind_after(db: morphz.Database, name: str, txs: list[str]) -> morphz.Mind:
    """A context with one observation per value, then ``txs`` committed in order."""
    ctx = db.context(name, create=True)
    for value in VALUES:
        ctx.observe("external_event", f"update: the backup bucket is now {value}")
    for tx in txs:
        ctx.commit(f"(context-tx (base-version {ctx.version}) {tx})")
    return ctx.mind()


def _report(mind: morphz.Mind) -> dict[str, Any]:
    tracked = long_run_eval.Tracked("backup bucket", VALUES, (0, 1, 2))
    report: dict[str, Any] = long_run_eval.revision_report(mind, tracked)
    return report


def test_revision_report_tells_revised_superseded_and_duplicated(db: morphz.Database) -> None:
    v1, v2, v3 = (f'(value "{v}")' for v in VALUES)
    chain = _report(
        _mind_after(
            db,
            "chain",
            [
                f"(derive b/1 (from @e1) {v1})",
                f'(reason "newer") (derive b/2 (from @e2 b/1) {v2}) '
                "(relate b/2 supersedes b/1) (retire b/1)",
                f'(reason "newer") (derive b/3 (from @e3 b/2) {v3}) '
                "(relate b/3 supersedes b/2) (retire b/2)",
            ],
        )
    )
    assert chain["handled"] and not chain["revised"]
    assert chain["older_values_reached_by_supersedes"] == 2
    assert chain["latest_in_active_frames"] == ["b/3"]

    revised = _report(
        _mind_after(
            db,
            "revised",
            [f"(derive b (from @e1) {v1})", f"(revise b {v2})", f"(revise b (from @e3) {v3})"],
        )
    )
    assert revised["handled"] and revised["revised"]
    assert revised["older_values_reached_by_supersedes"] == 0

    duplicated = _report(
        _mind_after(
            db,
            "duplicated",
            [f"(derive b/1 (from @e1) {v1})", f"(derive b/new (from @e3) {v3})"],
        )
    )
    assert not duplicated["handled"]
    assert duplicated["stale_unrelated_frames"] == ["b/1"]

    broken_chain = _report(  # the first value's frame was retired without any relation
        _mind_after(
            db,
            "broken",
            [
                f"(derive b/1 (from @e1) {v1})",
                f'(reason "gone") (retire b/1) (derive b/2 (from @e2) {v2})',
                f'(reason "newer") (derive b/3 (from @e3 b/2) {v3}) '
                "(relate b/3 supersedes b/2) (retire b/2)",
            ],
        )
    )
    assert not broken_chain["handled"] and not broken_chain["stale_unrelated_frames"]
    assert broken_chain["older_values_reached_by_supersedes"] == 1

    lost = _report(_mind_after(db, "lost", [f"(derive b/1 (from @e1) {v1})"]))
    assert not lost["handled"] and lost["latest_in_active_frames"] == []


# --- the builtin agent on its own --------------------------------------------------------------


def test_builtin_agent_answers_only_from_its_mind(db: morphz.Database) -> None:
    """Asked about a key its mind does not hold, it says so; a fact still only in the inbox is
    first derived into a frame, then answered."""
    ctx = db.context("agent", create=True)
    agent = agent_module.BuiltinAgent()
    ctx.observe("user_message", "Ana: remember: the backup bucket is amber-otter-101.")
    ctx.observe("user_message", world.current_question("hotfix branch"), session="quiz")
    first = agent(ModelRequest(ctx.encode(session="quiz").text, (CONTEXT_TX, RECALL)))
    assert first.text is None and first.tool_calls[0].name == "context_tx"
    tx = json.loads(first.tool_calls[0].arguments)["tx"]
    assert "(derive fact/backup-bucket/1 (from @e1)" in tx
    assert "(retire" in tx  # only context_tx and recall offered: it is maintaining
    assert "@e2" not in tx  # its own root request is never retired
    ctx.commit(tx, session="quiz")
    second = agent(ModelRequest(ctx.encode(session="quiz").text, (CONTEXT_TX, RECALL)))
    assert second.text == "I do not know the hotfix branch: it is not in my mind."
    ctx.observe("user_message", world.current_question("backup bucket"), session="quiz")
    work = (CONTEXT_TX, RECALL, EXEC)  # not maintaining: the earlier question stays in view
    third = agent(ModelRequest(ctx.encode(session="quiz").text, work))
    assert third.text == "The backup bucket is amber-otter-101."


# --- what the long run relies on across restarts ---------------------------------------------


def test_a_new_engine_keeps_the_calibration_the_context_learned(
    ctx: morphz.Context, tmp_path: Path
) -> None:
    """The long run reopens its store with a new engine (a restart). Found while building it:
    an engine that forgot the calibration sent the first request after a restart uncalibrated
    (a provider counting 1.3x the estimate counted 6,166 tokens against a 6,000 hard limit);
    the engine now loads and saves the calibration in the context, per model."""
    ctx.set_budget(common.eval_budget(6000))
    requests: list[ModelRequest] = []

    def provider(request: ModelRequest) -> ModelResponse:
        requests.append(request)  # it counts 1.3 tokens where the estimate counts one
        return ModelResponse("ok", usage=Usage(round(common.request_tokens(request) * 1.3), 5))

    def engine() -> Engine:
        config = RuntimeConfig(workspace=tmp_path)
        return Engine(ctx, FunctionModel(provider), build_tools(Settings()), config)

    before = engine()
    assert asyncio.run(before.run("first")).state == "delivered"
    assert asyncio.run(before.run("second")).state == "delivered"
    assert "(figure estimated)" in requests[0].encoding  # nothing reported yet
    assert "(figure calibrated)" in requests[1].encoding
    after = engine()  # the same context, as a restarted process opens it
    assert asyncio.run(after.run("third")).state == "delivered"
    assert "(figure calibrated)" in requests[2].encoding
