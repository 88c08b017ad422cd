"""Audit: replay a context's events from genesis through the pure layer and compare the result
with the stored projection, row by row, and the head hash chain event by event; and ask the
database whether its file is sound (damage the replay never reads, such as the recall index's)."""

from __future__ import annotations

import gc
import shlex
from collections.abc import Callable, Iterator
from typing import Any

from morphz import events as ev
from morphz.capacity import Budget
from morphz.checks import check_progress
from morphz.errors import DamagedStoreError, StoreBusyError, StoreError, TxError
from morphz.mind import (
    OBSERVATION_KINDS,
    Changes,
    Env,
    MindState,
    apply_tx,
    ensure_session,
    finalize_due,
)
from morphz.mind.lifecycle import edge_tokens, kept_tokens
from morphz.mind.lifecycle import in_view as in_view_frame
from morphz.mind.lines import observation_units
from morphz.mind.state import ObsState
from morphz.owners import untold_reason
from morphz.recall.documents import (
    COMMIT_REMOVED_KEYS,
    COMMIT_TEXT_KEYS,
    TEXT_KINDS,
    removed_content,
    time_us,
)
from morphz.results import AuditReport
from morphz.store.active_base import observation_of
from morphz.store.base import ReadTxn, Store
from morphz.stored_settings import problem
from morphz.txlang import read_tx
from morphz.txlang.ops import Tx

MAX_DIFFERENCES = 100
PROGRESS_EVERY = 5000


class _Report:
    def __init__(self, report: AuditReport) -> None:
        self.report = report
        self.head_diverged = False
        self.envs: dict[str, Env] = {}
        # activation id -> (session, root seq, state, started seq, finished seq), from the log
        # activation -> (session, root seq, state, started seq, finished seq, objective)
        self.activations: dict[str, tuple[str, int | None, str, int, int | None, Any]] = {}
        # session id -> (first seq, last seq, recorded time of the last), from the log
        self.session_events: dict[str, tuple[int, int, str]] = {}
        self.documents = 0  # the events the recall index holds a document of

    def add(self, message: str) -> None:
        diffs = self.report.differences
        if len(diffs) < MAX_DIFFERENCES:
            diffs.append(message)
        elif len(diffs) == MAX_DIFFERENCES:
            diffs.append("... more differences not shown")

    def note_session(self, event: ev.Event) -> None:
        first = self.session_events.get(event.session_id, (event.seq,))[0]
        self.session_events[event.session_id] = (first, event.seq, event.recorded_at)

    def env(self, session: str) -> Env:
        """The replay environment of a session's commits (one value per session)."""
        env = self.envs.get(session)
        if env is None:
            env = self.envs[session] = Env(session, receipts=False, live=False)  # state only
        return env


def replay_event(state: MindState, event: ev.Event, out: _Report) -> None:
    """Apply one event to ``state`` exactly as the live path did."""
    seq, kind, session = event.seq, event.kind, event.session_id
    _note_order(state, event, out)
    if kind in (ev.ACTIVATION_STARTED, ev.ACTIVATION_FINISHED):
        _note_activation(event, out)
    if kind == ev.TX_COMMITTED:
        _replay_commit(state, event, out)
    elif kind in OBSERVATION_KINDS:
        _check_worker(event, out)
        changes = Changes()
        ensure_session(state, changes, session)
        text = event.text or ""
        units = observation_units(observation_of(event).entry(), text)
        changes.observations[seq] = ObsState(seq, kind, "active", False, len(text), units)
        clock = state.clock
        if event.clock != clock:
            if event.clock != clock + 1:
                out.add(f"{event.ref}: clock jumps from {clock} to {event.clock}")
            changes.clock = event.clock
        state.apply(changes, commit=False)
    elif kind == ev.RETIREMENTS_FINALIZED:
        changes = finalize_due(state, state.clock)
        recorded = list((event.payload or {}).get("frames", []))
        if sorted(changes.frames) != sorted(recorded):
            out.add(f"{event.ref}: replay finalizes {sorted(changes.frames)}, log says {recorded}")
        ensure_session(state, changes, session)
        state.apply(changes, commit=True)
    else:
        if kind not in ev.RECORD_KINDS | ev.RUNTIME_KINDS:
            out.add(f"{event.ref}: unknown event kind {kind!r}: Morphz writes no such event")
        changes = Changes()
        ensure_session(state, changes, session)
        if kind == ev.SETTINGS_CHANGED:
            changes.window = int((event.payload or {})["window"])
            state.apply(changes, commit=False)
        elif not changes.is_empty():
            state.apply(changes, commit=False)
    if state.version != event.version:
        out.add(f"{event.ref}: mind version {state.version} on replay, {event.version} stored")
    if state.clock != event.clock:
        out.add(f"{event.ref}: clock {state.clock} on replay, {event.clock} stored")
    if not out.head_diverged and state.head != event.head:
        out.head_diverged = True
        out.add(f"{event.ref}: head hash diverges here (first divergence)")


def _replay_commit(state: MindState, event: ev.Event, out: _Report) -> None:
    session = event.session_id
    try:
        tx = read_tx(event.text or "")
        changes = apply_tx(state, tx, out.env(session))
    except TxError as exc:
        out.add(f"{event.ref}: the committed tx no longer applies on replay: {exc}")
        changes = Changes()
    else:  # before the changes apply: what they removed is read from the state before
        _check_payload(state, tx, changes, event, out)
    ensure_session(state, changes, session)  # after apply_tx, as the live commit does
    state.apply(changes, commit=True)
    out.report.commits += 1


def _check_payload(
    state: MindState, tx: Tx, changes: Changes, event: ev.Event, out: _Report
) -> None:
    """A commit's payload names its transaction (``tx-<version>``), repeats its reason and base
    version, and records what its changes took out of the mind (recall indexes and shows
    these): each must be what the transaction and its replay say. A key the payload lacks is no
    difference: stores written before a key was recorded have none (and an empty one is left
    out)."""
    payload = event.payload
    if not payload:
        return
    get, tx_id, reason, base = payload.get, f"tx-{event.version}", tx.reason, tx.base_version
    if (  # the usual case, at the least cost: all agree (a key it lacks gets its own value)
        get("tx_id", tx_id) == tx_id
        and get("reason", reason) == reason
        and get("base_version", base) == base
        and payload.keys().isdisjoint(COMMIT_REMOVED_KEYS)  # most commits remove nothing
    ):
        return
    expected: list[tuple[str, Any]] = [("tx_id", tx_id), ("reason", reason), ("base_version", base)]
    if not payload.keys().isdisjoint(COMMIT_REMOVED_KEYS):
        removed = removed_content(changes, state.frame, state.has_edge)
        expected += [(key, removed.get(key)) for key in COMMIT_REMOVED_KEYS]
    for key, value in expected:
        if get(key, value) != value:
            out.add(
                f"{event.ref}: the commit's payload has {key} {payload[key]!r:.120}, its "
                f"transaction and replay {value!r:.120}"
            )


def _note_order(state: MindState, event: ev.Event, out: _Report) -> None:
    """The event's place in the log and in its session."""
    if event.seq != state.last_seq + 1:
        out.add(f"{event.ref}: follows @e{state.last_seq}: events are missing from the log")
    state.note_event(event.seq)
    out.note_session(event)
    kind = event.kind  # recall.documents.event_text's rule, without building the text
    if kind in TEXT_KINDS:
        out.documents += bool(event.text)
    elif kind == ev.TX_COMMITTED and any(map((event.payload or {}).get, COMMIT_TEXT_KEYS)):
        out.documents += 1


def _note_activation(event: ev.Event, out: _Report) -> None:
    """An activation's start or end, as the log says it (the rows decide causal protection)."""
    payload = event.payload or {}
    activation = str(payload.get("activation"))
    if event.kind == ev.ACTIVATION_STARTED:
        root = payload.get("root")
        root_seq = int(root[2:]) if isinstance(root, str) and root.startswith("@e") else None
        goal = payload.get("objective")
        out.activations[activation] = (event.session_id, root_seq, "running", event.seq, None, goal)
    elif activation in out.activations:
        session, root_seq, _, started, _, goal = out.activations[activation]
        ended = str(payload.get("state"))
        out.activations[activation] = (session, root_seq, ended, started, event.seq, goal)
    else:
        out.add(f"{event.ref}: activation {activation} finishes but never started")


def _check_worker(event: ev.Event, out: _Report) -> None:
    """An observation whose payload names the activation whose work it records (recovery
    matches a killed activation's calls with their results by it) names one that started
    before it in its session (it may have ended: see activating.check_owns)."""
    named = (event.payload or {}).get("activation")
    if named is None:
        return
    known = out.activations.get(named) if isinstance(named, str) else None
    if known is None or known[0] != event.session_id:
        out.add(
            f"{event.ref}: its payload names activation {named!r:.60}, which did not start "
            f"before it in session {event.session_id!r}"
        )


def _compare_activations(r: ReadTxn, out: _Report) -> None:
    stored = {
        a.activation_id: (
            a.session_id,
            a.root_seq,
            a.state,
            a.started_seq,
            a.finished_seq,
            a.objective,
        )
        for a in r.activations()
    }
    for activation in sorted(set(stored) | set(out.activations)):
        replayed, row = out.activations.get(activation), stored.get(activation)
        if replayed != row:
            out.add(f"activation {activation}: replay {replayed}, stored {row}")


def _compare_rows(state: MindState, r: ReadTxn, out: _Report) -> None:
    row = r.row
    facts: list[tuple[str, Any, Any]] = [
        ("version", state.version, row.version),
        ("clock", state.clock, row.clock),
        ("last_seq", state.last_seq, row.last_seq),
        ("window", state.window, row.window),
        ("order_max", state.order_max, row.order_max),
        ("barrier", state.barrier, row.barrier),
        ("head", state.head, row.head),
    ]
    for name, replayed, stored in facts:
        if replayed != stored:
            out.add(f"context {name}: replay {replayed!r}, stored {stored!r}")
    _compare_frames(state, r, out)
    stored_edges = set(r.edges())
    for edge in sorted(stored_edges ^ state.edge_set):
        where = "only stored" if edge in stored_edges else "only in replay"
        out.add(f"relation {' '.join(edge)}: {where}")
    seen = 0
    for obs in r.observations():
        seen += 1
        if state.obs.get(obs.seq) != obs:
            out.add(f"observation @e{obs.seq}: replay {state.obs.get(obs.seq)}, stored {obs}")
    if seen != len(state.obs):
        out.add(f"observations: replay has {len(state.obs)}, store has {seen}")
    cited = {(src, f.id) for f in state.frames_by_id.values() for src in f.sources}
    if (stored_sources := set(r.frame_sources())) != cited:
        missing, extra = sorted(cited - stored_sources), sorted(stored_sources - cited)
        out.add(f"frame sources: missing {missing[:5]}, not in the replay {extra[:5]}")
    frames = state.frames_by_id
    in_view = sum(map(kept_tokens, frames.values()))
    in_view += sum(edge_tokens(e) for e in state.edge_set if in_view_frame(frames.get(e[0])))
    if (stored_tokens := r.active.frame_tokens()) != in_view:
        out.add(f"frame tokens in view: replay {in_view}, stored {stored_tokens}")
    snapshots = {s.name: s for s in r.snapshots()}
    if set(snapshots) != set(state.snapshots):
        out.add(f"checkpoints: replay {sorted(state.snapshots)}, stored {sorted(snapshots)}")
    for name, snap in snapshots.items():
        if name in state.snapshots and state.snapshots[name].canonical() != snap.canonical():
            out.add(f"checkpoint {name}: contents differ")
    seen = 0
    replayed_version = state.boundary_versions.get
    for boundary, version in r.boundary_versions():
        seen += 1
        replayed = replayed_version(boundary)
        if replayed != version:
            out.add(f"boundary {boundary}: replay v{replayed}, stored v{version}")
    if seen != len(state.boundary_versions):
        out.add(f"boundary versions: replay has {len(state.boundary_versions)}, store has {seen}")
    _compare_activations(r, out)
    _compare_sessions(state, r, out)
    _compare_event_times(r, out)
    _compare_recall(state, r, out)


def _compare_frames(state: MindState, r: ReadTxn, out: _Report) -> None:
    """Each stored frame against the replay's; a frame row that cannot be read (text that is
    not UTF-8) is a difference naming it, and the frames are not compared."""
    try:
        stored = list(r.frames())
    except DamagedStoreError as exc:
        if not isinstance(exc.__cause__, ValueError):
            raise  # the store itself failed: no finding about the frames
        out.add(f"frames: {exc.__cause__}: a frame cannot be read, the frames were not compared")
        return
    for frame in stored:
        expected = state.frames_by_id.get(frame.id)
        if expected != frame:
            out.add(f"frame {frame.id}: replay {expected}, stored {frame}")
    if len(stored) != len(state.frames_by_id):
        out.add(f"frames: replay has {len(state.frames_by_id)}, store has {len(stored)}")


def _compare_sessions(state: MindState, r: ReadTxn, out: _Report) -> None:
    """The sessions, their per-attention counts, and each one's first and last event and the
    time of the last, as the log has them."""
    sessions = {s.id: s for s in r.sessions()}
    if sessions != state.sessions:
        replayed = sorted((s.id, s.attention) for s in state.sessions.values())
        stored = sorted((s.id, s.attention) for s in sessions.values())
        out.add(f"sessions: replay {replayed}, stored {stored}")
    counts: dict[str, int] = {}
    for session in state.sessions.values():
        counts[session.attention] = counts.get(session.attention, 0) + 1
    if (stored_counts := r.active.session_counts()) != counts:
        out.add(f"session counts: replay {dict(sorted(counts.items()))}, stored {stored_counts}")
    for row in r.session_rows():
        kept = (row.created_seq, row.last_seq, row.last_time)
        logged = out.session_events.get(row.session_id)
        if logged is not None and logged != kept:
            out.add(f"session {row.session_id} (created, last, last time): "
                    f"log {logged}, stored {kept}")  # fmt: skip


def _compare_event_times(r: ReadTxn, out: _Report) -> None:
    """Each event's UTC microseconds (what time-range searches filter and order on) are its
    time's."""
    for seq, time, stored in r.event_times():
        try:
            exact: int | None = time_us(time)
        except (ValueError, OverflowError):
            exact = None
        if stored != exact:
            out.add(f"@e{seq}: time_us {stored} stored, {exact} for its time {time!r}")


def _compare_recall(state: MindState, r: ReadTxn, out: _Report) -> None:
    """A recall index that is current holds a document of each event that has searchable
    text, and one of each frame, mapped to it (one that is stale says so itself, and is
    rebuilt)."""
    meta = r.recall.meta()
    if meta is None or meta[1] != r.row.last_seq:
        return
    rebuild = f"run `morphz context recall-index rebuild {r.row.context_id}`"
    if (documents := r.recall.event_doc_count()) != out.documents:
        out.add(
            f"recall index: {documents} event documents, the log has {out.documents} "
            f"events to index: {rebuild}"
        )
    frames = len(state.frames_by_id)
    docs, mapped = r.recall.frame_doc_counts()
    if docs != frames or mapped != frames:
        out.add(
            f"recall index: {docs} frame documents ({mapped} of them mapped to their frame), "
            f"the mind has {frames} frames: {rebuild}"
        )


def _note_leftovers(r: ReadTxn, out: _Report) -> None:
    """A warning (no difference: the index and the mind are sound) for each table a recall
    rebuild of this context left when its process died, or whose process cannot be told alive,
    or that is recorded but was dropped by hand, with the command that drops or forgets it. A
    rebuild this host sees running is no finding."""
    clean = f"morphz context recall-index clean {shlex.quote(r.row.context_id)}"
    for b in r.recall.building():
        if b.missing:  # whatever its owner: a rebuild cannot go on without its table
            out.report.warnings.append(
                f"recall index: the table {b.table} of a rebuild is recorded but no longer in "
                f"the store (dropped by hand): run `{clean}` to forget it (the live index is not "
                "affected)"
            )
            continue
        if b.owner_alive is True:
            continue
        left = f"recall index: the table {b.table} ({b.documents} documents) of a rebuild "
        if b.owner_alive is False:
            said = f"{left}whose process ({b.owner.describe()}) died is left unused: run `{clean}`"
        else:
            said = (
                f"{left}by {b.owner.describe()}, which cannot be told alive ("
                f"{untold_reason(b.owner)}), is not swapped in: if no rebuild runs there, run "
                f"`{clean} --force`"
            )
        out.report.warnings.append(said + " to drop it (the live index is not affected)")


def _check_settings(r: ReadTxn, out: _Report) -> None:
    """Every stored setting (budget, view, calibrations) reads as its type: a damaged one would
    fail every encoding and status of the context (runtime state, not replayed from the log)."""
    for name, text in r.active.setting_rows():
        if (wrong := problem(r.row.context_id, name, text, _setting_reader(name))) is not None:
            out.add(wrong)


def _check_staged(out: _Report, r: ReadTxn) -> None:
    """The tool outcomes staged as their calls ended (runtime state, not replayed: see
    morphz.staging) belong to running activations: the write that ends an activation records
    what is still staged of it and deletes it, so a row of one that has ended (or never
    started) is a fact no event holds."""
    try:
        rows = r.staged_results()
    except DamagedStoreError as exc:
        out.add(f"staged results: {exc.message}")
        return
    for row in rows:
        known = out.activations.get(row.activation_id)
        if known is None or known[2] != "running":
            state = "never started" if known is None else f"ended {known[2]}"
            out.add(
                f"a staged result of activation {row.activation_id} ({state}), call "
                f"{row.position} of @e{row.reply_seq}, was never recorded as an event"
            )


def _setting_reader(name: str) -> Callable[[dict[str, Any]], object] | None:
    """The reader of the setting ``name`` (None for one this release does not know). The
    encoding package (a view's and a calibration's types) is imported only for a context that
    has such a setting: importing it is some 20 ms, a twentieth of the audit of 10,000 commits."""
    if name == "budget":
        return Budget.from_dict
    if name == "view":
        from morphz.encoding.view import View

        return View.from_dict
    if name.startswith("calibration:"):
        from morphz.encoding.tokens import Calibration

        return Calibration.from_dict
    return None


def _next_event(events: Iterator[ev.Event], state: MindState, out: _Report) -> ev.Event | None:
    """The next event of the log, or None at its end or where a damaged row cannot be read
    (reported: the replay stops there). A store that fails otherwise (closed, busy) raises."""
    try:
        return next(events, None)
    except (StoreError, ValueError, TypeError, RecursionError) as exc:
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        if not isinstance(cause, ValueError | TypeError | RecursionError):
            raise  # the store itself failed: no finding about the log
        reason = exc.__cause__ or exc  # the store's error says to run the audit: say why
        out.add(f"@e{state.last_seq + 1}: the event cannot be read ({reason}): the replay stops")
        return None


def audit_context(
    store: Store, context_id: str, progress: Callable[[int, int], None] | None = None
) -> AuditReport:
    """Replay every event of ``context_id`` and compare with what the store holds."""
    check_progress(progress)
    report = AuditReport(context_id)
    out = _Report(report)
    # The replay allocates millions of short-lived objects beside a state that keeps growing,
    # and hardly any reference cycles: the cyclic collector would mostly rescan that state
    # again and again (a fifth of the replay time), so it is paused until the replay ends.
    collecting = gc.isenabled()
    try:
        gc.disable()  # inside: a Ctrl-C as it returns still enables it again
        for problem in store.check_file():  # first: the replay may read damaged pages
            out.add(problem)
        _replay(store, context_id, out, progress)
    except StoreError as exc:
        if _damaged_row(exc):  # a row the driver cannot decode: damage the audit reports
            out.add(f"the replay stopped, a stored row cannot be read: {exc.__cause__}")
        elif report.ok or isinstance(exc, StoreBusyError):  # no damage found that explains it
            raise
        else:
            out.add(f"the replay stopped, the store cannot be read: {exc}")
    finally:
        if collecting:
            gc.enable()
    return report


def _damaged_row(exc: StoreError) -> bool:
    """Whether ``exc`` is a stored row's damage (a DamagedStoreError whose cause is a
    ValueError), not the store failing."""
    return isinstance(exc, DamagedStoreError) and isinstance(exc.__cause__, ValueError)


def _replay(
    store: Store, context_id: str, out: _Report, progress: Callable[[int, int], None] | None
) -> None:
    """Replay the context's events and compare the result with its stored rows, in one read."""
    report = out.report
    with store.read(context_id) as r:
        state = MindState(window=r.row.initial_window)
        total = r.row.last_seq
        events = r.events()
        while (event := _next_event(events, state, out)) is not None:
            report.events += 1
            try:
                replay_event(state, event, out)
            except MemoryError:  # the machine's state, not the store's: no finding
                raise
            except Exception as exc:  # a payload the replay cannot read: a difference
                out.add(f"{event.ref}: damaged payload ({type(exc).__name__}: {exc})")
            if progress is not None and report.events % PROGRESS_EVERY == 0:
                progress(report.events, total)
        if progress is not None:
            progress(report.events, total)
        _compare_rows(state, r, out)
        _check_settings(r, out)
        _check_staged(out, r)
        _note_leftovers(r, out)
        report.stored_head = r.row.head
        report.replayed_head = state.head
