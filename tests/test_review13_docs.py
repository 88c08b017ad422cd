"""Review 13, docs truth: README.md's commands, docs/cli.md's examples and exit codes, the advice
error messages give (followed literally), the protocol region of docs/example-encoding.txt and
docs/ARCHITECTURE.md, against what the code does. Each test fails on the code it was written
against; its docstring says what should happen. No network, real SQLite, no sleeping."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import morphz

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def morphz_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``morphz ARGS...`` as a user runs it: a real process, this checkout's sources."""
    full = {k: v for k, v in os.environ.items() if k != "MORPHZ_DB"}
    full.update({"PYTHONPATH": str(SRC), "HOME": str(cwd / "home"), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def suggested(message: str) -> list[str]:
    """The first `morphz ...` command a message tells the user to run, as argv (shell words)."""
    found = re.search(r"`(morphz [^`]+)`", message)
    assert found, f"no suggested command in {message!r}"
    return shlex.split(found.group(1))[1:]  # without the program name


def test_recover_advice_for_an_unknown_activation_lists_that_contexts_running_ones(
    tmp_path: Path,
) -> None:
    """`morphz context recover ops --activation ID` with an ID that is not running says
    "`morphz context recover` lists the running ones" (src/morphz/interfaces/cli.py:421). Run
    literally, that command recovers and lists context-default, not ops: in a store without
    context-default it fails with not-found (exit 1); with one, it silently shows another
    context's activations (and may interrupt its orphans). `context requests` names the context
    in its own advice (runtime/report.py:132). Expected: the advice names the context,
    `morphz context recover ops`, so following it lists ops's running activation."""
    db = tmp_path / "s.db"
    ctx = morphz.open(str(db)).context("ops", create=True)
    root = ctx.observe("user_message", "prepare the deployment")
    running = ctx.start_activation("default", root=root.ref, objective="deploy")  # owner: alive
    env = {"MORPHZ_DB": str(db)}
    refused = morphz_cli(
        "context", "recover", "ops", "--activation", "act-nope", cwd=tmp_path, env=env
    )
    assert refused.returncode == 1, refused.stderr
    follow = morphz_cli(*suggested(refused.stderr), cwd=tmp_path, env=env)
    # actual: exit 1, "no context 'context-default' in this store"
    assert follow.returncode == 0, follow.stderr
    assert running in follow.stdout


def test_demo_keep_advice_works_for_a_path_with_a_space(tmp_path: Path) -> None:
    """`morphz demo --keep PATH` ends with "try `morphz context show --db PATH`"
    (src/morphz/demo.py:69), PATH printed as given. For a path with a space ("my runs/demo.db",
    a common folder name) the suggested command, run as written, passes `--db my` and an extra
    argument: it fails (exit 1, "no store at .../my"). Expected: the path is shell-quoted
    (shlex.quote), so the suggested command opens the kept store."""
    (tmp_path / "my runs").mkdir()
    kept = morphz_cli("demo", "--keep", "my runs/demo.db", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    follow = morphz_cli(*suggested(kept.stdout.splitlines()[-1]), cwd=tmp_path)
    # actual: exit 1, error (store): no store at .../my
    assert follow.returncode == 0, follow.stderr
    assert "deployment/target-v2" in follow.stdout


@pytest.mark.usefixtures("env")
def test_scripted_last_ref_is_the_inbox_last_observation_even_after_reading_an_encoding(
    tmp_path: Path,
) -> None:
    """docs/cli.md ("A scripted model"): `{last_ref}` is replaced "by the ref of the inbox's
    last observation". The scripted model finds refs with a regex over the whole encoding text
    (src/morphz/runtime/models/scripted.py:22, `_REFS` in `_fill`), so `(observation @eN `
    inside an observation's quoted text, or inside a frame body in the mind region (which comes
    after the inbox), counts as an inbox item. A script that reads this repository's own
    docs/example-encoding.txt with read_file and then derives from `{last_ref}` cites @e12 (a
    ref inside the file) instead of the tool_result it just read: the derive is refused
    (not-found), or, in a longer history, silently cites the wrong evidence. Expected: only the
    inbox region's own items count (e.g. read the `(inbox ...)` region with the S-expression
    reader, or match only at the start of a line of the inbox region)."""
    ws = tmp_path / "ws"
    (ws / "example.txt").write_text(
        (ROOT / "docs" / "example-encoding.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )
    script = tmp_path / "steps.json"
    derive = (
        "(context-tx (base-version {version}) (derive notes/read (from {last_ref}) (fact read)))"
    )
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "example.txt"}}]},
                {"tool_calls": [{"name": "context_tx", "arguments": {"tx": derive}}]},
                {"reply": "read it"},
            ]
        ),
        encoding="utf-8",
    )
    db = str(tmp_path / "s.db")
    done = morphz_cli(
        "exec", "read the example", "--model", f"scripted:{script}", "--workspace", "ws",
        "--db", db, "--format", "json", cwd=tmp_path, env={"MORPHZ_DB": db},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)["event_records"]
    read = [e["ref"] for e in records if e["kind"] == "tool_result"]
    assert len(read) == 1
    frames = morphz.open(db).context("context-default").mind().frames
    sources = [f.sources for f in frames if f.id == "notes/read"]
    # actual: {last_ref} became @e12, a ref printed inside the file: the derive is refused
    # (not-found: "@e12 does not exist") and no frame is made
    assert sources == [(read[0],)], (sources, read)


@pytest.mark.usefixtures("env")
def test_the_scripts_end_message_counts_one_step_in_the_singular(tmp_path: Path) -> None:
    """A one-step script run past its end fails the activation with "the script has only 1
    steps" (src/morphz/runtime/models/scripted.py:110), the reason `exec` prints and the event
    records; the out-of-range `{ref:N}` message beside it was already fixed to say "1
    observation". Expected: "the script has only 1 step"."""
    script = tmp_path / "one.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "list_files", "arguments": {}}]}]), encoding="utf-8"
    )
    db = str(tmp_path / "s.db")
    done = morphz_cli(
        "exec", "hi", "--model", f"scripted:{script}", "--workspace", "ws", "--db", db,
        cwd=tmp_path, env={"MORPHZ_DB": db},
    )  # fmt: skip
    assert done.returncode == 1
    assert "the script has only 1 step" in done.stdout + done.stderr
    assert "1 steps" not in done.stdout + done.stderr


def test_architecture_commit_flow_names_the_lookup_the_commit_makes() -> None:
    """docs/ARCHITECTURE.md, "How a commit flows", step 3: the store looks up the last version of
    each boundary the tx touches "(`boundary_versions`, one indexed query)". The commit
    (src/morphz/committing.py:52) calls `WriteTxn.changed_boundaries(boundaries, since)`;
    `boundary_versions` is the audit's read of every boundary row (audit.py:214), not a lookup
    of the tx's boundaries. The flow also no longer says where the `budget` refusal happens
    (committing._check_room), nor that committing.py, not the store, builds the event and
    receipt. Expected: step 3 names `changed_boundaries`."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    flow = doc[doc.index("## How a commit flows") : doc.index("## The head hash")]
    step3 = next(line for line in flow.splitlines() if line.startswith("3."))
    step3 += flow.split(step3, 1)[1].split("\n4.", 1)[0]
    committing = (SRC / "morphz" / "committing.py").read_text(encoding="utf-8")
    named = re.findall(r"`(\w+)`", step3)
    lookups = [n for n in named if n not in ("decide_rebase",) and not n.startswith("mind")]
    assert lookups, step3
    for name in lookups:
        assert name in committing, f"step 3 names {name!r}, which the commit does not call"
