"""Review 20f: the twentieth session's own changes (``git diff 7d97fe4 HEAD -- src``), looked at
for what the fixes broke or left half done. Each test failed against the code as reviewed and
states the behaviour expected of it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
import threading
from pathlib import Path

import morphz
from morphz.capacity import Budget
from morphz.encoding.tokens import Calibration, estimate_tokens
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall, Usage
from morphz.runtime.models.scripted import FunctionModel
from stores import run_morphz, run_sql

HANG_GUARD = 60  # seconds: only stops a hung thread from hanging the suite


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- 1. a thread's first read after a restore applies the old -wal to the restored backup ------


def test_a_read_from_a_new_thread_after_a_restore_leaves_the_restored_backup_as_it_was(
    tmp_path: Path,
) -> None:
    """Review 20a's fix promises that a store file replaced while a process has it open (a
    backup restored with ``mv``) "stays as it was put there" (decisions.md, Twentieth session;
    store/sqlite_wal.py's docstring), and that reads "keep reading the file the process
    opened". That holds for the writer and for readers made before the move, but each thread's
    reader connection is made on its first read, by path (``SqliteStore._reader_holder`` ->
    ``_connect()``, store/sqlite.py:275, 221): a thread that first reads after the move (a
    worker of a host's pool, ``asyncio.to_thread``) opens the *restored* file, with the old
    file's pages still in the ``-wal`` at that path. It reads those pages as if they were the
    backup's (here the event written after the backup: last_seq 2 from a backup of 1 event;
    with more pages "database disk image is malformed"), and when the thread ends and closes
    that connection it is the only connection on the new file, so SQLite checkpoints the old
    file's pages into the restored backup and deletes the ``-wal``: the backup is rewritten
    before any write of this process was even tried. Expected: the file at the path is left
    byte for byte as it was restored (a reader, like a write, should notice the move first)."""
    store, backup = tmp_path / "s.db", tmp_path / "backup.db"
    with morphz.open(store) as db:
        db.context("c", create=True).observe("user_message", "before the backup")
    src, dst = sqlite3.connect(store), sqlite3.connect(backup)
    try:
        src.backup(dst)  # an online backup, as cli.md shows
    finally:
        src.close()
        dst.close()
    restored = _digest(backup)
    db = morphz.open(store)
    try:
        db.context("c").observe("user_message", "after the backup")
        os.replace(backup, store)  # the backup restored while this process has the store open
        seen: list[object] = []

        def read() -> None:
            try:
                seen.append(db.context("c").status().last_seq)
            except morphz.MorphzError as exc:
                seen.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(HANG_GUARD)
        del reader
    finally:
        db.close()
    assert _digest(store) == restored, f"the restored backup was rewritten (the thread saw {seen})"


# --- 2. the agent's commits refused once the calibration falls: a stale profile share ---------


_VERSION = re.compile(r"\(mind-version (\d+)\)")


def test_the_agent_can_commit_after_the_calibration_falls_with_a_profile_bound(
    tmp_path: Path,
) -> None:
    """Review 20d made the floor of the agent's commits follow the calibration
    (``Run.tc.request_floor = partial(engine.floor, True)``, runtime/stepping.py:99), but left
    the profile's share beside it measured once, as the run starts
    (``engine.profile_tokens()``, same call). ``committing.check_measures``
    (committing.py:62-67) refuses a commit whose profile share is larger than the floor. Here
    the context had learned a high calibration (4.0) and the provider reports half the
    estimate, so after a few replies the calibrated floor (about 21,600 tokens) is far below the
    profile's share as counted at the start (81,000): every context_tx of the agent is refused
    with an InputError meant for a library caller ("profile_tokens (81000) is the profile's
    share of request_floor: give request_floor too, at least as large"), which the agent cannot
    act on, and it can no longer change its mind at all. Expected: the commit goes through
    (both figures counted under the same, current calibration)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    asked: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        step = len(asked)
        schemas = sum(estimate_tokens(t.text) for t in request.tools)
        sent = estimate_tokens(request.encoding) + schemas
        usage = Usage(max(1, sent // 2), 0)  # the provider counts half the estimate
        if step < 6:
            return ModelResponse(None, (ToolCall(f"call_{step}", "list_files", "{}"),), usage)
        if step == 6:
            version = _VERSION.findall(request.encoding)[-1]
            tx = f'(context-tx (base-version {version}) (derive plan (from @e1) (note "a plan")))'
            call = ToolCall(f"call_{step}", "context_tx", json.dumps({"tx": tx}))
            return ModelResponse(None, (call,), usage)
        return ModelResponse("done", (), usage)

    with morphz.open(tmp_path / "morphz.db") as db:
        ctx = db.context("c1", create=True)
        model = FunctionModel(answer)
        ctx.save_calibration(model.name, Calibration(4.0, 5))  # what earlier runs learned
        config = RuntimeConfig(
            workspace,
            profile="The harness asks for care. " * 3000,
            budget=Budget(window=400_000, output_reserve=2_000),
        )
        engine = Engine(ctx, model, build_tools(Settings()), config)
        result = asyncio.run(engine.run("make a plan", session="s1"))
        assert result.state == "delivered", result.reason
        receipts = [e.text or "" for e in ctx.events() if e.kind == "tx_receipt"]
        assert receipts and all('"ok": false' not in r for r in receipts), receipts
        assert [f.id for f in ctx.mind().frames] == ["plan"]


# --- 3. context list: the advice for a damaged context names another store ----------------------


def test_context_list_advice_for_a_damaged_context_names_the_store_listed(tmp_path: Path) -> None:
    """Review 20c's fix made ``morphz context list`` list a context whose status cannot be read
    with its error, and review 20e's made every advised ``morphz context`` command carry the
    command's ``--db`` (interfaces/advice.py: "error messages of both formats"). The two met in
    the merge but not in the code: ``list_command`` (interfaces/cli.py:291-295) prints
    ``listing.contexts_text`` / ``contexts_json`` (interfaces/listing.py:108-124) without
    ``advice.on_this_store``, so for a store given with ``--db`` the damaged context's line says
    "run `morphz context audit b`" — run as written it reads the default store (no context 'b',
    or another store's 'b'), while ``context status b --db PATH`` on the same store advises
    ``morphz context audit b --db PATH``. Expected: the listed advice names the store listed,
    in text and in JSON."""
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        db.context("a", create=True).observe("user_message", "alpha is healthy")
        b = db.context("b", create=True)
        first = b.observe("user_message", "beta plans the rollout")
        b.commit(f'(context-tx (base-version 0) (derive plan (from {first.ref}) (note "beta")))')
    run_sql(store, "UPDATE frames SET body = CAST(X'68C3' AS TEXT) WHERE context_id = 'b'")
    wanted = f"`morphz context audit b --db {store}`"
    shown = run_morphz(tmp_path, "context", "status", "b", "--db", str(store))
    assert wanted in shown.stderr, shown.stderr  # what a command on that context says
    text = run_morphz(tmp_path, "context", "list", "--db", str(store))
    assert text.returncode == 0, text.stderr
    assert wanted in text.stdout, text.stdout
    listed = run_morphz(tmp_path, "context", "list", "--db", str(store), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    damaged = [entry for entry in json.loads(listed.stdout) if "error" in entry]
    assert [entry["context"] for entry in damaged] == ["b"]
    assert wanted in damaged[0]["error"]["message"], damaged
