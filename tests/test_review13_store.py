"""Review 13's findings about the store (schema evolution, file handling, durability, busy
errors): the tests of tests/test_review13_migrations.py (all but the audit's two), three of
tests/test_review13_durability.py and one of tests/test_review13_concurrency.py, as the reviewers
wrote them. Each failed on the code it was written against."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.errors import MorphzError, SchemaError
from morphz.interfaces.cli import main
from morphz.mind import DEFAULT_WINDOW
from morphz.mind.state import GENESIS_HEAD
from morphz.store.sqlite import _migrations, _statements
from morphz.store.sqlite_recall import create_fts
from stores import Holder, cli_env, hand_connect, revised_store, run_cli, run_sql

SRC = Path(morphz.__file__).resolve().parent.parent
CONTEXT = "context-default"
WAIT_S = 60.0  # how long a child may take to reach the point where it is killed (not asserted)


# ================================================================ migrations and file handling


def test_a_write_after_a_newer_morphz_migrated_the_open_store_is_refused(tmp_path: Path) -> None:
    """A process keeps a store open (a chat) while a newer Morphz, run beside it, migrates the
    store. The newer schema is refused only when a store is opened: the running process goes on
    writing with its own rules (with the real commits: a schema-11 process writing after 0012
    left a kept total the audit reports; a schema-15 one indexed Thai text the old way into an
    index 0016 had just rebuilt, and marked it current)."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "before the upgrade")
        newer = db.store.schema_version() + 1
        run_sql(path, f"INSERT INTO schema_migrations VALUES ({newer}, '{newer:04d}_x', 'now')")
        with pytest.raises(SchemaError):
            ctx.observe("user_message", "after the upgrade")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (1,)
    finally:
        conn.close()


def _old_recall_schema(path: Path) -> None:
    """A store as commits 88d98b6..c443a29 wrote it: schema 0003, but 0002 as it first landed
    (recall_frames without ``key``; ab9e50c added that column to 0002 in place), holding one
    context created then."""
    sql = {number: text for number, _, text in _migrations()}
    old = "".join(
        line
        for line in sql[2].splitlines(keepends=True)
        if "key        INTEGER" not in line
        and "across revisions and rebuilds" not in line
        and "recall_frames_key" not in line
    ).replace("(context_id, time_us, key)", "(context_id, time_us, doc_id)")
    assert "key        INTEGER" not in old and "recall_frames_key" not in old
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        conn.execute(
            "CREATE TABLE schema_migrations "
            "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for number, text in ((1, sql[1]), (2, old), (3, sql[3])):
            for statement in _statements(text):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')", (number, "x"))
        conn.execute(
            "INSERT INTO contexts VALUES ('c', '2026-08-04T09:00:00+00:00', 0, 0, 0, ?, ?, ?, "
            "0, 0)",
            (GENESIS_HEAD, DEFAULT_WINDOW, DEFAULT_WINDOW),
        )
        create_fts(conn, "recall_fts_1")
        conn.execute("INSERT INTO recall_meta VALUES ('c', 'recall_fts_1', 0, 0)")
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_schema_3_store_from_before_the_recall_keys_opens(tmp_path: Path) -> None:
    """Migration 0002 was changed after it landed (ab9e50c added recall_frames.key). A store
    that ran the first 0002 records schema 1-3 like any other, so nothing adds the column:
    0008 marks its index stale, the rebuild at open reads ``key``, and every open fails with
    "no such column: key" (the store can no longer be opened at all)."""
    path = tmp_path / "old.db"
    _old_recall_schema(path)
    with morphz.open(path) as db:
        ctx = db.context("c")
        ctx.observe("user_message", "the kiwi shipment arrived")
        assert [h.ref for h in ctx.recall.search("kiwi").hits] == ["@e1"]
        assert ctx.audit().ok


def test_a_file_uri_is_the_file_it_names_or_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``morphz.open("file:///abs/store.db")`` (the URI SQLite and many tools take) made a
    folder ``file:`` in the current folder and the store at ./file:/abs/store.db."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    target = tmp_path / "store.db"
    try:
        db = morphz.open(target.as_uri())
    except MorphzError:
        pass  # refused, as postgresql:// is
    else:
        db.close()
        assert target.is_file()
    assert os.listdir(cwd) == []


def test_memory_is_an_in_memory_store_or_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``morphz.open(":memory:")`` (SQLite's name for a database in memory) writes a file
    named ``:memory:`` in the current folder, which every later run silently reuses."""
    monkeypatch.chdir(tmp_path)
    try:
        db = morphz.open(":memory:")
    except MorphzError:
        pass
    else:
        db.close()
    assert os.listdir(tmp_path) == []


def test_an_unknown_user_s_home_in_the_path_is_a_typed_error(tmp_path: Path) -> None:
    """``~nosuchuser/x.db`` raised Path.expanduser's RuntimeError (a traceback in the CLI)."""
    with pytest.raises(MorphzError):
        morphz.open("~nosuchuser-review13/store.db")


@pytest.mark.parametrize("value", ['"garbage"', "{not json"])
def test_a_damaged_context_setting_is_a_typed_error(tmp_path: Path, value: str) -> None:
    """A damaged row of context_settings (the budget) passed the audit, and status and every
    encoding then failed with a TypeError or JSONDecodeError instead of a StoreError."""
    path = tmp_path / "s.db"
    revised_store(path)
    conn = hand_connect(path)
    try:
        with conn:
            conn.execute("INSERT INTO context_settings VALUES ('c', 'budget', ?)", (value,))
    finally:
        conn.close()
    with morphz.open(path) as db:
        ctx = db.context("c")
        with pytest.raises(MorphzError):
            ctx.status()


_KILLED_REBUILD = """
import sys, time
from morphz.recall import maintain
real = maintain.event_docs
def hook(*args, **kw):
    out = real(*args, **kw)
    print("rebuilding", flush=True)
    time.sleep(3600)
    return out
maintain.event_docs = hook
import morphz
morphz.open(sys.argv[1])
"""


def test_a_rebuild_killed_at_open_leaves_no_table_behind_once_rebuilt(tmp_path: Path) -> None:
    """A process killed (SIGKILL, OOM) while open rebuilds an index a migration marked stale
    leaves its half-built FTS table; the next open rebuilds again and the old table stays in
    the file for ever, unreported (up to the index's size per kill on a large store)."""
    path = tmp_path / "s.db"
    revised_store(path)
    run_sql(path, "UPDATE recall_meta SET indexed_seq = -1")  # as 0008, 0010 and 0016 do
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_REBUILD, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "rebuilding"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:  # (the reviewer's test left the pipe open: a ResourceWarning)
            child.stdout.close()
    with morphz.open(path) as db:
        assert db.context("c").recall_index.inspect().current
    conn = sqlite3.connect(path)
    try:
        left = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%rebuild%'"
        ).fetchall()
    finally:
        conn.close()
    assert left == []


# ================================================================ durability (real processes)


WAL_HOLDER = """
import sys
import morphz
db = morphz.open(sys.argv[1])
ctx = db.context("context-default")
print("ready", flush=True)
sys.stdin.readline()  # meanwhile the -wal file is deleted
try:
    event = ctx.observe("user_message", "written after the -wal was deleted")
    print("acknowledged " + event.ref, flush=True)
except morphz.MorphzError as exc:
    print("refused " + type(exc).__name__, flush=True)
sys.stdin.readline()  # killed here
"""


def test_a_write_after_the_wal_file_was_deleted_is_not_acknowledged_then_lost(
    tmp_path: Path,
) -> None:
    """A process holds the store open (a ``morphz chat``, a host); someone deletes
    ``morphz.db-wal`` (a cleanup of "temporary" files, a sync tool). SQLite keeps writing to
    the unlinked file: the next ``observe`` is acknowledged, but lives only in a file no other
    process can see (``morphz.open`` elsewhere fails with a bare "disk I/O error"). When that
    process is then killed (SIGKILL, OOM, a reboot) the acknowledged event is gone, and with
    it everything written since the last checkpoint (a context created in that process
    disappears whole: the next open says it does not exist). DESIGN §13: a process killed at
    any instant leaves a store that holds every acknowledged commit. Expected: the store notices
    that its ``-wal`` was replaced (its inode, checked as a write begins) and refuses the write
    with a ``StoreError`` that says what happened, or keeps it (checkpoints it into the main
    file) before acknowledging."""
    store = tmp_path / "morphz.db"
    with morphz.open(store) as db:
        db.context(CONTEXT, create=True).observe("user_message", "hello")
    assert not Path(f"{store}-wal").exists()  # closed: everything is in the main file
    with subprocess.Popen(
        [sys.executable, "-c", WAL_HOLDER, str(store)],
        env=cli_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            Path(f"{store}-wal").unlink()
            proc.stdin.write("\n")
            proc.stdin.flush()
            said = proc.stdout.readline().strip()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert said.startswith(("acknowledged", "refused")), said
    if said.startswith("refused"):
        return  # refused before anything was acknowledged: nothing to lose
    with morphz.open(store) as db:
        texts = [e.text for e in db.context(CONTEXT).events()]
    assert "written after the -wal was deleted" in texts, (
        f"{said}, but after the kill the store holds only {texts}"
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 1 MiB mounted for the test (root only; skipped where it cannot be)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr!r}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def _fill(folder: Path) -> None:
    """Fill ``folder``'s filesystem: write until no space is left."""
    with contextlib.suppress(OSError), (folder / "filler").open("wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)


def test_a_full_disk_is_named_when_the_store_is_opened(small_disk: Path) -> None:
    """On a full disk even a read (``morphz context status``, ``audit``, ``events``) cannot
    open the store: WAL mode makes ``morphz.db-shm`` (32 KiB) beside it. The error is "cannot
    open the store at ...: disk I/O error" (SQLite's ``SQLITE_IOERR_SHMSIZE``), with no advice:
    it reads like failing hardware or a damaged store, and a user may restore a backup over a
    sound file. ``store/sqlite_files.py:advice`` words CORRUPT, NOTADB, CANTOPEN and READONLY,
    not a write that failed for lack of space (nor SQLITE_FULL, "database or disk is full",
    which says nothing of what to do). Expected (DESIGN §13): the error says the store's
    filesystem has no free space left and that nothing was changed."""
    store = small_disk / "morphz.db"
    with morphz.open(store) as db:
        db.context(CONTEXT, create=True).observe("user_message", "hello")
    assert not Path(f"{store}-shm").exists()
    _fill(small_disk)
    status = run_cli(small_disk.parent, "context", "status", "--db", str(store))
    assert status.returncode == 1
    said = status.stderr.replace(str(small_disk.parent), "").lower()  # the path names the test
    assert "space" in said or "full" in said, (
        f"a full disk, and the error does not say so: {status.stderr.strip()}"
    )


REBUILDER = """
import sys, time
import morphz
from morphz.store import sqlite_recall
real = sqlite_recall.SqliteRecall.add_to
def add_to(self, table, docs):
    real(self, table, docs)
    print("building " + table, flush=True)
    sys.stdin.readline()  # killed here, inside the batch's write
sqlite_recall.SqliteRecall.add_to = add_to
db = morphz.open(sys.argv[1])
db.context("context-default").recall_index.rebuild()
"""


def _rebuild_tables(store: Path) -> list[str]:
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%rebuild%'"
        ).fetchall()
    finally:
        conn.close()
    return sorted(r[0] for r in rows)


def test_a_rebuild_leaves_no_table_of_a_killed_one_behind(tmp_path: Path) -> None:
    """``recall-index rebuild`` (and the rebuild an upgraded store runs as it opens) creates
    its building table in a transaction of its own; a process killed before the swap leaves
    that table (an FTS5 table and its five shadow tables, up to a whole index's size) in the
    store for good: no later rebuild drops it, ``recall-index inspect`` and the audit do not
    mention it, and no command removes it, so each killed rebuild of a large store leaks its
    size. decisions.md (Recall) accepts this because "a concurrent rebuild's table cannot be
    told from it" — it can, when the building table's owner (host, pid, start identity, as
    activations record it, ``owners.py``) is recorded beside it. Expected: once a rebuild
    completes with no other rebuild running, no building table of a dead rebuild is left."""
    store = tmp_path / "morphz.db"
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT, create=True)
        for i in range(5):
            ctx.observe("tool_result", f"deploy log line {i}")
    with subprocess.Popen(
        [sys.executable, "-c", REBUILDER, str(store)],
        env=cli_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert line.startswith("building "), line
    assert _rebuild_tables(store), "the killed rebuild left its table (as decisions.md says)"
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        report = ctx.recall_index.rebuild()
        assert report.current
        assert ctx.audit().ok
    left = _rebuild_tables(store)
    assert left == [], f"a completed rebuild left the dead rebuild's tables: {left}"


# ================================================================ a busy store, from the CLI


def test_a_busy_store_tells_a_command_line_user_what_the_command_line_can_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the store (a long `morphz import`), a `morphz context tx` waits
    ``busy_timeout`` (30 s for every command) and then fails with code ``busy`` and the message
    "... stayed locked for 30s; another process holds it: retry later or raise busy_timeout"
    (store/sqlite.py:304-306, and 535-537 for reads). ``busy_timeout`` is a parameter of
    ``morphz.open()`` only: no command takes an option for it, no environment variable sets it,
    and cli.md never names it, so half of the advice is something a command-line user cannot do.
    Expected: the error a command prints names only what its user can do (retry when the other
    process is done), or the command line offers a way to wait longer (``--busy-timeout`` /
    ``MORPHZ_BUSY_TIMEOUT``) that the message names. The test shortens the command's wait to 0.3
    s by giving ``morphz.open`` that default; nothing else changes."""
    store = tmp_path / "store.db"
    with morphz.open(store) as db:
        db.context("c", create=True)
    monkeypatch.setattr(morphz, "open", functools.partial(morphz.open, busy_timeout=0.3))

    with Holder(store, "c", tmp_path / "holder").holding():
        tx = "(context-tx (base-version 0) (create plan (step one)))"
        result = CliRunner().invoke(
            main,
            ["context", "tx", "c", "--file", "-", "--db", str(store), "--format", "json"],
            input=tx,
        )

    assert result.exit_code == 1, result.output
    error = json.loads(result.output)["error"]
    assert error["code"] == "busy"
    message = error["message"]
    docs = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    tx_help = CliRunner().invoke(main, ["context", "tx", "--help"]).output
    cli_can_set_it = "--busy-timeout" in tx_help or "MORPHZ_BUSY_TIMEOUT" in docs
    assert "busy_timeout" not in message or cli_can_set_it, (
        f"a command-line user is told to raise busy_timeout, which no command takes: {message}"
    )


# ================================================================ the fixer's own checks


def test_a_live_rebuild_keeps_its_table_while_another_rebuild_runs(tmp_path: Path) -> None:
    """Only the tables of rebuilds whose process died are dropped: one this (live) process is
    still filling stays through another rebuild, and its owner is recorded."""
    path = tmp_path / "s.db"
    revised_store(path)
    with morphz.open(path) as db:
        with db.store.write("c") as w:
            building = w.recall.begin_rebuild()
        assert db.context("c").recall_index.rebuild().current
        conn = sqlite3.connect(path)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            owners = conn.execute("SELECT fts_table, pid FROM recall_builders").fetchall()
        finally:
            conn.close()
    assert building in names
    assert owners == [(building, os.getpid())]


def test_the_audit_reports_a_damaged_setting(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    revised_store(path)
    run_sql(path, "INSERT INTO context_settings VALUES ('c', 'view', '{\"nope\": 1}')")
    with morphz.open(path) as db:
        report = db.context("c").audit()
    assert not report.ok
    assert any("'view'" in d and "context 'c'" in d for d in report.differences)


def test_migration_17_makes_the_order_index_of_the_first_0001_again(tmp_path: Path) -> None:
    """0001 first made frames_order on (context_id, pos), which 0014's IF NOT EXISTS kept."""
    path = tmp_path / "s.db"
    revised_store(path)
    run_sql(
        path,
        "DROP INDEX frames_order",
        "CREATE INDEX frames_order ON frames (context_id, pos)",
        "DELETE FROM schema_migrations WHERE number >= 17",
    )
    morphz.open(path).close()
    conn = sqlite3.connect(path)
    try:
        columns = [r[2] for r in conn.execute("PRAGMA index_info(frames_order)")]
    finally:
        conn.close()
    assert columns == ["context_id", "pos", "frame_id"]


def test_the_busy_timeout_option_and_variable_reach_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.db"
    morphz.open(store).close()
    seen: list[float] = []
    real_open = morphz.open

    def spy(*args: object, **kwargs: float) -> morphz.Database:
        seen.append(kwargs.get("busy_timeout", -1.0))
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(morphz, "open", spy)
    runner = CliRunner()
    args = ["context", "list", "--db", str(store)]
    assert runner.invoke(main, [*args, "--busy-timeout", "2.5"]).exit_code == 0
    assert runner.invoke(main, args, env={"MORPHZ_BUSY_TIMEOUT": "7"}).exit_code == 0
    assert runner.invoke(main, args).exit_code == 0
    assert seen == [2.5, 7.0, -1.0]  # -1: not given, the library's default
