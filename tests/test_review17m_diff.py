"""Review 17m: the latest part of the seventeenth session's change (git diff 5ff8c77 HEAD): work
kept for an ended activation, the frames' documents refreshed at open for a damaged context, the
secrets left in os.environ, recover's hidden owners, the terminal's CR LF and marks, exec's note
of denied calls, the advice naming CTX and --db, the profile read when used and budget failures
naming it, a project's restated allows, the builtin model spec. Each test failed against the
code as reviewed and states the behaviour expected of it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.capacity import Budget
from stores import isolated_env, run_morphz, user_config


def _script(tmp_path: Path, steps: list[dict[str, Any]]) -> str:
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{path}"


# --- 1. a damaged context whose frames cannot all be read no longer opens ------------------------


def test_a_store_with_a_damaged_event_and_a_damaged_frame_still_opens_for_the_audit(
    tmp_path: Path,
) -> None:
    """database.open rebuilds a stale recall index and, when an event cannot be read
    (DamagedStoreError), leaves it stale so that the store still opens "so that the audit can
    report the damage" (database.py:197-203). Review 17l added ``refresh_frames()`` in that
    except branch (database.py:203), outside any handler: when a frame's row is damaged too,
    reading it raises StoreError ("write to ... failed: Could not decode to UTF-8 column
    'body'") and the whole store no longer opens, every context of it, where 5ff8c77 opened it
    and its audit named the damaged event. A failure to refresh the frames' documents should
    leave the index stale, as the rebuild's failure does."""
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        ctx = db.context("c", create=True)
        first = ctx.observe("user_message", "plan the rollout")
        ctx.observe("external_event", "log line")
        ctx.commit(
            f"(context-tx (base-version {ctx.version}) (derive a (from {first.ref}) "
            '(note "first")) (create b (note "second")))'
        )
    conn = sqlite3.connect(store)
    with conn:  # damaged pages: an event's text and a frame's body are not UTF-8
        conn.execute("UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE seq = 2")
        conn.execute("UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE frame_id = 'b'")
        conn.execute("UPDATE recall_meta SET indexed_seq = -1")  # as a migration marks it
    conn.close()
    with morphz.open(store) as db:
        report = db.context("c").audit()
    assert not report.ok
    assert any("@e2" in d for d in report.differences), report.differences


# --- 2. the profile's budget refusal says no frame can help when one can ------------------------


def test_the_profile_refusal_is_not_given_when_a_smaller_frame_would_commit(
    tmp_path: Path,
) -> None:
    """committing._check_room (committing.py:247) names the profile, and says "no frame can
    make room for it", whenever the profile is half the request or more; it never checks that
    the request without any frame (the floor) passes the critical level. Here the floor (1,800
    of a critical level of 2,000, the profile 1,100 of it) leaves room for a short frame: a
    300-word note is refused with the profile's message, telling the agent (context_tx) and
    the user (context tx) that only a shorter profile or a larger budget helps, and the same
    transaction with a short note then commits. The profile's refusal should be given only
    when the floor alone passes the critical level; otherwise the frames' refusal (make the
    frames smaller) is the true one."""
    budget = Budget(window=2000, output_reserve=0, reserve=0)
    limits: dict[str, Any] = {"budget": budget, "request_floor": 1800, "profile_tokens": 1100}
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        refused = None
        try:
            ctx.commit(f'(context-tx (base-version 0) (create note "{"word " * 300}"))', **limits)
        except morphz.MorphzError as exc:
            refused = exc
        assert refused is not None and refused.code == "budget"
        ctx.commit('(context-tx (base-version 0) (create note "short note"))', **limits)
    assert "no frame can make room" not in str(refused), refused


# --- 3. exec's note of denied calls gives advice already followed -------------------------------


def test_exec_denied_note_does_not_advise_an_allow_the_project_file_overrides(
    tmp_path: Path,
) -> None:
    """A project's morphz.toml may make a policy stricter (`[policies] read_file = "ask"`), and
    it is read after the user's file, so it wins. exec then denies read_file and says on stderr
    'To allow them, set `read_file = "allow"` under `[policies]` ... in ~/.morphz/morphz.toml'
    (approval_text.py:93-98), which this user's file says already: following the advice
    changes nothing. The note should say that the project's file (naming it) makes the tool
    ask, not advise a setting it overrides."""
    user_config(tmp_path / "home", '[policies]\nread_file = "allow"\n')
    (tmp_path / "morphz.toml").write_text('[policies]\nread_file = "ask"\n', encoding="utf-8")
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    steps = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"reply": "done"},
    ]
    proc = run_morphz(tmp_path, "exec", "read a.txt", "--model", _script(tmp_path, steps))
    assert proc.returncode == 0, proc.stderr
    assert "denied" in proc.stderr, proc.stderr
    assert 'set `read_file = "allow"`' not in proc.stderr, proc.stderr
    assert str(tmp_path / "morphz.toml") in proc.stderr, proc.stderr


# --- 4. a host that ran exec in its own process gives its children an empty key ---------------

_HOST = """
import os, subprocess, sys
from morphz.interfaces.cli import main

main(["exec", "hi", "--model", sys.argv[1], "--db", "s.db"], standalone_mode=False)
shown = subprocess.run(
    ["sh", "-c", 'printf "%s|%s" "$OPENAI_API_KEY" "$OPENAI_BASE_URL"'],
    capture_output=True, text=True, check=True,
).stdout
print(os.environ.get("OPENAI_API_KEY"), shown)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the initial block: Linux")
def test_a_host_s_children_still_inherit_the_key_after_an_in_process_exec(
    tmp_path: Path,
) -> None:
    """docs/cli.md: "os.environ itself is left as it is, so a host calling the CLI in its own
    process, in several threads, keeps them". But secrets_env.withheld overwrites the values in
    the initial environment block with NUL bytes (secrets_env.py:62) and no longer restores
    anything (review 17i removed the os.environ pop and its setdefault, which put fresh copies
    back with putenv): the C environment still points into that block, so from then on every
    child the host starts the usual way (subprocess without env=) inherits OPENAI_API_KEY and
    OPENAI_BASE_URL empty, while os.environ says they are set. 5ff8c77 gave the children the
    key back when the command ended. After the command, the host's children should inherit
    what its os.environ holds (e.g. putenv the overwritten names from os.environ, which lives
    in the heap and is not what /proc/PID/environ shows)."""
    host = tmp_path / "host.py"
    host.write_text(_HOST, encoding="utf-8")
    model = _script(tmp_path, [{"reply": "ready"}])
    env = isolated_env(tmp_path, OPENAI_API_KEY="sk-host-key", OPENAI_BASE_URL="http://h/v1")
    proc = subprocess.run(
        [sys.executable, str(host), model],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "sk-host-key sk-host-key|http://h/v1", proc.stdout


# --- 5. a profile's share larger than the floor it is a share of --------------------------------


def test_commit_refuses_a_profile_share_larger_than_the_request_floor(tmp_path: Path) -> None:
    """Context.commit's new ``profile_tokens`` is "the profile bound to the agent's share of
    that floor" (contextdb.py:517-518), and check_measures refuses every other measure of the
    wrong kind before anything is read or written (committing.py:42-62). A share larger than the
    floor (here 50,000 of 1,000), or one given with no floor (the floor is then the protocol and
    an allowance, which hold no profile), is accepted: the first commits silently, the second
    gives a refusal that says the request "would take about 3873 tokens ... and the profile ...
    takes about 50000 of them". It should be an InputError naming profile_tokens."""
    budget = Budget(window=2000, output_reserve=0, reserve=0)
    with morphz.open(tmp_path / "s.db") as db:
        ctx = db.context("c", create=True)
        refused = None
        try:
            ctx.commit(
                '(context-tx (base-version 0) (create note "short"))',
                budget=budget,
                request_floor=1000,
                profile_tokens=50_000,
            )
        except morphz.MorphzError as exc:
            refused = exc
        assert ctx.version == 0, "committed with a profile share larger than its floor"
    assert isinstance(refused, morphz.InputError) and "profile_tokens" in str(refused)


# --- 6. the soft hyphen kept in a table cell is counted as no column ------------------------------


def test_a_table_cell_with_a_soft_hyphen_keeps_its_columns_aligned() -> None:
    """tables.visible now keeps the soft hyphen (U+00AD, tables.py:38), in table cells too,
    but tables._cell_width counts every format character (Cf) as no column (tables.py:70).
    Terminals draw the soft hyphen one column wide (glibc's and Markus Kuhn's wcwidth give it
    1: "SOFT HYPHEN has a column width of 1"), so a row of `context show` or `context events`
    holding a word copied from the web ("Donau\\u00addampf") pushes every later column of its
    row one place right. Before, it was shown as `\\u00ad` and counted as drawn. Count the
    soft hyphen as one column (the marks and joiners kept stay zero-width)."""
    from morphz.interfaces.tables import table

    lines = table(["word", "n"], [["Donau\u00addampf", "x"], ["plain", "y"]]).splitlines()
    # every character here but the soft hyphen is ASCII: one column each, the hyphen one too
    assert lines[2].index("x") == lines[3].index("y"), lines
