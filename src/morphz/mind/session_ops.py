"""The retire-session and restore-session operations (mind.apply dispatches to them): a session's
attention, retired from another session while none of its work runs, or restored."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from morphz.errors import NotFoundError, ValidationError
from morphz.mind.state import SessionState
from morphz.txlang import ops as o

if TYPE_CHECKING:
    from morphz.mind.apply import _Apply


def _need_session(a: _Apply, sid: str) -> SessionState:
    state = a.view.session(sid)
    if state is None:
        raise a.fail(NotFoundError, f"session '{sid}' does not exist in this context", target=sid)
    return state


def retire_session(a: _Apply, op: o.RetireSession) -> None:
    for sid in op.sessions:
        state = _need_session(a, sid)
        if sid == a.env.session:
            raise a.fail(
                ValidationError,
                f"session '{sid}' is the current session, which cannot retire itself: retire "
                "it from another session",
                target=sid,
            )
        if a.env.session_busy(sid):
            raise a.fail(
                ValidationError,
                f"session '{sid}' has running work: wait until its activations finish",
                target=sid,
            )
        if state.attention == "retired":
            raise a.fail(
                ValidationError,
                f"session '{sid}' is already retired: drop this operation",
                target=sid,
            )
        a.changes.sessions[sid] = replace(state, attention="retired")
        a.changes.written.add(f"session:{sid}")
        a.effect(sid, "session retired")


def restore_session(a: _Apply, op: o.RestoreSession) -> None:
    for sid in op.sessions:
        state = _need_session(a, sid)
        if state.attention == "active":
            raise a.fail(
                ValidationError,
                f"session '{sid}' is already active: drop this operation",
                target=sid,
            )
        a.changes.sessions[sid] = replace(state, attention="active")
        a.changes.written.add(f"session:{sid}")
        a.effect(sid, "session restored")
