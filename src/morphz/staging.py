"""A tool call's outcome made durable as the call ends (DESIGN §13: a process killed at any
instant loses no fact the runtime held). The runtime keeps a reply's outcomes and records them
as one batch (one tick at most); each is first *staged* (:func:`stage`, its own short write,
store table ``staged_results``), and the batch (:func:`record`) deletes the staged rows of the
calls it records in its own write, so an outcome is either staged or an event, never both and
never neither. The write that ends an activation records what is still staged, marked
``recovered`` in its meta (:func:`recovered`, :func:`flush`, and ``recovery.unanswered`` for
the last reply's calls): the outcomes of the calls that ended before a killed process recorded
its step. Staged rows are runtime state, not history: the audit replays none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from morphz import activating
from morphz import events as ev
from morphz import observe as appending
from morphz.observe import Observation
from morphz.store.base import ActivationRow, StagedResult, WriteTxn

if TYPE_CHECKING:
    from morphz.contextdb import Context

RECOVERED = "recovered"  # the meta key of a result recorded from its staged outcome


@dataclass(frozen=True, slots=True)
class Outcome:
    """A call's outcome as its step's batch records it: ``position`` is the call's index among
    its reply's calls, ``ticks`` whether it ticks the clock (the result of a tool that ran)."""

    position: int
    observation: Observation
    ticks: bool


def stage(ctx: Context, session: str, activation: str, reply_seq: int, outcome: Outcome) -> bool:
    """Stage ``outcome`` of a call of the reply ``reply_seq`` in one write; False (nothing
    written) when the activation is no longer running: another process ended it (``context
    recover --activation``, ``interrupt_running``) while its engine runs, and nothing would
    record a row staged now, so the batch records the outcome itself."""
    checked = appending.check(outcome.observation)
    with ctx.db.store.write(ctx.id) as w:
        activating.check_owns(w, ctx.id, activation, session)
        act = w.activation(activation)
        if act is None or act.state != "running":
            return False
        staged = StagedResult(
            activation,
            reply_seq,
            outcome.position,
            checked.kind,
            checked.text,
            checked.meta or {},
            outcome.ticks,
        )
        w.stage_result(staged)
    return True


def record(
    ctx: Context,
    session: str,
    activation: str,
    reply_seq: int,
    outcomes: Sequence[tuple[Outcome, bool]],
) -> list[ev.Event]:
    """Record the ``outcomes`` of calls of the reply ``reply_seq`` (each with whether it was
    staged) as one batch in one write, deleting their staged rows in it. A staged outcome whose
    row is gone is left out: the write that ended the activation meanwhile (another process's
    recovery) recorded it already. Ticks once when an outcome recorded ticks."""
    checked = [
        (outcome, appending.check(outcome.observation), staged) for outcome, staged in outcomes
    ]
    recorded = ctx.db.timestamp()
    with ctx.db.store.write(ctx.id) as w:
        activating.check_owns(w, ctx.id, activation, session)
        was = [outcome.position for outcome, _, staged in checked if staged]
        still = w.unstage_results(activation, reply_seq, was)
        kept = [(c, o.ticks) for o, c, staged in checked if not staged or o.position in still]
        if not kept:
            return []
        return append(ctx, w, session, activation, kept, recorded=recorded)


def append(
    ctx: Context,
    w: WriteTxn,
    session: str,
    activation: str,
    results: Sequence[tuple[appending.Checked, bool]],
    *,
    recorded: str,
) -> list[ev.Event]:
    """Append ``results`` (each with whether it ticks) in ``w`` as one batch naming
    ``activation``: one tick, shown on the first that ticks, when any does."""
    ticked = next((i for i, (_, ticks) in enumerate(results) if ticks), None)
    batch = [checked for checked, _ in results]
    return ctx._append(
        w, session, batch, recorded, ticked is not None, ticked=ticked, activation=activation
    )


def recovered(staged: StagedResult) -> appending.Checked:
    """The result a staged outcome is recorded as by the write that ends its activation: its
    kind, text and meta as its batch would have recorded them, and ``recovered: true``."""
    meta = {**staged.meta, RECOVERED: True}
    return appending.check(Observation(staged.kind, staged.text, meta=meta))


def flush(ctx: Context, w: WriteTxn, act: ActivationRow) -> None:
    """Inside the write that ends ``act``: record what is still staged of it (the outcomes of
    calls whose batch was never written: its process was killed, or that write failed) and
    delete them, so no staged row outlives its activation."""
    rows = w.staged_results(act.activation_id)
    if not rows:
        return
    results = [(recovered(row), row.ticks) for row in rows]
    append(ctx, w, act.session_id, act.activation_id, results, recorded=ctx.db.timestamp())
    w.unstage_activation(act.activation_id)


__all__ = ["RECOVERED", "Outcome", "append", "flush", "record", "recovered", "stage"]
