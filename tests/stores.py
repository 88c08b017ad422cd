"""Helpers the store, recovery and concurrency tests share: a small store with a revised frame,
raw SQL on a store file (a hand edit), the CLI run as a child process with its own home, and a
child process that holds a store's write lock while asked to."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import morphz
from morphz.store.sqlite_migrations import WRITER_GUARD, writer_guard

SRC = Path(morphz.__file__).resolve().parent.parent
HANG_GUARD = 60  # seconds: only stops a hung child from hanging the suite


def revised_store(path: Path) -> None:
    """A store with a revised frame, a reason and a few observations."""
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        e1 = ctx.observe("user_message", "deploy the checkout service to shanghai")
        ctx.commit(
            f"(context-tx (base-version 0) (derive plan/route (from {e1.ref}) "
            '"take the coastal route"))'
        )
        ctx.commit('(context-tx (base-version 1) (reason "the bridge is closed") '
                   '(revise plan/route "take the mountain route"))')  # fmt: skip


def hand_connect(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection to the store file, as a person's hand edit makes, that can
    also write the rows migrations 0023 and 0024 guard (events, contexts, context_settings):
    their triggers call a function only Morphz registers, so the tests that damage a store by
    hand register it too (the sqlite3 shell cannot; it can still delete such a row)."""
    conn = sqlite3.connect(path)
    conn.create_function(WRITER_GUARD, 0, writer_guard, deterministic=True)
    return conn


def run_sql(path: Path, *statements: str) -> None:
    conn = hand_connect(path)
    try:
        with conn:
            for statement in statements:
                conn.execute(statement)
    finally:
        conn.close()


def rebuild_tables(store: Path) -> list[str]:
    """The recall index's building tables (``*_rebuild_*`` virtual tables) in ``store``, by
    name: what an unfinished ``recall-index rebuild`` leaves."""
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB '*_rebuild_*' "
            "AND sql LIKE 'CREATE VIRTUAL%'"
        ).fetchall()
    finally:
        conn.close()
    return sorted(r[0] for r in rows)


def cli_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), HOME=str(home))
    env.pop("MORPHZ_DB", None)
    return env


def isolated_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI child with ``tmp_path/home`` as its home and no MORPHZ_ or
    OPENAI_ setting of the caller's (``extra`` added, e.g. MORPHZ_DB)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MORPHZ_", "OPENAI_"))}
    env.update(HOME=str(home), PYTHONPATH=str(SRC), **extra)
    return env


def run_morphz(
    tmp_path: Path,
    *args: str | bytes,
    stdin: str | None = None,
    stdout: Any = subprocess.PIPE,
    env: dict[str, str] | None = None,
    file_size_limit: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """``morphz ARGS`` in a child process in ``tmp_path``, with ``env`` (default:
    :func:`isolated_env`), ``stdin`` as its input and its output to ``stdout``; under
    ``file_size_limit`` bytes (:func:`under_file_size_limit`) when one is given."""
    limit = file_size_limit
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        check=False,
        input=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else isolated_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        preexec_fn=None if limit is None else (lambda: under_file_size_limit(limit)),
    )


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``morphz ARGS`` in a child process, in ``cwd`` with ``cwd/home`` as its home."""
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        cwd=cwd,
        env=cli_env(cwd / "home"),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


# Holds the write lock of the store argv[1] (an import's one write transaction) from the
# moment it creates argv[2]/holding until argv[2]/release exists.
LOCK_HOLDER = """
import pathlib, sys, time
import morphz

folder = pathlib.Path(sys.argv[2])

def progress(done, total):
    (folder / "holding").touch()
    while not (folder / "release").exists():
        time.sleep(0.005)

with morphz.open(sys.argv[1]) as db:
    db.context(sys.argv[3]).import_history(str(folder / "history.jsonl"), progress=progress)
"""


def wait_for_file(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until ``path`` exists (the child's announcement); fails if the child died first."""
    deadline = time.monotonic() + HANG_GUARD
    while not path.exists():
        assert proc.poll() is None, "the child exited before it got there"
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.005)


def exec_killed_mid_call(tmp_path: Path, calls: list[dict[str, Any]], prompt: str) -> Path:
    """``morphz exec PROMPT`` (exec allowed, a scripted model) whose first reply asks for
    ``calls``, the last of which touches started.txt in the workspace and sleeps: killed with
    SIGKILL once that call runs, so the calls before it have ended. The store."""
    import json
    import signal

    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "home").mkdir()
    user_config(tmp_path / "home", '[policies]\nexec = "allow"\n')
    steps = [{"tool_calls": calls}, {"reply": "done"}]
    (tmp_path / "steps.json").write_text(json.dumps(steps), encoding="utf-8")
    store = tmp_path / "morphz.db"
    args = ["exec", prompt, "--model", "scripted:steps.json", "--workspace", "ws"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "morphz", *args, "--db", str(store)],
        cwd=tmp_path,
        env=cli_env(tmp_path / "home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_file(ws / "started.txt", proc)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return store


class Holder:
    """A child process that holds the store's write lock while asked to."""

    def __init__(self, store: Path, context: str, folder: Path) -> None:
        self.store, self.context, self.folder = store, context, folder
        folder.mkdir()
        (folder / "history.jsonl").write_text('{"text": "imported"}\n', encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None

    def hold(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        argv = [sys.executable, "-c", LOCK_HOLDER, str(self.store), str(self.folder), self.context]
        self.proc = subprocess.Popen(argv, env=env)
        wait_for_file(self.folder / "holding", self.proc)

    def release(self) -> None:
        (self.folder / "release").touch()
        if self.proc is not None:
            assert self.proc.wait(HANG_GUARD) == 0

    @contextmanager
    def holding(self) -> Iterator[None]:
        self.hold()
        try:
            yield
        finally:
            self.release()


def user_config(home: Path, text: str) -> Path:
    """``text`` as the user's own configuration, ``home/.morphz/morphz.toml``: what a project's
    morphz.toml may not set (a base_url, an "allow" policy) goes there."""
    path = home / ".morphz" / "morphz.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _umask_022() -> None:  # the usual login umask: new files 0644, new folders 0755
    os.umask(0o022)


def morphz_at_umask_022(
    tmp_path: Path, *args: str, env: dict[str, str], **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``morphz ARGS`` in a child process in ``tmp_path`` with ``env``, under the usual login
    umask (022), whatever the test process's own is."""
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        preexec_fn=_umask_022,
        **kw,
    )


def under_file_size_limit(limit: int) -> None:
    """A child's preexec: files it writes cannot grow past ``limit`` bytes (``ulimit -f``, a
    systemd LimitFSIZE, a sandbox); writes past it fail with EFBIG (SIGXFSZ ignored)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def backup(path: Path, copy_to: Path) -> None:
    """A copy of the store at ``path`` by SQLite's online backup (as docs/cli.md advises)."""
    source, copy = sqlite3.connect(path), sqlite3.connect(copy_to)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()


def io_error() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = 10  # type: ignore[attr-defined]  # SQLITE_IOERR
    error.sqlite_errorname = "SQLITE_IOERR"  # type: ignore[attr-defined]
    return error


class FaultyConnection:
    """A store connection whose statements matching ``fails`` raise ``error()`` instead of
    running (each at most ``times`` times); everything else is the real connection's."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        fails: Callable[[str], bool],
        error: Callable[[], BaseException],
        times: int = 1,
    ) -> None:
        self._conn, self._fails, self._error, self._left = conn, fails, error, times

    def _check(self, sql: str) -> None:
        if self._left and self._fails(sql):
            self._left -= 1
            raise self._error()

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def fail_a_write_and_its_rollback(db: morphz.Database, ctx: morphz.Context) -> BaseException | None:
    """An observation whose event row fails to be written, and whose ROLLBACK fails too (the
    Database's writer is then closed and its later writes refused): the error the caller gets
    (None when the write succeeded)."""
    store: Any = db.store
    real = store._writer
    store._writer = FaultyConnection(
        real, lambda sql: sql.startswith(("INSERT INTO events", "ROLLBACK")), io_error, times=2
    )
    try:
        ctx.observe("user_message", "lost to the disk")
    except BaseException as exc:
        return exc
    finally:
        store._writer = real
    return None
