"""Row conversions shared by the SQLite modules."""

from __future__ import annotations

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
