"""Review 21d (the twenty-first session's changes, with fresh eyes): the broken-writer state
seen from another thread and from a nested read, the clearing of a failed call's traceback
frames (which reaches the caller's own callbacks), and exact output to a pipe. Each test fails
on the code as reviewed and states the behaviour expected of it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.errors import ContextNotFoundError, MorphzError
from stores import fail_a_write_and_its_rollback

FAST = 0.5  # busy_timeout: nothing here should wait on a lock
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _store(path: Path) -> tuple[morphz.Database, morphz.Context]:
    db = morphz.open(path, busy_timeout=FAST)
    ctx = db.context("c", create=True)
    ctx.observe("user_message", "deploy the checkout service")
    return db, ctx


class _LockThatWaits:
    """The store's writer lock, whose first acquire by the main thread first lets ``before``
    run: what another thread does while this one waits for the lock."""

    def __init__(self, lock: Any, before: Any) -> None:
        self._lock, self._before = lock, before

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if self._before is not None and threading.current_thread() is threading.main_thread():
            before, self._before = self._before, None
            before()
        return bool(self._lock.acquire(*args, **kwargs))

    def __enter__(self) -> _LockThatWaits:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lock, name)


# --- 1. a write that waited for the lock while another thread broke the writer ---------------


def test_a_write_waiting_as_another_thread_breaks_the_writer_is_a_store_error(
    tmp_path: Path,
) -> None:
    """Thread B's write fails and so does its ROLLBACK: ``_roll_back`` closes the writer and
    sets ``_broken``. Thread A had already passed ``_begin_write``'s ``_broken`` check and was
    waiting for the writer lock; once granted it looks only at ``_closed``, so it runs
    ``_begin`` on the closed connection, and its ``except`` asks ``conn.in_transaction`` of it
    again: the caller gets a raw ``sqlite3.ProgrammingError`` ("Cannot operate on a closed
    database."), not the StoreError saying the Database writes no more and to open the store
    again. A multi-threaded host (a chat server) meets it on the first disk error."""
    db, ctx = _store(tmp_path / "s.db")
    store: Any = db.store
    broke: list[BaseException | None] = []

    def other_thread_breaks_the_writer() -> None:
        thread = threading.Thread(
            target=lambda: broke.append(fail_a_write_and_its_rollback(db, ctx))
        )
        thread.start()
        thread.join(20)

    real = store._write_lock
    store._write_lock = _LockThatWaits(real, other_thread_breaks_the_writer)
    try:
        with pytest.raises(BaseException) as caught:
            ctx.observe("user_message", "waited for the writer lock")
    finally:
        store._write_lock = real
        db.close()
    assert broke and isinstance(broke[0], MorphzError), broke  # the breaking write's own error
    assert isinstance(caught.value, MorphzError), repr(caught.value)
    assert "writes no more" in str(caught.value)


# --- 2. a nested read after the writer broke: "reads go on", but not this one ----------------


def test_a_nested_read_of_a_missing_context_after_a_broken_writer_is_not_found(
    tmp_path: Path,
) -> None:
    """decisions.md: after a failed ROLLBACK "its reads go on". A read inside a read (an audit's
    progress callback) of a context its snapshot lacks asks the writer whether the context
    exists now (``SqliteStore._nested_row``), and the writer is closed: the caller gets "read
    from ... failed: Cannot operate on a closed database." instead of ContextNotFoundError."""
    db, ctx = _store(tmp_path / "s.db")
    try:
        assert isinstance(fail_a_write_and_its_rollback(db, ctx), MorphzError)
        with db.store.read("c"), pytest.raises(MorphzError) as caught, db.store.read("nope"):
            pass
    finally:
        db.close()
    assert isinstance(caught.value, ContextNotFoundError), repr(caught.value)


# --- 3. release_statements clears the locals of the caller's own callback frames -------------


class _Refused(Exception):
    """What the user's callback raises."""


def _locals_of(exc: BaseException, function: str) -> dict[str, Any]:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            return dict(tb.tb_frame.f_locals)
        tb = tb.tb_next
    raise AssertionError(f"{function} is not in the traceback")


def test_a_callback_that_fails_inside_a_write_keeps_its_locals(tmp_path: Path) -> None:
    """decisions.md: release_statements clears "the finished frames" of a failed read or
    write's traceback, and "the cost is the store's internals' locals in a post-mortem
    debugger". It clears every finished frame below the store's, the caller's own callback
    included: an ``import_history`` progress callback that raises keeps no locals, not even its
    arguments, so ``pdb.post_mortem``, ``pytest --showlocals`` and error trackers that capture
    locals show nothing of the user's failing code. Only the store's frames (whose locals hold
    its cursors) need clearing."""
    db, ctx = _store(tmp_path / "s.db")

    def progress(done: int, total: int) -> None:
        reason = f"stopped after {done} of {total}"
        raise _Refused(reason)

    history = io.StringIO(json.dumps({"kind": "user_message", "text": "imported"}) + "\n")
    try:
        with pytest.raises(_Refused) as caught:
            ctx.import_history(history, progress=progress)
    finally:
        db.close()
    kept = _locals_of(caught.value, "progress")
    assert kept.get("reason") == "stopped after 1 of 1", kept


def test_a_callback_that_fails_inside_a_read_keeps_its_locals(tmp_path: Path) -> None:
    """The same for a read: the audit's progress callback runs inside the audit's read."""
    db, ctx = _store(tmp_path / "s.db")

    def progress(done: int, total: int) -> None:
        reason = f"stopped after {done} of {total}"
        raise _Refused(reason)

    try:
        with pytest.raises(_Refused) as caught:
            ctx.audit(progress=progress)
    finally:
        db.close()
    kept = _locals_of(caught.value, "progress")
    assert kept.get("reason") == "stopped after 1 of 1", kept


# --- 4. exact output to a pipe: a BOM before it under utf-8-sig -------------------------------


def test_output_to_a_pipe_under_utf_8_sig_is_the_text_without_a_bom(tmp_path: Path) -> None:
    """decisions.md: "To a pipe or a file, ``output.out`` writes the text's UTF-8 bytes
    whatever stdout's encoding". ``output._utf8_out`` counts ``utf-8-sig`` as UTF-8 and writes
    through the text stream, whose codec puts a byte order mark before the first write: the
    file starts with EF BB BF, not with the encoding (``jq`` and a byte comparison with the
    stored text fail). Writing the UTF-8 bytes to the binary stream, as for any other
    non-UTF-8 encoding, avoids it."""
    db = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONIOENCODING": "utf-8-sig"}
    env.pop("MORPHZ_DB", None)
    run = [sys.executable, "-m", "morphz", "context"]
    subprocess.run([*run, "create", "c", "--db", str(db)], env=env, check=True, capture_output=True)
    done = subprocess.run(
        [*run, "encoding", "c", "--db", str(db)], env=env, check=True, capture_output=True
    )
    assert done.stdout.startswith(b"(context-encoding"), done.stdout[:20]
