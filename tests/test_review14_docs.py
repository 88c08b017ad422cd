"""Review 14, docs truth: README.md, docs/cli.md and docs/ARCHITECTURE.md against what the code
does after the fourteenth session. Each test reads the claim from the doc and checks it against
the behaviour (real processes where users have them, real SQLite, no network, no timing), so it
fails on the code it was written against and keeps the doc honest afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import morphz
from morphz.interfaces.approval_text import shown_value
from morphz.runtime import config
from stores import rebuild_tables

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
CLI_MD = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


# The real entry point (cli.run, as the morphz script and python -m morphz run it) on
# `context recall-index rebuild`, made to stop in its first batch, after the building table was
# created and committed, and say so on stderr: the parent then stops it as `timeout` or a service
# manager would, with no race.
REBUILD_THAT_WAITS = """
import sys, threading
import morphz.recall.maintain as maintain
from morphz.interfaces import cli

real = maintain.event_docs

def waits(*args, **kwargs):
    print("FILLING", file=sys.stderr, flush=True)
    threading.Event().wait()  # until a signal stops the process
    return real(*args, **kwargs)

maintain.event_docs = waits
sys.argv = ["morphz", "context", "recall-index", "rebuild", "--db", sys.argv[1]]
cli.run()
"""


def test_a_rebuild_stopped_by_sigterm_leaves_no_building_table(tmp_path: Path) -> None:
    """docs/cli.md, exit codes: commands other than exec, chat and demo "under SIGTERM or SIGHUP
    die of it at once; their writes are all or nothing", and `recall-index rebuild` is "safe to
    interrupt ... Ctrl-C drops the table it was building". A rebuild is many writes: stopped by
    SIGTERM (`timeout`, a CI runner, systemd) it dies between them and leaves its building table,
    up to a whole index's size (100,000 documents of a 200,000-event context in a manual run),
    which only `recall-index clean` or the next rebuild drops and every audit warns of. It should
    clean up as it does for Ctrl-C (SIGTERM/SIGHUP handled like SIGINT, as exec/chat/demo are),
    then end by the signal."""
    assert "their writes are all or nothing" in _flat(CLI_MD)
    assert "Ctrl-C drops the table it was building" in _flat(CLI_MD)
    store = tmp_path / "morphz.db"
    with morphz.open(store) as db:
        ctx = db.context("context-default", create=True)
        for i in range(3):
            ctx.observe("tool_result", f"deploy log line {i}")
    env = {k: v for k, v in os.environ.items() if k != "MORPHZ_DB"}
    env.update({"PYTHONPATH": str(SRC), "HOME": str(tmp_path / "home")})
    proc = subprocess.Popen(
        [sys.executable, "-c", REBUILD_THAT_WAITS, str(store)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "FILLING"
        assert len(rebuild_tables(store)) == 1  # the rebuild is under way
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM  # ends by the signal, as documented
    assert rebuild_tables(store) == []  # actual: ['recall_fts_1_rebuild_...'] left behind


def test_the_approval_prompt_counts_white_space_runs_only_past_the_documented_length() -> None:
    """docs/cli.md, `morphz chat`: the approval prompt shows "a run of more than 40 of one white
    space character counted". A run of exactly 40 is counted too (approval_text.py:19-21, the
    regex `(\\s)\\1{39,}` matches 40), so the prompt disagrees with the doc at the boundary. Either
    the doc says "40 or more", or LONG_RUN counts from 41."""
    found = re.search(
        r"a run of more than (\d+) of one white space character counted", _flat(CLI_MD)
    )
    assert found, "cli.md no longer states the length"
    documented = int(found.group(1))
    at_the_limit = "a" + " " * documented + "b"
    past_it = "a" + " " * (documented + 1) + "b"
    assert shown_value(past_it) == f"'a' + ' ' * {documented + 1} + 'b'"
    assert shown_value(at_the_limit) == repr(at_the_limit)  # actual: "'a' + ' ' * 40 + 'b'"


def test_cli_md_names_every_configuration_key() -> None:
    """docs/cli.md, "Running an agent", says the commands read the configuration "for the model,
    the step limit, the token budget and the tool policies", but never names `step_limit` or the
    `[policies]` table (nor the default policy of each tool: write_file, edit_file and exec are
    `ask`, so `exec` denies them unless `ask_default` says allow), so a user cannot learn from
    the reference how to let an agent run a command non-interactively. Every top-level key the
    loader accepts (config.py's _KEYS) should appear in cli.md as `key`, `key = ...` or `[key]`."""
    missing = [
        key
        for key in sorted(config._KEYS)
        if not re.search(rf"`\[?{re.escape(key)}[\]` .]", CLI_MD)
    ]
    assert missing == []  # actual: ['policies', 'step_limit']
