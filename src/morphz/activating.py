"""Activations of a context: starting one (rooted on an observation, or on a user message
written with it), finishing one, and interrupting those whose process is gone. Each step is
one runtime event written in one database transaction (``Context._runtime_event``); the
:class:`~morphz.contextdb.Context` methods of the same names are the public surface."""

from __future__ import annotations

import string
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from morphz import committing, owners, recovery, staging
from morphz import events as ev
from morphz import observe as appending
from morphz.checks import check_text
from morphz.errors import InputError
from morphz.store.base import ActivationRow, ReadTxn, WriteTxn
from morphz.txlang import print_tx
from morphz.txlang.ops import RestoreSession, Tx

if TYPE_CHECKING:
    from morphz.contextdb import Context

# under the writer lock: the root's seq and ref, written (a user message) or checked
Rooted = Callable[[WriteTxn], tuple[int | None, str | None]]


def existing_root(context_id: str, root_seq: int | None, root: str | None) -> Rooted:
    """The root ``root`` (an observation already in the context) as :func:`start` takes it:
    refused when it is no observation, or when it is retired (the model could not see the
    request it runs on)."""

    def rooted(w: WriteTxn) -> tuple[int | None, str | None]:
        if root_seq is None:
            return None, None
        obs = w.observation(root_seq)
        if obs is None:
            raise InputError(f"root {root} is not an observation of context '{context_id}'")
        if obs.lifecycle != "active":
            raise InputError(
                f"root {root} is retired: restore it first ((restore {root}) in a "
                "transaction), or root the activation on an observation in view"
            )
        return root_seq, root

    return rooted


def new_activation_id() -> str:
    """``act-`` and twelve random lower-case letters (56 bits): every request's kernel names the
    activation, and letters alone count the same tokens whatever they are (a hex id's digits
    and letters cut into a varying number of pre-tokenizer chunks, so its estimate varied)."""
    draw = uuid.uuid4().int & (1 << 56) - 1  # its node and clock sequence: random bits only
    letters = []
    for _ in range(12):
        draw, letter = divmod(draw, 26)
        letters.append(string.ascii_lowercase[letter])
    return "act-" + "".join(letters)


def start(ctx: Context, session: str, objective: str | None, rooted: Rooted) -> str:
    """Record an activation's start; ``rooted`` gives its root (seq and ref) under the writer
    lock, before the start event is appended (writing the root itself, or checking it)."""
    appending.check_objective(objective)
    activation_id = new_activation_id()
    owner = owners.current_owner()
    root: list[tuple[int | None, str | None]] = []

    def before(w: WriteTxn) -> None:
        restore_retired(w, session, ctx.db.timestamp)
        root.append(rooted(w))

    def put(w: WriteTxn, seq: int) -> None:
        row = ActivationRow(
            activation_id, session, root[0][0], "running", seq, None, owner, objective
        )
        w.put_activation(row)

    def payload() -> dict[str, Any]:
        return {"activation": activation_id, "root": root[0][1], "objective": objective}

    ctx._runtime_event(ev.ACTIVATION_STARTED, None, payload, session, on_write=put, before=before)
    owners.track(activation_id)
    return activation_id


RESTORED_REASON = "new work started in this retired session: it returns to the working set"


def restore_retired(w: WriteTxn, session: str, now: Callable[[], str]) -> None:
    """Restore ``session`` when it is retired, inside the write ``w``: new work there (a
    request from ``morphz exec``/``chat``, an activation a caller starts) is the plainest sign
    it is wanted again, and running work in a session every directory leaves out as retired is
    the state ``retire-session`` refuses. Recorded as the transaction ``(restore-session S)``
    committed in ``session`` at the current version (the audit replays it like any commit),
    its time read from ``now`` only then (a store's clock is not read for nothing)."""
    state = w.session(session)
    if state is None or state.attention != "retired":
        return
    tx = Tx(w.row.version, RESTORED_REASON, (RestoreSession((session,)),))
    committing.commit_in(
        w, tx, print_tx(tx), session, now(), budget=None, budget_keys={}, calibration=None
    )


def finish(
    ctx: Context,
    activation_id: str,
    state: str,
    reason: str | None,
    before: Callable[[WriteTxn, ActivationRow], None] | None = None,
    *,
    unanswered: Mapping[str, object] | None = None,
    observations: Iterable[appending.Observation] = (),
) -> list[ev.Event]:
    """Mark an activation delivered, failed or interrupted (see Context.finish_activation);
    ``before`` writes what goes before the end, in the same transaction, under the lock, then
    ``observations`` are appended in its session as one batch (a delivered reply's
    ``agent_reply``), then what is still staged of its calls' outcomes is recorded
    (:func:`staging.flush`); ``unanswered`` goes into the end's payload when given. Returns the
    events of ``observations``."""
    if state not in ("delivered", "failed", "interrupted"):
        raise InputError("an activation finishes as delivered, failed or interrupted")
    unanswered = appending.check_meta(unanswered, "unanswered")
    appending.check_reason(reason)
    check_activation_id(activation_id)
    batch = appending.check_all(observations)
    with ctx.db.store.read(ctx.id) as r:
        session = running(r, ctx.id, activation_id).session_id
    appended: list[ev.Event] = []

    def check(w: WriteTxn) -> None:
        act = running(w, ctx.id, activation_id)  # again, under the writer lock
        if before is not None:
            before(w, act)
        if batch:
            appended.extend(ctx._append(w, act.session_id, batch, ctx.db.timestamp()))
        staging.flush(ctx, w, act)

    def put(w: WriteTxn, seq: int) -> None:
        act = running(w, ctx.id, activation_id)
        w.put_activation(replace(act, state=state, finished_seq=seq))

    payload: dict[str, Any] = {"activation": activation_id, "state": state, "reason": reason}
    if unanswered is not None:
        payload["unanswered"] = unanswered
    ctx._runtime_event(ev.ACTIVATION_FINISHED, None, payload, session, on_write=put, before=check)
    owners.untrack(activation_id)
    return appended


def check_owns(r: ReadTxn, context_id: str, activation_id: str | None, session: str) -> None:
    """InputError unless ``activation_id`` is None or an activation of ``session`` in this
    context: the one whose work a batch of observations records (observe_batch's
    ``activation``). It may have ended: an activation marked interrupted by another process
    (``context recover --activation``, for a process on another host) while its engine still
    runs goes on recording what its calls did, which history keeps."""
    if activation_id is None:
        return
    act = r.activation(check_activation_id(activation_id))
    if act is None:
        raise InputError(
            f"activation {activation_id} is not an activation of context '{context_id}': name "
            "the one whose work these observations record (or none)"
        )
    if act.session_id != session:
        raise InputError(
            f"activation {activation_id} runs in session '{act.session_id}', not "
            f"'{session}': record its work in its own session"
        )


def check_call(activation: str | None, call: str | None) -> dict[str, str] | None:
    """The tool call a commit answers (its activation and call id), as the commit's payload
    keeps it; None when neither is given. InputError when a call is named without its
    activation (call ids are unique only within one model reply)."""
    if call is None:
        return None if activation is None else {"activation": check_activation_id(activation)}
    if not isinstance(call, str):
        raise InputError(f"a call id is text (a tool call's id), not {type(call).__name__}")
    if activation is None:
        raise InputError(
            f"call {call!r} names a tool call of an activation: give its activation too"
        )
    return {"activation": check_activation_id(activation), "call": check_text(call, "call id")}


def running(r: ReadTxn, context_id: str, activation_id: str) -> ActivationRow:
    act = r.activation(activation_id)
    if act is None or act.state != "running":
        raise InputError(f"activation {activation_id} is not running in context '{context_id}'")
    return act


def interrupt_orphaned(ctx: Context, reason: str, include_unowned: bool) -> list[str]:
    """Interrupt the running activations whose owner provably died (and, with
    ``include_unowned``, those with none recorded); the ids this call marked."""
    marked: list[str] = []
    for act in ctx.activations(running_only=True):
        owner = act.owner
        if owner is None:
            if not include_unowned:
                continue
            detail = "no owner was recorded"
        elif owners.still_runs(owner, act.activation_id) is False:
            detail = f"owner {owner.describe()} " + (
                "no longer runs it" if owner == owners.current_owner() else "is gone"
            )
        else:
            continue
        if interrupt(ctx, act.activation_id, f"{reason} ({detail})"):
            marked.append(act.activation_id)
    return marked


def interrupt(ctx: Context, activation_id: str, reason: str) -> bool:
    """Finish one activation whose process is gone as interrupted, with a result for each call
    of its last model reply that has none (:func:`morphz.recovery.unanswered`), in one
    transaction; False when another caller finished it first."""

    def answer(w: WriteTxn, act: ActivationRow) -> None:
        results, reply_seq, used = recovery.unanswered(w, act, reason)
        if results:
            recorded, mine = ctx.db.timestamp(), act.activation_id
            staging.append(ctx, w, act.session_id, mine, results, recorded=recorded)
            w.unstage_results(mine, reply_seq, used)

    try:
        finish(ctx, activation_id, "interrupted", reason, before=answer)
    except InputError:
        with ctx.db.store.read(ctx.id) as r:
            now = r.activation(activation_id)
        if now is None or now.state == "running":
            raise
        return False
    return True


def check_activation_id(value: object) -> str:
    """``value`` when it is an activation id's text; an InputError otherwise (not a driver
    error from binding it: begin_activation returns (event, id), an easy slip)."""
    if not isinstance(value, str):
        raise InputError(
            f"an activation id is text such as act-1f2e..., not {type(value).__name__}: "
            "begin_activation returns (event, activation_id)"
        )
    return check_text(value, "activation id")
