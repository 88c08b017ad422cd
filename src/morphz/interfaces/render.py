"""Text rendering for the command line: readable summaries of library results, laid out with
:mod:`morphz.interfaces.tables`.

Pure functions from library values to strings; no I/O and no click. The JSON format of the CLI
does not come through here: it is the values' own ``to_dict()``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from morphz.capacity import Budget
from morphz.encoding.view import View
from morphz.errors import MorphzError, TxError
from morphz.events import Event
from morphz.graphemes import boundary
from morphz.interfaces.tables import streamed_table, table, visible
from morphz.observe import ImportReport
from morphz.owners import untold_reason
from morphz.recall.api import CleanReport, IndexReport
from morphz.recall.read import ReadPage
from morphz.recall.search import SearchPage
from morphz.recall.traverse import Link, Node, TraversalPage
from morphz.results import AuditReport, FrameView, Mind, Receipt, Status
from morphz.runtime.report import RequestStats
from morphz.store.recall_base import BuildingTable
from morphz.txlang.sexpr import unicode_problem

NONE = "(none)"


def pairs(items: Iterable[tuple[str, object]]) -> str:
    """Aligned ``key  value`` lines."""
    rows = [(k, str(v)) for k, v in items]
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def section(title: str, content: str) -> str:
    return f"{title}\n{content}"


# ------------------------------------------------------------------ library values


def lifecycle(frame: FrameView) -> str:
    """``active``, ``retired`` or ``retiring (3 ticks left)``."""
    if frame.lifecycle == "retiring" and frame.remaining_ticks is not None:
        ticks = frame.remaining_ticks
        return f"retiring ({counted(ticks, 'tick')} left)"
    return frame.lifecycle


def _pressure(p: dict[str, Any]) -> str:
    """A pressure figure; one under a model's learnt calibration names the model (status)."""
    kind = f"{p['kind']} for {p['model']}" if p.get("model") else p["kind"]
    return (
        f"{p['level']}: {p['tokens']:,} tokens ({kind}) of {p['hard']:,} hard; "
        f"notice {p['notice']:,}, warning {p['warning']:,}, critical {p['critical']:,}"
    )


def status(s: Status) -> str:
    return pairs(
        [
            ("context", s.context),
            ("version", s.version),
            ("clock", s.clock),
            ("window", f"{s.window} ticks"),
            ("events", s.last_seq),
            ("frames", _counts(s.frames)),
            ("observations", _counts(s.observations)),
            ("protected", _counts(s.protected)),
            ("sessions", s.sessions),
            ("checkpoints", s.checkpoints),
            ("running activations", s.running_activations),
            ("pressure", _pressure(s.pressure)),
            ("head", s.head),
        ]
    )


def contexts(statuses: Sequence[Status]) -> str:
    if not statuses:
        return "no contexts in this store: create one with `morphz context create`"
    rows = [
        (
            s.context,
            str(s.version),
            str(s.clock),
            str(s.last_seq),
            str(s.frames.get("active", 0) + s.frames.get("retiring", 0)),
            str(s.observations.get("active", 0)),
        )
        for s in statuses
    ]
    headers = ("context", "version", "clock", "events", "frames in view", "active observations")
    return table(headers, rows)


def mind(
    m: Mind, *, all_observations: bool = False, for_all: str = "--all-observations for all"
) -> str:
    """The mind as tables; ``for_all`` says how to see the retired observations too (where
    the caller has its own way)."""
    frames = [
        (
            f.id,
            lifecycle(f),
            str(f.revision),
            _yes(f.protected),
            " ".join(f.sources) or "-",
            f.body,
        )
        for f in m.frames
    ]
    frame_headers = ("id", "lifecycle", "rev", "protected", "sources", "body")
    observations = [
        (o.ref, o.kind, o.lifecycle, _yes(o.protected), str(o.chars)) for o in m.observations
    ]
    which = "all" if all_observations else f"active or protected; {for_all}"
    parts = [
        f"context {m.context}  version {m.version}  clock {m.clock}",
        section("Frames (projection order)", table(frame_headers, frames) if frames else NONE),
        section(
            "Relations",
            table(("subject", "relation", "object"), m.relations) if m.relations else NONE,
        ),
        section(
            "Checkpoints",
            table(("name", "version"), [(n, str(v)) for n, v in m.checkpoints])
            if m.checkpoints
            else NONE,
        ),
        section(
            f"Observations ({which})",
            table(("ref", "kind", "lifecycle", "protected", "chars"), observations)
            if observations
            else NONE,
        ),
        section(
            "Sessions",
            table(("session", "attention"), m.sessions) if m.sessions else NONE,
        ),
    ]
    return "\n\n".join(parts)


def receipt(r: Receipt) -> str:
    rebased = "rebased" if r.rebased else "not rebased"
    head = (
        f"committed {r.tx_id} as {r.event}: version {r.before_version} -> {r.after_version} "
        f"(base {r.base_version}, {rebased}), session {r.session}"
    )
    changes = [
        (str(e.index), e.op, e.target, e.change, str(e.immediate), str(e.eventual))
        for e in r.effects
    ]
    headers = ("#", "op", "target", "change", "tokens now", "tokens later")
    tokens = (
        f"token effect: {r.tokens_immediate} now, {r.tokens_eventual} when retirements finalize"
        " (positive: tokens leave the encoding)"
    )
    return "\n".join([head, table(headers, changes), tokens])


def _preview(text: str | None, width: int = 60) -> str:
    if text is None:
        return "-"
    flat = _flat(text)
    return flat if len(flat) <= width else flat[: boundary(flat, width - 3, -1)] + "..."


def _flat(text: object) -> str:
    """``text`` on one line (runs of white space as one space), its control characters shown."""
    return visible(" ".join(str(text).split()))


def event_line(e: Event) -> str:
    """One line: ref, kind, session, version and clock after it, and a preview of its text."""
    tick = " (ticked)" if (e.payload or {}).get("tick") else ""
    return (
        f"{e.ref} {e.kind} session={e.session_id} version={e.version} "
        f"clock={e.clock}{tick}: {_preview(e.text)}"
    )


def activity_line(e: Event) -> str:
    """What a person following an agent run wants to see of one event: the tool calls a model
    reply asks for (after a preview of the text the model wrote beside them, if any: often an
    answer), whether a transaction committed (and which versions) or why it was refused,
    approvals, and a preview of anything else."""
    payload = e.payload or {}
    meta = e.meta or {}
    if e.kind == "model_reply" and payload.get("tool_calls"):
        calls = ", ".join(
            f"{_flat(c.get('name'))}({_preview(_as_written(c.get('arguments', '')), 70)})"
            for c in payload["tool_calls"]
        )
        said = f'says "{_preview(e.text, 100)}" and ' if e.text and e.text.strip() else ""
        return f"{e.ref} {said}calls {calls}"
    if e.kind == "tx_receipt":
        return f"{e.ref} context_tx {_receipt_summary(e.text)}"
    if e.kind == "tool_result":
        failed = " (error)" if meta.get("error") else ""
        return f"{e.ref} {_flat(meta.get('tool', 'tool'))}{failed}: {_preview(e.text, 70)}"
    if e.kind in ("approval_request", "approval_result"):
        shown = {k: v for k, v in payload.items() if k != "activation"}  # the call's own
        said = e.text or _json_text(shown, sort_keys=True)
        return f"{e.ref} {e.kind}: {_preview(said, 70)}"
    return event_line(e)


def _as_written(arguments: object) -> str:
    """A call's arguments as a person reads them: the stored JSON text with its ``\\uXXXX``
    escapes as the characters they stand for (a model, or json.dumps, often writes any
    non-ASCII character so), or the stored text as it is when it is not JSON. The caller still
    shows its controls (:func:`_preview`)."""
    if not isinstance(arguments, str):
        return _json_text(arguments)
    try:
        return _json_text(json.loads(arguments))
    except (ValueError, RecursionError):  # not JSON (or a number past int's digit limit)
        return arguments


def _json_text(value: object, **options: Any) -> str:
    """``value`` as JSON with its characters as they are, but ``\\uXXXX`` for a lone surrogate
    (an escape that names no character: printed, it fails)."""
    written = json.dumps(value, ensure_ascii=False, **options)
    if unicode_problem(written) is None:
        return written
    return json.dumps(value, **options)


def _receipt_summary(text: str | None) -> str:
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError:
        return _preview(text)
    if not isinstance(data, dict):
        return _preview(text)
    if data.get("ok"):
        versions = f"v{data.get('before_version')} -> v{data.get('after_version')}"
        rebased = " (rebased)" if data.get("rebased") else ""
        return _flat(f"committed {data.get('tx_id')} {versions}{rebased}")
    error = data.get("error") or {}
    if not isinstance(error, dict):  # anyone may record a tx_receipt: show what it says
        error = {"code": "error", "message": error}
    return f"refused ({_flat(error.get('code'))}): {_preview(str(error.get('message')), 90)}"


_EVENT_HEADERS = ("ref", "kind", "session", "time", "version", "clock", "text")


def event_lines(items: Callable[[], Iterable[Event]]) -> Iterator[str]:
    """The lines of the table of events ``items()`` gives, read twice (:func:`streamed_table`);
    "no events" when it gives none."""
    return streamed_table(_EVENT_HEADERS, lambda: map(_event_row, items()), "no events")


def _event_row(e: Event) -> tuple[str, ...]:
    return (e.ref, e.kind, e.session_id, e.time, str(e.version), str(e.clock), _preview(e.text, 50))


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless one ("1 commit", "2 commits")."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def audit(report: AuditReport) -> str:
    found = counted(len(report.differences), "difference")
    verdict = "audit: ok" if report.ok else f"audit: FAILED ({found})"
    replayed = f"{counted(report.events, 'event')} replayed, {counted(report.commits, 'commit')}"
    lines = [
        verdict,
        f"context {report.context}: {replayed}",
        f"stored head   {report.stored_head}",
        f"replayed head {report.replayed_head}",
    ]
    lines.extend(f"  - {d}" for d in report.differences)
    if report.warnings:
        lines.append(f"warnings ({len(report.warnings)}, not differences):")
        lines.extend(f"  ! {w}" for w in report.warnings)
    return "\n".join(lines)


def error(exc: MorphzError) -> str:
    """A refusal for a person: what failed, where, and the extra details the error carries."""
    text = f"error: {exc}" if isinstance(exc, TxError) else f"error ({exc.code}): {exc.message}"
    if isinstance(exc, TxError):
        for key, value in exc.details.items():
            if isinstance(value, list) and not value:  # none changed (a stale retire-session)
                continue
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            text += f"\n  {key}: {shown}"
    return visible(text)  # a message may quote what was given: its controls are shown


# ------------------------------------------------------------------ recall


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def search_page(page: SearchPage, *, command: tuple[str, str] | None = None) -> str:
    """A table of hits (event ref or frame id, kind, time, score, lifecycle, preview), then how
    the page was ordered and the cursor of the next page; with ``command`` (the search as a
    command line, its options and its arguments, for a caller that takes no cursor or time
    range), the command that shows the next page (the cursor among the options)."""
    if page.order == "relevance":
        order = f"ranked by relevance (matched: {', '.join(page.terms) or '-'})"
    else:
        order = "in time order"
    if page.hits:
        rows = [
            (
                str(number),
                h.ref or h.frame_id or "-",
                h.kind,
                h.time or "-",
                _score(h.score),
                h.lifecycle or "-",
                _preview(h.preview, 70),
            )
            for number, h in enumerate(page.hits, start=1)
        ]
        headers = ("#", "ref/frame", "kind", "time", "score", "lifecycle", "preview")
        body = table(headers, rows, max_width=80)
        summary = f"{counted(len(page.hits), 'hit')}, {order}"
    else:
        body, summary = "no hits", order
    if page.next_cursor:
        after = f"next cursor: {page.next_cursor}"
        if command is not None:
            options, arguments = command
            after = f"more: {options} --cursor {page.next_cursor} {arguments}"
    elif page.truncated:
        narrow = (
            "narrow the query" if command is not None else "narrow the query or add a time range"
        )
        after = f"stopped: a ranked walk returns at most 2,000 results and more match; {narrow}"
    else:
        after = "no more results (no next cursor)"
    return "\n".join([body, summary, after])


def read_page(page: ReadPage) -> str:
    """The page's text, then one line saying where it lies in the event's content."""
    nxt = "none" if page.next_offset is None else str(page.next_offset)
    footer = (
        f"--- {page.identity} {page.kind} {page.time}: offset {page.offset}, "
        f"{len(page.text)} characters shown, total_chars {page.total_chars}, next_offset {nxt}"
    )
    return f"{page.text}\n{footer}"


def _node_note(node: Node) -> str:
    details = node.details
    if node.type == "event":
        return f"{details.get('kind', '?')} {details.get('time', '')}".strip()
    sources = " ".join(details.get("sources", [])) or "-"
    note = f"rev {details.get('revision')}, from {sources}"
    return note + (", protected" if details.get("protected") else "")


def _via(link: Link | None) -> str:
    if link is None:
        return "(root)"
    return f"{link.source} -{link.label}-> {link.target}"


def traversal(page: TraversalPage) -> str:
    """The nodes (breadth-first, with the link each was reached by), the frames' bodies and the
    events' previews when they were asked for, the links among the nodes and the cursor of the
    next page."""
    head = (
        f"traversal from {page.root}: {page.direction}, depth {page.depth}, "
        f"mind version {page.version}"
    )
    rows = [
        (
            str(n.depth),
            n.id,
            n.type,
            str(n.details.get("lifecycle") or "-"),
            _via(n.via),
            _node_note(n),
        )
        for n in page.nodes
    ]
    headers = ("depth", "id", "type", "lifecycle", "reached via", "details")
    parts = [head, section("Nodes", table(headers, rows, max_width=200))]
    content = [  # a body as it is (its canonical text); a preview on one line; controls shown
        f"{n.id}: {visible(str(n.details[key])) if key == 'body' else _flat(n.details[key])}"
        for n in page.nodes
        for key in ("body", "preview")
        if key in n.details
    ]
    if content:
        parts.append(section("Content", "\n".join(content)))
    links = [(k.source, k.label, k.target) for k in page.links]
    parts.append(section("Links", table(("from", "link", "to"), links) if links else NONE))
    parts.append(
        f"next cursor: {page.next_cursor}" if page.next_cursor else "no more nodes (no next cursor)"
    )
    return "\n\n".join(parts)


def index_report(report: IndexReport) -> str:
    """The report of a recall index. The command line opens a store by ``morphz.open``, which
    rebuilds every index that is not current: one still not current was left so because a row
    of its context could not be read, which the audit names (a damaged store; review 20c)."""
    documents = _counts(dict(sorted(report.documents.items()))) or NONE
    context = shlex.quote(report.context)
    current = (
        "yes"
        if report.current
        else f"no: opening the store could not rebuild it, as when a row of {context} cannot be "
        f"read: `morphz context audit {context}` names such rows; once the store is restored, "
        f"`morphz context recall-index rebuild {context}` rebuilds it"
    )
    return pairs(
        [
            ("context", report.context),
            ("index table", report.table or NONE),
            ("documents", documents),
            ("event documents", report.event_documents),
            ("frame documents", report.frame_documents),
            ("frames", report.frames),
            ("last event", report.last_event),
            ("last indexed event", report.indexed_through),
            ("current", current),
            *(("building", f"{b.table}: {_building(b, report.context)}") for b in report.building),
        ]
    )


def _building(table: BuildingTable, context: str) -> str:
    """A building table's owner and what to do about it (nothing while its rebuild runs)."""
    clean = f"morphz context recall-index clean {shlex.quote(context)}"
    owner = table.owner.describe()
    if table.missing:
        return f"no longer in the store (dropped by hand), still recorded: run `{clean}`"
    if table.owner_alive is True:
        return f"{table.documents} documents, a rebuild running ({owner})"
    if table.owner_alive is False:
        return f"{table.documents} documents, left by a dead rebuild ({owner}): run `{clean}`"
    return (
        f"{table.documents} documents, {owner}: alive or dead cannot be told ("
        f"{untold_reason(table.owner)}); if no rebuild runs there, run `{clean} --force`"
    )


def clean_report(report: CleanReport) -> str:
    dropped = ", ".join(report.dropped) or "no table: no rebuild of it died"
    lines = [f"dropped from the recall index of {report.context}: {dropped}"]
    if report.forgotten:
        lines.append(f"forgot the records of tables dropped by hand: {', '.join(report.forgotten)}")
    lines.extend(f"kept {b.table}: {_building(b, report.context)}" for b in report.kept)
    return "\n".join(lines)


def forced_warning(table: BuildingTable) -> str:
    """The warning for a building table ``recall-index clean --force`` dropped although its
    rebuild's process could not be told dead."""
    return (
        f"warning: dropped {table.table} of a rebuild by {table.owner.describe()}, which could "
        f"not be told dead ({untold_reason(table.owner)}): if that rebuild still runs, it fails "
        "and must be run again; the live index is not affected"
    )


def import_report(report: ImportReport) -> str:
    data = report.to_dict()
    rate = f", {data['rate_per_s']:,} observations/s" if data["rate_per_s"] else ""
    count = report.observations
    return (
        f"imported {counted(count, 'observation')} into {report.context}: "
        f"{report.first_ref} .. {report.last_ref} in {data['seconds']} s{rate}"
    )


def budget(b: Budget, pressure: dict[str, Any]) -> str:
    return pairs(
        [
            ("window", f"{b.window:,} tokens"),
            ("output reserve", f"{b.output_reserve:,}"),
            ("configured limit", "none" if b.configured is None else f"{b.configured:,}"),
            ("maintenance reserve", f"{b.reserve:,}"),
            ("hard", f"{b.hard:,}"),
            ("levels", f"notice {b.notice:,}, warning {b.warning:,}, critical {b.critical:,}"),
            ("pressure", _pressure(pressure)),
        ]
    )


def view(v: View) -> str:
    return pairs(
        [
            ("preview threshold", f"{v.preview_threshold:,} characters"),
            ("session window", f"{v.session_hours:.15g} hours"),
            ("session count", f"{v.session_count:,} (the current session included)"),
            ("session tokens", f"{v.session_tokens:,}"),
        ]
    )


def request_stats(stats: Sequence[RequestStats], overall: RequestStats) -> str:
    if not stats:
        return "no activations in this context yet: run one with `morphz exec` or `morphz chat`"

    def row(s: RequestStats) -> tuple[str, ...]:
        rate = s.rate
        return (
            s.activation,
            s.session,
            s.state,
            str(s.requests),
            f"{s.bytes:,}",
            "-" if rate is None else f"{rate:.1%}",
            "-" if s.input_tokens is None else f"{s.input_tokens:,}",
            "-" if s.cached_tokens is None else f"{s.cached_tokens:,}",
            str(s.refused),
        )

    headers = (
        "activation", "session", "state", "requests", "bytes measured", "prefix reuse",
        "input tokens", "cached tokens", "refused",
    )  # fmt: skip
    rows = [row(s) for s in stats] + ([row(overall)] if len(stats) > 1 else [])
    note = (
        "\nprefix reuse: bytes of each request that began the previous one, first request of"
        " each engine excluded; tokens: as the provider reported them; refused: of the"
        " requests, those the provider refused as too long"
    )
    deltas = [_delta_line(s) for s in stats if s.increments or s.seeds]
    if deltas:
        note += "\nContextDelta requests (increments; seeds by reason):\n" + "\n".join(deltas)
    return table(headers, rows) + note


def _delta_line(s: RequestStats) -> str:
    seeds = ", ".join(f"{reason} {n}" for reason, n in sorted(s.seeds.items()))
    count = sum(s.seeds.values())
    return (
        f"  {s.activation}: {counted(s.increments, 'increment')}; "
        f"{counted(count, 'seed')} ({seeds})"
    )
