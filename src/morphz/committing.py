"""Committing a context transaction inside one write: the rebase decision, the mind layer's
changes, the event and its receipt, the projection and the recall index, and the `budget`
refusal of a transaction that would leave a request that cannot be served: the smallest
maintenance request (its fixed part and the frames in view) past the critical level.
:meth:`morphz.contextdb.Context.commit` parses and checks the text, then calls :func:`commit_in`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz import owners
from morphz.capacity import LIMIT_KEYS, Budget, budget_over, check_budget_keys
from morphz.checks import check_whole
from morphz.errors import BudgetError, InputError
from morphz.ids import make_ref
from morphz.mind import (
    Changes,
    Env,
    apply_tx,
    chain_head,
    decide_rebase,
    ensure_session,
    tx_boundaries,
)
from morphz.observe import check_setting
from morphz.recall import maintain
from morphz.recall.documents import removed_content
from morphz.results import Receipt
from morphz.store.base import ContextRow, WriteTxn
from morphz.txlang.ops import Tx
from morphz.txlang.sexpr import line_col

if TYPE_CHECKING:
    from morphz.encoding.tokens import Calibration


def check_measures(
    budget: object,
    budget_keys: object,
    calibration: object,
    request_floor: object,
    profile_tokens: object = None,
) -> None:
    """InputError, before anything is read or written, unless what a commit measures with is
    of its type: ``budget`` a Budget, ``budget_keys`` a mapping of its fields, ``calibration``
    a Calibration (each or None), ``request_floor`` and ``profile_tokens`` counts of tokens or
    None."""
    if budget is not None:
        check_setting(budget, "budget")
    if budget_keys is not None:
        check_budget_keys(budget_keys, "commit's budget_keys")
    if calibration is not None:
        check_setting(calibration, "calibration")
    floor = None
    if request_floor is not None:
        floor = check_whole(request_floor, "request_floor", 0, unit="tokens")
    if profile_tokens is not None:
        share = check_whole(profile_tokens, "profile_tokens", 0, unit="tokens")
        if floor is None or share > floor:
            raise InputError(
                f"profile_tokens ({profile_tokens}) is the profile's share of request_floor: "
                f"give request_floor too, at least as large (it is {request_floor})"
            )


def commit_in(
    w: WriteTxn,
    tx: Tx,
    canonical: str,
    session: str,
    recorded: str,
    *,
    budget: Budget | None,
    budget_keys: Mapping[str, int],
    calibration: Calibration | None,
    request_floor: int | None = None,
    profile_tokens: int | None = None,
    answers: Mapping[str, str] | None = None,
) -> Receipt:
    """Commit ``tx`` (its ``canonical`` text recorded) inside the write ``w``: decide the
    rebase, apply it through the mind layer, append its event, write the projection and the
    recall index, and refuse (nothing written) what the budget cannot hold: ``request_floor``
    is the figure of the smallest maintenance request on an empty context (None: the protocol
    and :data:`MINIMUM_ALLOWANCE`), ``profile_tokens`` the bound profile's share of it.
    ``answers``: the runtime's tool call this commit answers (its ``activation`` and ``call``
    id), kept in the event's payload: recovery answers that call with the commit when its
    process died before the receipt was recorded."""
    row = w.row
    changed = (
        w.changed_boundaries(tx_boundaries(tx), tx.base_version)
        if tx.base_version < row.version
        else {}
    )
    rebased = decide_rebase(tx, row.version, row.barrier, changed)
    env = Env(
        session,
        w.session_busy,
        w.causally_protected,
        _orphan_note(w),
        _threshold(w),
        _preview_units(w),
    )
    changes = apply_tx(w, tx, env)
    ensure_session(w, changes, session)
    version, seq = row.version + 1, row.last_seq + 1
    head = chain_head(row.head, changes)
    receipt = Receipt(
        tx_id=f"tx-{version}",
        event=make_ref(seq),
        seq=seq,
        session=session,
        base_version=tx.base_version,
        before_version=row.version,
        after_version=version,
        rebased=rebased,
        effects=tuple(changes.effects),
        head=head,
    )
    payload = {
        "tx_id": receipt.tx_id,
        "base_version": tx.base_version,
        "rebased": rebased,
        "reason": tx.reason,
        **(answers or {}),
    }
    reindex = maintain.frames_to_reindex(w, changes)  # with the old rows of their frames
    # what a rollback, revise or unrelate took out of the mind: the bodies from the old rows
    # frames_to_reindex read (a frame not there keeps its body), the relations from the store
    payload.update(removed_content(changes, reindex.get, w.has_edge))
    event = ev.Event(
        w.row.context_id,
        seq,
        ev.TX_COMMITTED,
        session,
        recorded,
        recorded,
        canonical,
        None,
        payload,
        version,
        row.clock,
        head,
    )
    w.append_event(event)
    grown = w.write_changes(changes, version, seq)
    if grown > 0:
        limits = Limits(budget, budget_keys, calibration, request_floor, profile_tokens)
        _check_room(w, tx, changes, limits)
    # the frames' documents (negative rowids) before the event's: FTS5 writes a segment each
    # time a rowid goes down within the transaction (SqliteRecall.put_frames)
    maintain.index_frames(w, list(reindex), recorded)
    maintain.index_events(w, [event])
    w.set_row(
        ContextRow(  # replace(row, ...) written out: several times cheaper
            row.context_id,
            row.created_at,
            version,
            row.clock,
            seq,
            head,
            row.window,
            row.initial_window,
            row.order_max if changes.order_max is None else changes.order_max,
            version if changes.barrier else row.barrier,
        )
    )
    w.touch_session(session, seq, recorded)
    return receipt


def _orphan_note(w: WriteTxn) -> Callable[[int], str]:
    """What a refusal to retire a running activation's root adds when the process running that
    activation is provably gone: no reply will come, and recovery lifts the protection."""

    def note(seq: int) -> str:
        for act in w.activations(running_only=True):
            owner = act.owner
            gone = owner is not None and owners.still_runs(owner, act.activation_id) is False
            if act.root_seq == seq and owner is not None and gone:
                return (
                    f"; its process ({owner.describe()}) no longer runs it and will never reply: "
                    f"`morphz context recover {w.row.context_id}` (Context."
                    "interrupt_orphaned()) marks the activation interrupted, which lifts "
                    "the protection"
                )
        return ""

    return note


def _threshold(w: WriteTxn) -> Callable[[], int]:
    """The context's preview threshold, read once if a receipt needs it."""
    from morphz.encoding.view import stored_view

    @functools.cache
    def read() -> int:
        return stored_view(w.active.settings(), w.row.context_id).preview_threshold

    return read


def _preview_units(w: WriteTxn) -> Callable[[int, int], int | None]:
    """The token units of an observation's inbox entry shown as a preview, rendered from its
    event as the inbox renders it (receipts count a retired or restored long observation so);
    None when its event is not in the store."""
    from morphz.encoding import render
    from morphz.store.active_base import observation_of
    from morphz.token_estimate import text_units

    def units(seq: int, threshold: int) -> int | None:
        event = w.event(seq)
        if event is None:
            return None
        return text_units(f" {render.observation(observation_of(event), threshold)}\n")

    return units


def _grower(tx: Tx, changes: Changes) -> dict[str, Any]:
    """Where a budget refusal points: the operation that adds the most tokens to the view."""
    # what grows the frames in view: not a retire's marks (retiring is the remedy the refusal
    # advises) nor an observation (the refusal measures frames and relations only)
    adds = [
        e
        for e in changes.effects
        if e.immediate < 0 and e.op != "retire" and not e.target.startswith("@")
    ]
    if not adds:
        return {}
    index = min(adds, key=lambda e: (e.immediate, e.index)).index
    line, column = line_col(tx.source, tx.ops[index].pos)
    return {"op": tx.ops[index].name, "op_index": index, "line": line, "column": column}


# tokens a maintenance request adds to the protocol and the frames when no runtime measured its
# floor (runtime/floor.py): the kernel, the empty regions, the context_tx and recall schemas, the
# system preamble and the framing (about 740 with the CLI's tools since the estimate counts chunks;
# a test keeps it above that)
MINIMUM_ALLOWANCE = 850


@dataclass(frozen=True, slots=True)
class Limits:
    """What the `budget` refusal measures with: the runtime's budget (None: the stored one) and
    the keys over it, its calibration, and the figure of its smallest maintenance request (and
    of the profile bound to the agent within it, which the refusal names when that request is
    past critical with no frame in view and the profile is at least half of it: None, not
    known)."""

    budget: Budget | None
    keys: Mapping[str, int]
    calibration: Calibration | None
    request_floor: int | None
    profile_tokens: int | None = None

    def floor(self) -> int:
        """The smallest maintenance request's figure, frames aside."""
        if self.request_floor is not None:
            return self.request_floor
        from morphz.encoding.protocol import PROTOCOL_TOKENS
        from morphz.encoding.tokens import figure

        return figure(PROTOCOL_TOKENS + MINIMUM_ALLOWANCE, self.calibration).tokens


def _where_raised(limits: Limits) -> str:
    """Where the budget a refusal measured against is raised: the keys given over the budget
    (a configuration's ``[budget]`` table) when they set its limit; else the budget its caller
    passed when it passed one (the stored one was not read); else the stored one."""
    if limits.keys.keys() & LIMIT_KEYS:
        return "the [budget] keys given over the context's budget, such as `limit` in morphz.toml"
    if limits.budget is not None:
        return (
            "this commit was measured with the budget its caller gave, not the context's "
            "stored one: raise the `budget=` passed to commit, or RuntimeConfig.budget for a "
            "runtime"
        )
    return "`morphz context budget CTX --limit N` or `--window N`"


def _check_room(w: WriteTxn, tx: Tx, changes: Changes, limits: Limits) -> None:
    """Refuse (BudgetError, nothing written) a transaction ``tx`` that grew the frames in view
    when the smallest maintenance request with them (its fixed part: protocol, kernel, the
    context_tx and recall schemas, preamble, framing) passes the critical level (counted as the
    runtime counts its requests): maintenance batches leave observations out, never the mind,
    so from there the maintenance reserve could not hold the current request and what the
    agent's steps produce, and soon no request could be served. A transaction that does not
    grow the frames (retiring, shortening, superseding) always commits."""
    from morphz.encoding.tokens import figure

    frames, stored = w.active.frames_and_budget()
    budget = budget_over(limits.budget or Budget.stored(stored, w.row.context_id), limits.keys)
    floor = limits.floor()
    needed = figure(frames, limits.calibration).tokens + floor
    if needed <= budget.critical:
        return
    details: dict[str, Any] = {"tokens": needed, "critical": budget.critical}
    if floor <= budget.critical:  # a smaller frame fits
        message = _frames_too_large(needed, budget.critical)
    # the profile is what does not fit only when the request is past critical without any
    # frame and the profile is at least half of it (review 17m)
    elif limits.profile_tokens is not None and limits.profile_tokens * 2 >= floor:
        message = _profile_too_large(needed, budget.critical, limits.profile_tokens)
        details["profile"] = limits.profile_tokens
    else:  # no frame at all fits: only a larger budget helps
        message = _budget_too_small(floor, budget.critical, limits)
        details["floor"] = floor
    # the grower is found only for a refusal: commits skip it
    raise BudgetError(message, details=details, **_grower(tx, changes))


def _frames_too_large(needed: int, critical: int) -> str:
    return (
        f"this transaction would leave frames in view that make even the smallest "
        f"maintenance request about {needed} tokens (with the protocol, the kernel and the "
        f"tool schemas), over the critical level of {critical}: maintenance could not "
        "bring the context back under it, since only observations are left out of a "
        "request. Make the frames smaller instead: derive a short summary and supersede "
        "what it replaces ((derive NEW (from OLD) ...), (relate NEW supersedes OLD) and "
        "(retire OLD) in one transaction retire OLD at once), "
        "revise frames shorter, or retire frames and wait for the window to end; or raise "
        "the budget"
    )


def _profile_too_large(needed: int, critical: int, profile: int) -> str:
    return (
        f"the smallest maintenance request on this context would take about {needed} "
        f"tokens with the frames this transaction leaves in view, over the critical level "
        f"of {critical}, and the profile bound to the agent (the evaluation-profile "
        f"region, sent with every request) takes about {profile} of them: no "
        "frame can make room for it. Give a shorter harness definition (the file that "
        "`profile =` names in morphz.toml, or `--profile FILE` for exec and chat), or raise "
        "the budget"
    )


def _budget_too_small(floor: int, critical: int, limits: Limits) -> str:
    return (
        f"even with no frame in view, the smallest maintenance request on this context "
        f"(the protocol, the kernel, the tool schemas and any profile) takes about {floor} "
        f"tokens, over the critical level of {critical}: no change to the frames can "
        f"make room. Raise the budget ({_where_raised(limits)})"
    )
