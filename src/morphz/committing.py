"""Committing a context transaction inside one write: the rebase decision, the mind layer's
changes, the event and its receipt, the projection and the recall index, and the `budget`
refusal of a transaction that would leave the frames in view past the critical level.
:meth:`morphz.contextdb.Context.commit` parses and checks the text, then calls :func:`commit_in`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from morphz import events as ev
from morphz.capacity import Budget, budget_over
from morphz.errors import BudgetError
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
from morphz.mind.state import Frame
from morphz.recall import maintain
from morphz.results import Receipt
from morphz.store.base import ContextRow, WriteTxn
from morphz.txlang.ops import Tx
from morphz.txlang.sexpr import line_col

if TYPE_CHECKING:
    from morphz.encoding.tokens import Calibration


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
) -> Receipt:
    """Commit ``tx`` (its ``canonical`` text recorded) inside the write ``w``: decide the
    rebase, apply it through the mind layer, append its event, write the projection and the
    recall index, and refuse (nothing written) what the budget cannot hold."""
    row = w.row
    changed = (
        w.changed_boundaries(tx_boundaries(tx), tx.base_version)
        if tx.base_version < row.version
        else {}
    )
    rebased = decide_rebase(tx, row.version, row.barrier, changed)
    env = Env(session, w.session_busy, w.causally_protected, _threshold(w))
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
    }
    reindex = maintain.frames_to_reindex(w, changes)  # with the old rows of their frames
    payload.update(_old_bodies(changes, reindex))  # what a rollback or revise replaced
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
        _check_room(w, tx, changes, budget, budget_keys, calibration=calibration)
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


def _old_bodies(changes: Changes, reindex: dict[str, Frame | None]) -> dict[str, dict[str, str]]:
    """The bodies ``changes`` take out of the mind, by frame id, for the commit's event and its
    recall document (a frame's own document holds only its current body): ``undone``, the
    frames removed (only a rollback removes any), and ``replaced``, the earlier bodies of
    frames that stay (a revise, or a rollback to an older revision). ``reindex`` holds the old
    row of every frame whose body changes (maintain.frames_to_reindex)."""
    undone: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for fid in sorted(reindex):
        old = reindex[fid]
        if old is None or fid not in changes.frames:  # created, or reindexed for an edge only
            continue
        new = changes.frames[fid]
        if new is None:
            undone[fid] = old.body
        elif new.body != old.body:
            replaced[fid] = old.body
    out: dict[str, dict[str, str]] = {}
    if undone:
        out["undone"] = undone
    if replaced:
        out["replaced"] = replaced
    return out


def _threshold(w: WriteTxn) -> Callable[[], int]:
    """The context's preview threshold, read once if a receipt needs it."""
    from morphz.encoding.view import stored_view

    @functools.cache
    def read() -> int:
        return stored_view(w.active.settings(), w.row.context_id).preview_threshold

    return read


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


def _check_room(
    w: WriteTxn,
    tx: Tx,
    changes: Changes,
    budget: Budget | None,
    keys: Mapping[str, int],
    *,
    calibration: Calibration | None,
) -> None:
    """Refuse (BudgetError, nothing written) a transaction ``tx`` that grew the frames in view
    when, with the protocol, they pass the critical level (counted with ``calibration``, as the
    runtime counts its requests): maintenance batches leave observations out, never the mind,
    so from there no request could be served. A transaction that does not grow the frames
    (retiring, shortening, superseding) always commits."""
    from morphz.encoding.protocol import PROTOCOL_TOKENS
    from morphz.encoding.tokens import figure

    frames, stored = w.active.frames_and_budget()
    base = budget or Budget.stored(stored, w.row.context_id)
    limits = budget_over(base, keys)
    needed = figure(frames + PROTOCOL_TOKENS, calibration).tokens
    if needed > limits.critical:
        raise BudgetError(
            f"this transaction would leave frames of about {needed} tokens in view (with the "
            f"protocol), over the critical level of {limits.critical}: maintenance could not "
            "bring the context back under it, since only observations are left out of a "
            "request. Make the frames smaller instead: derive a short summary and supersede "
            "what it replaces ((relate NEW supersedes OLD) and (retire OLD) retire OLD at once), "
            "revise frames shorter, or retire frames and wait for the window to end; or raise "
            "the budget",
            details={"tokens": needed, "critical": limits.critical},
            **_grower(tx, changes),  # found only for a refusal: commits skip it
        )
