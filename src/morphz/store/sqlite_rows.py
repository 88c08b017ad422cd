"""Row conversions shared by the SQLite modules."""

from __future__ import annotations

import sqlite3
from typing import Any

from morphz.mind.state import Frame
from morphz.owners import Owner
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
