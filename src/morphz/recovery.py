"""What recovery tells the agent of the calls a dead process left unanswered (DESIGN §13): the
write that interrupts an orphaned activation (``activating.interrupt``) records a result for
each call of its last model reply that none of its own results answers, saying what the log
shows of it. A call's staged outcome is its result (:mod:`morphz.staging`); a recall may be
answered by the result it delivered; a ``context_tx`` whose commit names the call committed
(whole), and one no commit names did not; a call awaiting approval did not run, and one denied
was not approved; a call after the one that was running had not started; any other call may
have run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from morphz import events as ev
from morphz import observe as appending
from morphz import staging
from morphz.store.base import ActivationRow, ReadTxn

Result = tuple[appending.Checked, bool]  # a result and whether it ticks the clock


@dataclass(slots=True)
class Trail:
    """What the log holds of an activation's last model reply and after it."""

    reply: ev.Event | None = None
    answered: set[str] = field(default_factory=set)  # the call ids its observations answer
    recalled: int = 0  # results the recall tool delivered (they name no call), in call order
    asked: dict[str, str] = field(default_factory=dict)  # call id -> its approval_request ref
    decided: dict[str, bool] = field(default_factory=dict)  # approval_request ref -> approved
    commits: dict[str, ev.Event] = field(default_factory=dict)  # call id -> commit naming it
    unnamed: bool = False  # a commit of the activation's session names no call


def unanswered(r: ReadTxn, act: ActivationRow, reason: str) -> tuple[list[Result], int, list[int]]:
    """A result for each tool call of ``act``'s last model reply that no observation of ``act``
    answers (``meta.call``), in call order, each with whether it ticks the clock; that reply's
    seq; the positions of the calls answered from their staged outcome. A call that ended
    before the process died has its outcome staged: that is its result (``recovered``; it ticks
    when its tool ran), looked at first, since it names its call exactly. A recall with nothing
    staged is taken as answered by one of the results the recall tool delivered, in call order.
    Any other call gets what the log shows of it (:func:`_told`; no tick: none of them is a
    result of a tool that is known to have run). Without these the next activation would see
    the request and nothing of the work already done (a deployment, a file written)."""
    trail = _trail(r, act)
    reply = trail.reply
    if reply is None or reply.payload is None:
        return [], 0, []
    staged = {
        s.position: s for s in r.staged_results(act.activation_id) if s.reply_seq == reply.seq
    }
    results: list[Result] = []
    used: list[int] = []
    in_order = reply.payload.get("staged_calls") is True  # see :func:`_not_started`
    running: str | None = None  # the call that was running, when that is known
    for position, call in enumerate(reply.payload.get("tool_calls", [])):
        name, call_id = call.get("name"), call.get("id")
        if not isinstance(call_id, str) or call_id in trail.answered:
            continue
        if position in staged:  # the staging says exactly which call ended: first
            results.append((staging.recovered(staged[position]), staged[position].ticks))
            used.append(position)
            continue
        if name == "recall" and trail.recalled:  # answered by the result it delivered
            trail.recalled -= 1
            continue
        after = f"{reason} after the model asked for this call ({reply.ref})"
        if running is not None:
            text, error = _not_started(str(name), running, after), True
        else:
            text, error = _told(str(name), call_id, trail, after)
            running = f"{name}, call {call_id}" if in_order else None
        meta = {"tool": name, "call": call_id, "error": error}
        results.append(
            (appending.check(appending.Observation("tool_result", text, meta=meta)), False)
        )
    return results, reply.seq, used


def _told(name: str, call: str, trail: Trail, after: str) -> tuple[str, bool]:
    """What the result of the unanswered ``call`` of the tool ``name`` says, and whether it is
    an error: what the log shows of it, ``after`` saying how its process ended."""
    if name == "context_tx":
        return _transaction(call, trail, after)
    request = trail.asked.get(call)
    if request is not None and request not in trail.decided:  # the person was being asked
        return (
            f"{name} did not run: {after}, while it awaited approval ({request}); call it "
            "again if it is still wanted (approval is asked again)",
            True,
        )
    if request is not None and not trail.decided[request]:
        return f"{name} was not approved", True  # as its batch would have said
    return (
        f"{name} has no result: {after}, so it may have run, in whole or in part, or not at "
        "all; check before running it again",
        True,
    )


def _not_started(name: str, running: str, after: str) -> str:
    """What recovery says of a call after the one that was running when its process died. A
    reply whose payload says ``staged_calls`` (written since calls were staged) ran its calls
    one after another, each outcome staged as it ended: the first call with nothing staged was
    running, or waiting for approval, and none after it had started. Replies of earlier
    releases, whose outcomes were kept in memory until the step's batch, say nothing of it:
    every unanswered call of theirs may have run."""
    return (
        f"{name} did not run: {after}, while an earlier call of the same reply ({running}) had "
        "not ended, and calls run one after another; call it again if it is still wanted"
    )


def _transaction(call: str, trail: Trail, after: str) -> tuple[str, bool]:
    """What recovery says of a ``context_tx`` call with no result. A transaction commits whole
    or not at all, in one write, and the runtime's commit names its call: one that names it
    committed; with none naming it and no commit of the session naming no call (an earlier
    release's, or one made outside the runtime) it did not."""
    commit = trail.commits.get(call)
    if commit is not None:
        tx_id = (commit.payload or {}).get("tx_id", "its transaction")
        return (
            f"context_tx committed: {tx_id} is {commit.ref} (mind version {commit.version}), "
            f"whole; its receipt was not recorded, since {after}. Do not commit it again "
            f"(recall reads {commit.ref})",
            False,
        )
    if not trail.unnamed:
        return (
            f"context_tx did not commit: {after}, and no commit names this call (a transaction "
            "commits whole or not at all, so nothing of it is in the mind); commit it again "
            "if it is still wanted",
            True,
        )
    return (
        f"context_tx has no result: {after}, so its transaction may have committed (whole: "
        "never in part) or not; check the mind before committing it again",
        True,
    )


def _trail(r: ReadTxn, act: ActivationRow) -> Trail:
    """What the log holds of ``act``'s last model reply and after it (a recall appends its own
    result: meta.recall, no call id)."""
    trail = Trail()
    for event in r.events(act.started_seq):
        payload = event.payload or {}
        if event.kind == ev.MODEL_REPLY and payload.get("activation") == act.activation_id:
            trail = Trail(reply=event)
        elif trail.reply is not None:
            _note(trail, event, payload, act)
    return trail


def _note(trail: Trail, event: ev.Event, payload: dict[str, Any], act: ActivationRow) -> None:
    """Note what ``event``, after the last reply, says of its calls."""
    if event.kind == ev.TX_COMMITTED:
        call = payload.get("call")
        if payload.get("activation") == act.activation_id and isinstance(call, str):
            trail.commits[call] = event
        elif event.session_id == act.session_id and "call" not in payload:
            trail.unnamed = True
    elif not _of(event, act):
        return
    elif event.kind == ev.APPROVAL_REQUEST and isinstance(payload.get("call"), str):
        trail.asked[payload["call"]] = event.ref
    elif event.meta:
        call, request = event.meta.get("call"), event.meta.get("request")
        if isinstance(call, str):
            trail.answered.add(call)
        elif event.kind == "recall_result" and "recall" in event.meta:
            trail.recalled += 1
        elif event.kind == "approval_result" and isinstance(request, str):
            trail.decided[request] = bool(event.meta.get("approved"))


def _of(event: ev.Event, act: ActivationRow) -> bool:
    """Whether ``event`` may record ``act``'s work: its payload names ``act`` (call ids are
    unique only within one reply, so another activation of the session may use the same); one
    written before results named their activation, when it is of ``act``'s session."""
    named = (event.payload or {}).get("activation")
    if named is not None:
        return bool(named == act.activation_id)
    return event.session_id == act.session_id


__all__ = ["Trail", "unanswered"]
