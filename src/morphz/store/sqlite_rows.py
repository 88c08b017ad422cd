"""Row conversions shared by the SQLite modules."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from typing import Any

from morphz.errors import DamagedStoreError
from morphz.mind.state import Frame
from morphz.owners import Owner
from morphz.store.active_base import damaged_event
from morphz.store.base import ActivationRow

FRAME_COLS = "frame_id, body, sources, revision, lifecycle, protected, pos, deadline, reason"


def frame_from_row(row: tuple[Any, ...]) -> Frame:
    fid, body, sources, revision, lifecycle, protected, pos, deadline, reason = row
    return Frame(
        fid,
        body,
        tuple(sources.split()) if sources else (),
        revision,
        lifecycle,
        bool(protected),
        pos,
        deadline,
        reason,
    )


# the frame columns that hold text (the others are numbers): where a row may fail to decode
FRAME_TEXT_COLUMNS = ("frame_id", "body", "sources", "lifecycle", "reason")


def read_frames(
    conn: sqlite3.Connection, cid: str, where: str, params: tuple[Any, ...]
) -> list[Frame]:
    """The frames of context ``cid`` that ``where`` (the SQL after ``FROM frames``, with
    ``params``) selects, fetched whole on a cursor closed before this returns, even when a row
    fails: a statement left open (by a traceback that keeps it) would hold the table locked
    for the connection's next write (review 20c). A row whose stored text is not UTF-8 is a
    DamagedStoreError naming the frame and the column."""
    cursor = conn.execute(f"SELECT {FRAME_COLS} FROM frames {where}", params)
    try:
        rows = cursor.fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
        failed: sqlite3.Error | None = exc
    else:
        failed = None
    finally:
        cursor.close()
    if failed is not None:
        raise _damaged_frame(conn, cid, failed)
    return [frame_from_row(row) for row in rows]


def _damaged_frame(conn: sqlite3.Connection, cid: str, exc: sqlite3.Error) -> DamagedStoreError:
    """The DamagedStoreError of a frame row of ``cid`` that failed to decode with ``exc``: it
    names the first frame whose text is not UTF-8 (read as bytes), and has a ValueError as its
    cause, as a damaged event's has (the audit tells damage from a failing store by it)."""
    casts = ", ".join(f"CAST({column} AS BLOB)" for column in FRAME_TEXT_COLUMNS)
    rows = conn.execute(
        f"SELECT {casts} FROM frames WHERE context_id = ? ORDER BY frame_id", (cid,)
    ).fetchall()
    where = "a frame"
    for raw_id, *texts in rows:
        name = bytes(raw_id).decode("utf-8", "backslashreplace")
        bad = [c for c, raw in zip(FRAME_TEXT_COLUMNS, (raw_id, *texts), strict=True)
               if not _utf8(raw)]  # fmt: skip
        if bad:
            where = f"the {bad[0]} of frame {name}"
            break
    error = damaged_event(where, cid, f"its stored text is not UTF-8 ({exc})")
    error.__cause__ = ValueError(f"{where}: {exc}")
    return error


def _utf8(raw: bytes | None) -> bool:
    try:
        bytes(raw or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def release_statements(exc: BaseException) -> None:
    """Let go of the statements a failed read or write left open: the finished frames of
    ``exc``'s traceback keep their locals, among them the cursor of a statement that stopped
    mid-way (a row that failed to decode, a caller's error while it iterated). Such a statement
    keeps its read open after the transaction ends, for as long as the error lives, and a
    caller may keep it (a log, a list of failures, ``pytest.raises``): the thread's next reads
    would see that old snapshot, and the writer's next write would wait for ever once another
    process has written (SQLite's busy snapshot). Only the frames of this package's store
    modules, which hold its cursors, are cleared: a caller's callback that failed inside a read
    or a write keeps its locals for a debugger; frames still running are left as they are."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.startswith(_STORE):
            with contextlib.suppress(RuntimeError):  # still running: the read or write it leaves
                frame.clear()
        tb = tb.tb_next


_STORE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # morphz/store/


# how the driver words a text column it cannot decode (Python's sqlite3, every version we run)
_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


def undecodable_row(exc: BaseException, cid: str) -> DamagedStoreError | None:
    """The DamagedStoreError of a row of context ``cid`` whose stored text the driver could not
    decode (``exc``), naming the column, with a ValueError as its cause as a damaged event's has
    (the audit tells damage from a failing store by it); None for any other error. The reads
    that know their table name the row itself (read_frames, the events); this one is the
    boundary's, for every other table (a relation, a checkpoint, a frame's sources)."""
    match = _UNDECODABLE.search(str(exc))
    if not isinstance(exc, sqlite3.OperationalError) or match is None:
        return None
    where = f"the {match[1]!r} column of a stored row"
    error = damaged_event(where, cid, f"its stored text is not UTF-8 ({exc})")
    cause = ValueError(str(exc))
    cause.__cause__ = exc
    error.__cause__ = cause
    return error


ACTIVATION_COLS = (
    "activation_id, session_id, root_seq, state, started_seq, finished_seq, "
    "owner_host, owner_pid, owner_started, objective"
)


def activation_from_row(row: tuple[Any, ...]) -> ActivationRow:
    activation_id, session_id, root_seq, state, started_seq, finished_seq = row[:6]
    host, pid, started, objective = row[6:]
    owner = Owner(host, pid, started) if host is not None and pid is not None else None
    return ActivationRow(
        activation_id, session_id, root_seq, state, started_seq, finished_seq, owner, objective
    )


def activation_params(a: ActivationRow) -> tuple[Any, ...]:
    """The values of :data:`ACTIVATION_COLS` for ``a``."""
    owner = a.owner
    return (
        a.activation_id,
        a.session_id,
        a.root_seq,
        a.state,
        a.started_seq,
        a.finished_seq,
        owner.host if owner else None,
        owner.pid if owner else None,
        owner.started if owner else None,
        a.objective,
    )


# the event columns that hold text (the others are numbers): where a row may fail to decode
EVENT_TEXT_COLUMNS = (
    "kind", "session_id", "time", "recorded_at", "text", "meta", "payload", "head"
)  # fmt: skip


def undecodable_event(
    conn: sqlite3.Connection, cid: str, after_seq: int, size: int
) -> tuple[int, str] | None:
    """The first of the ``size`` events of context ``cid`` after ``after_seq`` whose stored
    text (any text column) is not UTF-8, read as bytes: its seq and where (``the payload of
    event @e12``); None when none is found (the row changed since)."""
    casts = ", ".join(f"CAST({column} AS BLOB)" for column in EVENT_TEXT_COLUMNS)
    rows = conn.execute(
        f"SELECT seq, {casts} FROM events WHERE context_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (cid, after_seq, size),
    ).fetchall()
    for seq, *texts in rows:
        for column, raw in zip(EVENT_TEXT_COLUMNS, texts, strict=True):
            try:
                bytes(raw or b"").decode("utf-8")
            except UnicodeDecodeError:
                return seq, f"the {column} of event @e{seq}"
    return None
