"""Review 13b: the changes of the thirteenth session to the store, recall, the audit and
recovery (git diff ab4c3c5..8d5785f), read for bugs. Each test fails on the code it was written
against; its docstring says what is expected."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from morphz import events as ev
from morphz.errors import StoreError
from stores import hand_connect

CONTEXT = "context-default"


def test_a_deleted_wal_is_noticed_when_the_store_is_opened_through_a_symlink(
    tmp_path: Path,
) -> None:
    """SQLite resolves a symbolic link to the database file and keeps the ``-wal`` beside the
    file the link points to (``real/s.db-wal``). The store's ``WalFile`` stats
    ``{path}-wal`` with the path as given (store/sqlite.py: ``Path(path).absolute()``, not
    resolved; sqlite_wal.py ``WalFile.__init__``), where no file ever exists: its identity is
    None, ``replaced()`` takes "no file" as its own on every write, and the check is off. A store
    reached through a link (``~/.morphz/morphz.db`` -> a data disk) whose ``-wal`` is deleted
    acknowledges writes that a kill then loses, exactly what the check was added to prevent.
    Expected: the write is refused as it is for a store opened by its real path."""
    real = tmp_path / "data"
    real.mkdir()
    link = tmp_path / "morphz.db"
    link.symlink_to(real / "s.db")
    with morphz.open(link) as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.observe("user_message", "before the -wal is deleted")
        wal = real / "s.db-wal"
        assert wal.exists() and not Path(f"{link}-wal").exists()  # SQLite's -wal is the target's
        wal.unlink()
        with pytest.raises(StoreError, match="write-ahead log"):
            ctx.observe("user_message", "acknowledged, then lost with the process")


def _reply(ctx: morphz.Context, activation: str, *calls: tuple[str, str]) -> ev.Event:
    """A model reply as the engine records it (runtime/engine.py ``_handle``)."""
    payload = {
        "activation": activation,
        "tool_calls": [{"id": c, "name": n, "arguments": "{}"} for c, n in calls],
    }
    return ctx.record(ev.MODEL_REPLY, None, payload=payload, session="default")


def test_recovery_does_not_say_a_delivered_recall_has_no_result(tmp_path: Path) -> None:
    """The agent's recall tool answers its call with a ``recall_result`` observation that
    ``recall.deliver`` appends itself (runtime/agent_tools.py ``_recall``: ``delivered=``), whose
    meta is ``{"recall": ...}``, with no ``call``. ``activating.unanswered`` (activating.py
    ``unanswered``) counts a call as answered only by an observation with ``meta.call``, so when
    the process dies after the model asked for a recall (the next model request is the longest
    wait of an activation, where a kill is most likely), the recovery appends "recall has no
    result: ... it may have run, in whole or in part, or not at all; check before running it
    again" beside the recall_result that answered it: a false statement the next activation
    reads. Expected: the delivered recall counts as its call's answer (its meta could name the
    call, or ``unanswered`` could skip calls whose tool delivers its own observation); only the
    exec call that truly has no result is answered."""
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context(CONTEXT, create=True)
        ctx.observe("user_message", "the kiwi shipment arrived in Rotterdam")
        _, act = ctx.begin_activation("default", "where did the kiwis go?")
        reply = _reply(ctx, act, ("c-recall", "recall"), ("c-exec", "exec"))
        ctx.recall.deliver("search", session="default", query="kiwi shipment")
        assert ctx.interrupt_running() == [act]
        answers = [
            (e.meta or {}).get("call")
            for e in ctx.events()
            if e.seq > reply.seq and e.kind == "tool_result"
        ]
        assert answers == ["c-exec"], f"recovery answered {answers}"


def test_a_damaged_calibration_does_not_make_the_whole_context_unreadable(tmp_path: Path) -> None:
    """A stored calibration that is not a JSON object (``calibration:old-model`` = ``[1.0, 3]``)
    is reported as damaged with "delete it (the next activations calibrate again)": a local
    problem of one model's token factor. But ``SqliteActive.settings()`` (store/sqlite_active.py
    ``settings``) decodes every row of the context with ``decode_setting`` whatever was asked,
    so ``status()``, ``encode()``, ``budget()`` and the calibration of another model all raise
    that StoreError: a context whose budget and view are intact can no longer be shown or run
    (every ``morphz`` command on it fails) because of an unused model's calibration. The same
    row as a JSON object of the wrong fields fails only ``calibration("old-model")``. Expected:
    each setting is decoded when it is read (``settings()`` returns the rows, the readers decode
    the one they need), so only what reads that calibration fails."""
    path = tmp_path / "m.db"
    with morphz.open(path) as db:
        db.context(CONTEXT, create=True).observe("user_message", "hello")
    conn = hand_connect(path)
    with conn:
        conn.execute(
            "INSERT INTO context_settings VALUES (?, 'calibration:old-model', '[1.0, 3]')",
            (CONTEXT,),
        )
    conn.close()
    with morphz.open(path) as db:
        ctx = db.context(CONTEXT)
        with pytest.raises(StoreError, match="calibration:old-model"):
            ctx.calibration("old-model")
        ctx.calibration("new-model")
        ctx.budget()
        ctx.status()
        assert "hello" in ctx.encode().text
