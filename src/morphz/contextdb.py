"""ContextDB: the service that appends events and commits transactions, one database
transaction per logical step, through the pure mind layer.

>>> import morphz
>>> db = morphz.open("morphz.db")                                       # doctest: +SKIP
>>> ctx = db.context("context-default", create=True)                    # doctest: +SKIP
>>> ev = ctx.observe("user_message", "prepare the deployment")          # doctest: +SKIP
>>> tx = f"(context-tx (base-version {ctx.version}) (create plan (step one)))"  # doctest: +SKIP
>>> receipt = ctx.commit(tx)                                             # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from morphz import activating, committing, reading
from morphz import events as ev
from morphz import observe as appending
from morphz import stored_settings as stored
from morphz.capacity import Budget
from morphz.checks import check_changes, check_id, check_whole, check_window, parse_ref
from morphz.errors import InputError, RecordNotFoundError
from morphz.ids import make_ref
from morphz.mind import (
    Changes,
    advances_clock,
    chain_head,
    ensure_session,
    finalize_due,
)
from morphz.observe import Observation
from morphz.recall import maintain
from morphz.results import AuditReport, Mind, Receipt, Status
from morphz.store.base import ActivationRow, SessionRow, WriteTxn
from morphz.stored_settings import calibration_name, read_setting
from morphz.txlang import print_tx, read_tx
from morphz.txlang.validate import check_new

if TYPE_CHECKING:
    from morphz.database import Database
    from morphz.encoding.compile import Encoding
    from morphz.encoding.options import EncodeOptions
    from morphz.encoding.tokens import Calibration
    from morphz.encoding.view import View
    from morphz.recall.api import Recall, RecallIndex

DEFAULT_SESSION = "default"
DEFAULT_CONTEXT = "context-default"
MAX_SEQ = 2**63 - 1  # the largest event seq SQLite stores


class Context:
    """One context: its event history, mind projection and sessions."""

    def __init__(self, db: Database, context_id: str) -> None:
        self.db = db
        self.id = context_id

    def __repr__(self) -> str:
        return f"Context({self.id!r}, db={self.db!r})"  # which store, and whether it is closed

    # ------------------------------------------------------------ reading

    @property
    def version(self) -> int:
        """The current mind version (+1 per committed transaction)."""
        with self.db.store.read(self.id) as r:
            return r.row.version

    def status(self, *, local_time: str | None = None) -> Status:
        """Counts, versions and the context pressure of the default encoding, compiled at
        ``local_time`` (an ISO time; it also anchors the session window) as ``encode`` would
        compile it, so the two state the same figure."""
        with self.db.store.read(self.id) as r:
            return reading.status(r, self.id, local_time)

    def mind(self, *, all_observations: bool = False) -> Mind:
        """The mind as shown to an operator. Observations: the active ones (protected ones are
        among them: protect refuses a retired observation, retire a protected one), plus the
        retired ones when ``all_observations``."""
        with self.db.store.read(self.id) as r:
            return reading.mind(r, self.id, all_observations)

    def events(self, after: int = 0, limit: int | None = None) -> list[ev.Event]:
        """The events after seq ``after``, at most ``limit`` of them (all when None)."""
        check_whole(after, "after", 0, MAX_SEQ)
        if limit is not None and check_whole(limit, "limit", 0) == 0:
            return []
        with self.db.store.read(self.id) as r:
            return list(r.events(after, limit))

    def event(self, ref: str | int) -> ev.Event:
        seq = check_whole(ref, "seq", 1) if isinstance(ref, int) else parse_ref(ref)
        if seq > MAX_SEQ:
            raise InputError(f"no event {make_ref(seq)} in context '{self.id}'")
        with self.db.store.read(self.id) as r:
            found, last = r.event(seq), r.row.last_seq
        if found is None:
            latest = f"the latest is {make_ref(last)}" if last else "it has no events yet"
            raise RecordNotFoundError(f"no event {make_ref(seq)} in context '{self.id}': {latest}")
        return found

    def sessions(self) -> list[SessionRow]:
        with self.db.store.read(self.id) as r:
            return r.session_rows()

    def activations(self, running_only: bool = False) -> list[ActivationRow]:
        with self.db.store.read(self.id) as r:
            return r.activations(running_only)

    def activation(self, activation_id: str) -> ActivationRow | None:
        """One activation, looked up by its id (None when this context has none of that id)."""
        with self.db.store.read(self.id) as r:
            return r.activation(activating.check_activation_id(activation_id))

    def encode(self, options: EncodeOptions | None = None, **fields: Any) -> Encoding:
        """Compile the Context Encoding for one model request (see :mod:`morphz.encoding`).
        Pass an :class:`~morphz.encoding.EncodeOptions` or its fields as keywords."""
        from morphz.encoding.compile import compile_encoding
        from morphz.encoding.options import make_options

        if options is None:
            options = make_options(**fields)
        elif fields:
            raise InputError("pass either options or keyword fields, not both")
        appending.check_setting(options, "options")
        with self.db.store.read(self.id) as r:
            return compile_encoding(r, options)

    def budget(self) -> Budget:
        """This context's token budget (the default one until set)."""
        from morphz.encoding.compile import stored_budget

        with self.db.store.read(self.id) as r:
            return stored_budget(r)

    def set_budget(self, budget: Budget) -> None:
        """Store this context's token budget (a runtime setting, not mind state)."""
        appending.check_setting(budget, "budget")
        with self.db.store.write(self.id) as w:
            w.active.put_setting("budget", budget.to_dict())

    def update_budget(self, changes: Mapping[str, Any]) -> Budget:
        """Change the fields of this context's budget that ``changes`` names (``configured``
        None removes its own limit), keeping the others as stored, in one write: another
        process's change of another field at the same time stands. Returns the budget stored."""
        from morphz.capacity import BUDGET_FIELDS

        check_changes(changes, "update_budget", '{"window": 64000}')
        unknown = sorted(str(key) for key in changes if key not in BUDGET_FIELDS)
        if unknown:
            raise InputError(
                f"unknown budget field(s) {', '.join(unknown)}: a budget's fields are "
                + ", ".join(BUDGET_FIELDS)
            )
        with self.db.store.write(self.id) as w:
            stored = Budget.stored(w.active.settings().get("budget"), self.id)
            budget = Budget.from_dict({**stored.to_dict(), **changes})
            w.active.put_setting("budget", budget.to_dict())
        return budget

    def view(self) -> View:
        """How this context is shown to a model: preview threshold, session working set."""
        from morphz.encoding.view import stored_view

        with self.db.store.read(self.id) as r:
            return stored_view(r.active.settings(), self.id)

    def set_view(self, view: View) -> None:
        """Store this context's view (a runtime setting, not mind state)."""
        appending.check_setting(view, "view")
        with self.db.store.write(self.id) as w:
            w.active.put_setting("view", view.to_dict())

    def update_view(self, changes: Mapping[str, Any]) -> View:
        """Change the view settings ``changes`` names, keeping the others as stored, in one
        write (another process's change of another setting at the same time stands). Returns
        the view stored."""
        from morphz.encoding.view import View, stored_view

        check_changes(changes, "update_view", '{"preview_threshold": 2000}')
        with self.db.store.write(self.id) as w:
            view = View.from_dict(
                {**stored_view(w.active.settings(), self.id).to_dict(), **changes}
            )
            w.active.put_setting("view", view.to_dict())
        return view

    def calibration(self, model: str) -> Calibration:
        """What this context has learned about ``model``'s token counts (provider-reported input
        tokens against estimates), so a new engine or process starts calibrated."""
        from morphz.encoding.tokens import Calibration

        name = calibration_name(model)
        with self.db.store.read(self.id) as r:
            data = r.active.settings().get(name)
        return read_setting(self.id, name, data, Calibration.from_dict) or Calibration()

    def save_calibration(self, model: str, calibration: Calibration) -> None:
        """Store ``calibration`` for ``model`` (a runtime setting, not mind state)."""
        name = calibration_name(model)
        appending.check_setting(calibration, "calibration")
        with self.db.store.write(self.id) as w:
            stored.put_calibration(w, name, calibration)

    def calibrate(self, model: str, estimated: int, reported: int) -> Calibration:
        """Teach ``model``'s stored calibration one provider report (the estimate of what a
        request sent, the input tokens reported for it), in one write: the sample is applied to
        what is stored, so other engines' samples meanwhile stand. Returns what is stored. A
        report that teaches nothing (either figure 0) only reads: no write lock is waited for."""
        sample = stored.calibration_sample(model, estimated, reported)  # checked first
        if not sample[1] or not sample[2]:
            return self.calibration(model)
        with self.db.store.write(self.id) as w:
            return stored.learn_calibration(w, sample)

    @property
    def recall(self) -> Recall:
        """Search, read, traverse, and deliver recall results (:mod:`morphz.recall`)."""
        from morphz.recall.api import Recall

        return Recall(self)

    @property
    def recall_index(self) -> RecallIndex:
        """Inspect and rebuild this context's recall index."""
        from morphz.recall.api import RecallIndex

        return RecallIndex(self)

    def audit(self, progress: Callable[[int, int], None] | None = None) -> AuditReport:
        """Replay every event from genesis and compare with the stored projection.
        ``progress(done, total)`` is called every few thousand events."""
        from morphz.audit import audit_context

        return audit_context(self.db.store, self.id, progress)

    # ------------------------------------------------------------ appending events

    def observe(
        self,
        kind: str,
        text: str,
        *,
        time: datetime | str | None = None,
        meta: Mapping[str, Any] | None = None,
        session: str = DEFAULT_SESSION,
    ) -> ev.Event:
        """Append one observation; it ticks the clock when its kind does."""
        return self.observe_batch([Observation(kind, text, time, meta)], session=session)[0]

    def observe_batch(
        self,
        items: Iterable[Observation],
        *,
        session: str = DEFAULT_SESSION,
        tick: bool = True,
        ticked: int | None = None,
        activation: str | None = None,
    ) -> list[ev.Event]:
        """Append observations as one batch in one database transaction. The clock advances
        once if any of them ticks it (unless ``tick`` is False: a runtime's results of tool calls
        that never ran), and due retirements are finalized in that same transaction. ``ticked``:
        the index of the item shown as the one that ticked (default: the first of a clock kind).
        ``activation``: the activation of ``session`` whose work they record (a runtime's tool
        results), kept in each event's payload (recovery matches calls with results by it)."""
        if not isinstance(tick, bool):
            raise InputError(f"tick is True or False, not {tick!r}")
        batch = appending.check_all(items)
        if not batch:
            raise InputError("observe_batch needs at least one observation")
        if ticked is not None:  # the index of an item of the batch
            check_whole(ticked, "ticked", 0, len(batch) - 1, why="an index into the batch")
        check_id(session, "session id")
        recorded = self.db.timestamp()
        with self.db.store.write(self.id) as w:
            activating.check_owns(w, self.id, activation, session)
            return self._append(
                w, session, batch, recorded, tick, ticked=ticked, activation=activation
            )

    def _append(
        self,
        w: WriteTxn,
        session: str,
        batch: list[appending.Checked],
        recorded: str,
        may_tick: bool = True,
        *,
        ticked: int | None = None,
        activation: str | None = None,
    ) -> list[ev.Event]:
        """Append ``batch`` inside the open write ``w`` (ticking and finalizing as it does)."""
        tick = may_tick and advances_clock([item.kind for item in batch])
        out = appending.append(
            w, session, batch, recorded, tick, ticked=ticked, activation=activation
        )
        if tick:
            self._finalize(w, session, recorded)
        w.touch_session(session, w.row.last_seq, recorded)
        return out

    def import_history(
        self,
        source: str | Path | IO[str] | IO[bytes],
        *,
        session: str = DEFAULT_SESSION,
        progress: appending.ProgressFn | None = None,
    ) -> appending.ImportReport:
        """Import a JSON Lines history, one observation per line:
        ``{"kind": "user_message", "text": "...", "time": "2023-05-08T13:56:00+00:00",
        "meta": {...}}`` (kind defaults to user_message; time and meta are optional).

        Every line is validated first (an error names its line); then all of them are appended
        in one database transaction, as one batch (one clock tick) - all or nothing."""
        from morphz import importing

        return importing.import_history(self, source, session, progress)

    def _finalize(self, w: WriteTxn, session: str, recorded: str) -> None:
        """Finalize retirements that are due at the current clock, as a runtime commit."""
        changes = finalize_due(w, w.row.clock)
        if changes.is_empty():
            return
        row = w.row
        version, seq = row.version + 1, row.last_seq + 1
        head = chain_head(row.head, changes)
        payload = {"frames": sorted(f for f in changes.frames), "clock": row.clock}
        event = ev.Event(
            self.id,
            seq,
            ev.RETIREMENTS_FINALIZED,
            session,
            recorded,
            recorded,
            None,
            None,
            payload,
            version,
            row.clock,
            head,
        )
        w.append_event(event)
        w.write_changes(changes, version, seq)
        w.set_row(replace(row, version=version, last_seq=seq, head=head))
        maintain.index_events(w, [event])

    def record(
        self,
        kind: str,
        text: str | None = None,
        *,
        payload: Mapping[str, Any] | None = None,
        session: str = DEFAULT_SESSION,
    ) -> ev.Event:
        """Record a non-observation event (a model reply or a tool call). No clock tick."""
        if text is not None and not isinstance(text, str):
            raise InputError(f"record() text must be a string or None, not {type(text).__name__}")
        if not isinstance(kind, str) or kind not in ev.RECORD_KINDS:
            raise InputError(
                f"record() takes {sorted(ev.RECORD_KINDS)}; use observe() for {kind!r}"
            )
        return self._runtime_event(kind, text, appending.check_meta(payload), session)

    def _runtime_event(
        self,
        kind: str,
        text: str | None,
        payload: dict[str, Any] | Callable[[], dict[str, Any]] | None,
        session: str,
        *,
        on_write: Callable[[WriteTxn, int], None] | None = None,
        before: Callable[[WriteTxn], None] | None = None,
    ) -> ev.Event:
        """Append a runtime event in one write transaction: ``before`` checks (or writes) the
        state under the writer lock first, ``on_write`` writes what goes with the event; a
        callable ``payload`` is read after ``before``. The event's time is taken after
        ``before`` too, under the writer lock, so what ``before`` appends is not later than it
        (event times follow seq order within a write)."""
        check_id(session, "session id")
        with self.db.store.write(self.id) as w:
            if before is not None:
                before(w)
            recorded = self.db.timestamp()
            if callable(payload):
                payload = payload()
            row = w.row
            seq = row.last_seq + 1
            changes = Changes()
            ensure_session(w, changes, session)
            head = chain_head(row.head, changes) if not changes.is_empty() else row.head
            event = ev.Event(
                self.id,
                seq,
                kind,
                session,
                recorded,
                recorded,
                text,
                None,
                payload,
                row.version,
                row.clock,
                head,
            )
            w.write_changes(changes, None, seq)
            w.append_event(event)
            w.set_row(replace(row, last_seq=seq, head=head))
            maintain.index_events(w, [event])
            if on_write is not None:
                on_write(w, seq)
            w.touch_session(session, seq, recorded)
        return event

    # ------------------------------------------------------------ sessions and activations

    def interrupt_running(
        self, reason: str = "the process stopped before it finished"
    ) -> list[str]:
        """Mark every activation still recorded as running as interrupted (after a restart, no
        process is running them); returns the ids it marked (one another caller finished
        meanwhile is skipped)."""
        running = self.activations(running_only=True)
        return [
            a.activation_id for a in running if activating.interrupt(self, a.activation_id, reason)
        ]

    def create_session(self, session: str) -> ev.Event:
        """Create a session explicitly (the first event in a new session also creates it)."""
        check_id(session, "session id")

        def absent(w: WriteTxn) -> None:  # under the writer lock: two creators cannot both pass
            if w.session(session) is not None:
                raise InputError(f"session '{session}' already exists in context '{self.id}'")

        payload = {"session": session}
        return self._runtime_event(ev.SESSION_CREATED, None, payload, session, before=absent)

    def start_activation(
        self, session: str, root: str | None = None, objective: str | None = None
    ) -> str:
        """Mark running work in ``session``, owned by this process (see :mod:`morphz.owners`).
        ``root`` (an @e ref) becomes causally protected until :meth:`finish_activation`;
        ``objective`` is shown with the activation in every kernel while it runs.
        Returns the activation id."""
        root_seq = parse_ref(root) if root is not None else None
        rooted = activating.existing_root(self.id, root_seq, root)
        return activating.start(self, session, objective, rooted)

    def begin_activation(
        self, session: str, prompt: str, objective: str | None = None
    ) -> tuple[ev.Event, str]:
        """The user message ``prompt`` in ``session`` and an activation rooted on it, written
        in one transaction, so nothing can retire the message before it is protected. Returns
        the message's event and the activation id."""
        message = appending.check(Observation("user_message", prompt))
        check_id(session, "session id")
        recorded = self.db.timestamp()
        root: list[ev.Event] = []

        def rooted(w: WriteTxn) -> tuple[int | None, str | None]:
            root.extend(self._append(w, session, [message], recorded))
            return root[0].seq, root[0].ref

        activation_id = activating.start(self, session, objective, rooted)
        return root[0], activation_id

    def finish_activation(
        self,
        activation_id: str,
        state: str = "delivered",
        reason: str | None = None,
        *,
        unanswered: Mapping[str, object] | None = None,
        observations: Iterable[Observation] = (),
    ) -> list[ev.Event]:
        """Mark an activation delivered, failed or interrupted, recording ``reason`` and
        ``unanswered`` (requests no reply followed: those refused as too long, the one a provider
        error or an interruption cut off). The same write first appends ``observations`` in its
        session as one batch (a delivered reply as an ``agent_reply``: the reply and the end
        land together or not at all), then records the
        outcomes of its tool calls still staged (those whose step's batch was never written),
        as results marked ``recovered`` (:mod:`morphz.staging`). Returns the events of
        ``observations``. Raises InputError when it is not running; of two concurrent calls,
        one finishes it."""
        return activating.finish(
            self,
            activation_id,
            state,
            reason,
            unanswered=unanswered,
            observations=observations,
        )

    def interrupt_orphaned(
        self,
        reason: str = "its process ended before it finished",
        *,
        include_unowned: bool = False,
    ) -> list[str]:
        """Mark interrupted every running activation whose owner process provably died (on
        this host: its pid is gone or belongs to a later process), plus, with
        ``include_unowned``, those with no recorded owner (started before owners were
        recorded). Activations of live owners and of other hosts are left alone. Safe to run
        from several processes at once: each activation is finished once. Returns the ids this
        call marked."""
        return activating.interrupt_orphaned(self, reason, include_unowned)

    # ------------------------------------------------------------ transactions

    def commit(
        self,
        text: str,
        *,
        session: str = DEFAULT_SESSION,
        budget: Budget | None = None,
        budget_keys: Mapping[str, int] | None = None,
        calibration: Calibration | None = None,
        request_floor: int | None = None,
        profile_tokens: int | None = None,
        activation: str | None = None,
        call: str | None = None,
    ) -> Receipt:
        """Commit a context transaction atomically, or raise a typed TxError (state untouched).
        ``budget`` (else the stored one) with ``budget_keys`` over it is what the `budget`
        refusal measures against, ``calibration`` how it counts, and ``request_floor`` the
        figure of the smallest maintenance request beside the frames (None: the protocol and an
        allowance for the rest): a runtime passes the budget, calibration and floor it measures
        requests with (morphz.runtime.floor). ``profile_tokens``: the profile bound to the
        agent's share of that floor, which a refusal names when the floor alone is past critical
        and the profile is at least half of it (no frame could make room). ``activation`` and
        ``call``: the activation of ``session`` and its tool call this commit answers (a
        runtime's context_tx), kept in the event's payload, so recovery can answer the call with
        the commit when its process died before the receipt was recorded."""
        if not isinstance(text, str):
            raise InputError("a context transaction is text: (context-tx (base-version N) OP...)")
        check_id(session, "session id")
        committing.check_measures(budget, budget_keys, calibration, request_floor, profile_tokens)
        answers = activating.check_call(activation, call)
        tx = check_new(read_tx(text))  # stored ones are replayed with read_tx alone
        canonical = print_tx(tx)  # the text itself when it is canonical already
        recorded = self.db.timestamp()
        with self.db.store.write(self.id) as w:
            activating.check_owns(w, self.id, activation, session)
            return committing.commit_in(
                w, tx, canonical, session, recorded,
                budget=budget, budget_keys=budget_keys or {}, calibration=calibration,
                request_floor=request_floor, profile_tokens=profile_tokens, answers=answers,
            )  # fmt: skip

    def set_window(self, window: int, *, session: str = DEFAULT_SESSION) -> ev.Event:
        """Change the organizing window (in clock ticks) for retirements started from now on."""
        check_id(session, "session id")
        check_window(window)
        recorded = self.db.timestamp()
        with self.db.store.write(self.id) as w:
            row = w.row
            changes = Changes(window=window)
            ensure_session(w, changes, session)
            seq = row.last_seq + 1
            head = chain_head(row.head, changes)
            event = ev.Event(
                self.id,
                seq,
                ev.SETTINGS_CHANGED,
                session,
                recorded,
                recorded,
                None,
                None,
                {"window": window},
                row.version,
                row.clock,
                head,
            )
            w.write_changes(changes, None, seq)
            w.append_event(event)
            w.set_row(replace(row, last_seq=seq, head=head, window=window))
            maintain.index_events(w, [event])
            w.touch_session(session, seq, recorded)
        return event


__all__ = ["DEFAULT_CONTEXT", "DEFAULT_SESSION", "Context"]
