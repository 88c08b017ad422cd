"""Review 9b findings on concurrency and crashes: the busy/locked handling of the SQLite store,
what an interrupt or a cancellation leaves behind, and the reader connections of threads.

Each test fails on the code it was written against; its docstring says what is expected."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

import morphz
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelResponse
from morphz.runtime.models.scripted import FunctionModel

CONTEXT = "context-default"
HAS_PROC_FD = Path("/proc/self/fd").is_dir()


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        db.context(CONTEXT, create=True).observe("user_message", "hello")
    return path


def _can_take_write_lock(path: Path) -> bool:
    """Whether another connection (another process) can start a write transaction now."""
    other = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


# --- an interrupt as the write lock is granted ------------------------------------------------


def test_an_interrupt_as_the_write_lock_is_granted_leaves_no_transaction_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C pressed while a write waits for a busy store is raised just after SQLite's
    ``BEGIN IMMEDIATE`` returns: the wait happens inside that call (the connection's busy
    handler) and Python raises the KeyboardInterrupt at the next bytecode, before
    ``SqliteStore._begin_write`` enters its ``try``. (Reproduced for real: a child waiting on a
    lock held by another connection, sent SIGINT, then the lock released.) The interrupted write
    must be undone: no transaction left open on the writer connection, the next write of this
    process (a REPL, a notebook, a server that survives the interrupt) works, and other
    processes can take the write lock. Today the transaction stays open: the process's next
    write raises a bare ``sqlite3.OperationalError`` ("cannot start a transaction within a
    transaction") and every other process is locked out until this one exits."""
    path = _store(tmp_path)
    db = morphz.open(path)
    try:
        ctx = db.context(CONTEXT)
        store = db.store
        real_retry = store._retry  # type: ignore[attr-defined]
        fired: list[bool] = []

        def retry(action: object, *deadline: float | None) -> object:
            result = real_retry(action, *deadline)
            if not fired and store._writer.in_transaction:  # type: ignore[attr-defined]
                fired.append(True)  # the signal that arrived during the busy wait
                raise KeyboardInterrupt
            return result

        monkeypatch.setattr(store, "_retry", retry)
        with pytest.raises(KeyboardInterrupt):
            ctx.observe("user_message", "typed while the store was busy")
        assert fired
        assert not store._writer.in_transaction, "the interrupted write left its transaction open"  # type: ignore[attr-defined]
        assert _can_take_write_lock(path), "other processes are locked out"
        event = ctx.observe("user_message", "the next line")
        assert event.seq == 2
        assert ctx.audit().ok
    finally:
        db.close()


# --- opening needs no write lock when there is nothing to migrate ------------------------------


def test_opening_an_up_to_date_store_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """In WAL mode readers never wait for a writer, so an operator's read-only command
    (``morphz context status``, ``show``, ``recall search``) works while another process holds
    the write lock (a long ``import``: about 7.5 s per 100,000 lines, one transaction; a rebuild
    batch; a chat's commit). Opening a store whose schema is current has nothing to write and
    should not take the lock. Today ``SqliteStore._migrate`` runs ``BEGIN IMMEDIATE`` on every
    open, so the open waits for the whole write and then fails with ``StoreBusyError`` (with
    the default 30 s ``busy_timeout``, any read command during a 400,000-line import fails)."""
    path = _store(tmp_path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
    try:
        with morphz.open(path, busy_timeout=0.5) as db:
            status = db.context(CONTEXT).status()
            assert status.last_seq == 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


# --- a cancelled activation does not stay running ---------------------------------------------


def test_a_run_cancelled_while_its_activation_starts_does_not_leave_it_running(
    tmp_path: Path,
) -> None:
    """``Engine.run`` records the activation's start in a worker thread
    (``asyncio.to_thread(ctx.begin_activation, ...)``); a cancellation of the run while that
    thread writes (``asyncio.wait_for`` timing out, a server cancelling a request, a task group
    failing) cancels the await, but the thread still commits the start. The ``try`` that records
    an interrupted end only begins after the await, so nothing ends that activation: it stays
    ``running`` for as long as this process lives, owned by a live process, so
    ``interrupt_orphaned`` never marks it, its root request stays causally protected and its
    session cannot be retired. Expected: a run cancelled at any point leaves no running
    activation behind (its start, once recorded, is followed by an interrupted end)."""
    db = morphz.open(tmp_path / "morphz.db")
    try:
        ctx = db.context(CONTEXT, create=True)
        model = FunctionModel(lambda request: ModelResponse("done", ()))
        engine = Engine(ctx, model, build_tools(Settings()), RuntimeConfig(workspace=tmp_path))
        recorded, release = threading.Event(), threading.Event()
        real_start = ctx.begin_activation

        def begin_activation(*args: object, **kwargs: object) -> tuple[object, str]:
            activation = real_start(*args, **kwargs)  # type: ignore[arg-type]
            recorded.set()  # committed; the run is cancelled before the await returns
            release.wait(30)
            return activation

        ctx.begin_activation = begin_activation  # type: ignore[method-assign]

        async def scenario() -> None:
            task = asyncio.create_task(engine.run("prepare the deployment"))
            assert await asyncio.to_thread(recorded.wait, 30)
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        running = ctx.activations(running_only=True)
        assert running == [], f"left running by a live process: {running}"
    finally:
        db.close()


# --- reader connections of threads -------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not HAS_PROC_FD, reason="counts open files in /proc/self/fd")
def test_threads_that_ended_do_not_keep_their_reader_connections(tmp_path: Path) -> None:
    """The store opens one reader connection per thread and closes them only in ``close()``,
    so every thread that ever read keeps its connection, and its open file, after it ended.
    A host that calls ``asyncio.run(engine.run(...))`` per message gets a new default executor,
    hence new threads, each time (measured: 2 files more per ``asyncio.run`` of an activation);
    at the usual limit of 1,024 open files the process can no longer open the store after a few
    hundred messages. Expected: the connections of ended threads are closed (or pooled), so the
    number of open files stays bounded."""
    db = morphz.open(tmp_path / "morphz.db")
    try:
        ctx = db.context(CONTEXT, create=True)
        ctx.observe("user_message", "hello")
        before = _open_fds()
        for i in range(40):  # one host call per message, each in its own event loop
            asyncio.run(asyncio.to_thread(lambda: ctx.status().last_seq))
            asyncio.run(asyncio.to_thread(ctx.observe, "user_message", f"message {i}"))
        grown = _open_fds() - before
        assert grown <= 10, f"{grown} more files are open after 80 short-lived threads"
    finally:
        db.close()


def test_a_store_gone_from_a_new_thread_is_a_store_error(tmp_path: Path) -> None:
    """DESIGN §13: a database that is locked or gone yields a clear, typed error. A thread's
    first read opens its reader connection in ``SqliteStore.read`` before the ``try`` that maps
    driver errors, so when that connection cannot be opened (the store's folder was removed, or
    the process ran out of file descriptors, where the previous test's leak leads) the caller
    gets a bare ``sqlite3.OperationalError: unable to open database file`` (checked too: with
    the open-file limit reached, the same bare error). Expected: a ``StoreError``
    naming the store."""
    folder = tmp_path / "store"
    db = morphz.open(folder / "morphz.db")
    try:
        ctx = db.context(CONTEXT, create=True)
        ctx.observe("user_message", "hello")
        shutil.rmtree(folder)
        raised: list[BaseException] = []

        def read() -> None:
            try:
                ctx.status()
            except BaseException as exc:  # recorded for the assertion below
                raised.append(exc)

        thread = threading.Thread(target=read)
        thread.start()
        thread.join(30)
        assert raised, "reading a store whose folder is gone succeeded"
        assert isinstance(raised[0], morphz.StoreError), repr(raised[0])
        assert str(folder) in str(raised[0])
    finally:
        db.close()
