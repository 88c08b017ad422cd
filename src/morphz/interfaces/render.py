"""Text rendering for the command line: tables and readable summaries of library results.

Pure functions from library values to strings; no I/O and no click. The JSON format of the CLI
does not come through here: it is the values' own ``to_dict()``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from morphz.errors import MorphzError, TxError
from morphz.events import Event
from morphz.results import AuditReport, FrameView, Mind, Receipt, Status

NONE = "(none)"
MAX_CELL = 60


# ------------------------------------------------------------------ tables


def _cell_lines(cell: str, width: int) -> list[str]:
    """A cell's lines: its own line breaks, then wrapped at ``width`` characters."""
    out: list[str] = []
    for line in cell.split("\n") or [""]:
        out.extend(textwrap.wrap(line, width, break_on_hyphens=False) or [""])
    return out


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    grid: bool = False,
    max_width: int = MAX_CELL,
) -> str:
    """A text table. ``grid`` draws a box with a rule between rows (for multi-line cells);
    otherwise columns are separated by two spaces under a dashed header rule."""
    body = [[_cell_lines(str(c), max_width) for c in row] for row in rows]
    head = [_cell_lines(h, max_width) for h in headers]
    widths = [
        max(len(line) for row in [head, *body] for line in row[i]) for i in range(len(headers))
    ]

    def lines_of(row: list[list[str]]) -> list[str]:
        height = max(len(c) for c in row)
        out = []
        for k in range(height):
            parts = [
                (c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths, strict=True)
            ]
            out.append(f"| {' | '.join(parts)} |" if grid else "  ".join(parts).rstrip())
        return out

    if not grid:
        rule = "  ".join("-" * w for w in widths)
        return "\n".join([*lines_of(head), rule, *(x for row in body for x in lines_of(row))])
    thin = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    thick = thin.replace("-", "=")
    out = [thin, *lines_of(head), thick]
    for row in body:
        out.extend([*lines_of(row), thin])
    return "\n".join(out)


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
        return f"retiring ({ticks} tick{'' if ticks == 1 else 's'} left)"
    return frame.lifecycle


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


def mind(m: Mind, *, all_observations: bool = False) -> str:
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
    which = "all" if all_observations else "active or protected; --all-observations for all"
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
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def event_line(e: Event) -> str:
    """One line: ref, kind, session, version and clock after it, and a preview of its text."""
    tick = " (ticked)" if (e.payload or {}).get("tick") else ""
    return (
        f"{e.ref} {e.kind} session={e.session_id} version={e.version} "
        f"clock={e.clock}{tick}: {_preview(e.text)}"
    )


def events(items: Sequence[Event]) -> str:
    if not items:
        return "no events"
    rows = [
        (e.ref, e.kind, e.session_id, e.time, str(e.version), str(e.clock), _preview(e.text, 50))
        for e in items
    ]
    return table(("ref", "kind", "session", "time", "version", "clock", "text"), rows)


def audit(report: AuditReport) -> str:
    verdict = "audit: ok" if report.ok else f"audit: FAILED ({len(report.differences)} differences)"
    lines = [
        verdict,
        f"context {report.context}: {report.events} events replayed, {report.commits} commits",
        f"stored head   {report.stored_head}",
        f"replayed head {report.replayed_head}",
    ]
    lines.extend(f"  - {d}" for d in report.differences)
    return "\n".join(lines)


def error(exc: MorphzError) -> str:
    """A refusal for a person: what failed, where, and the extra details the error carries."""
    text = f"error: {exc}" if isinstance(exc, TxError) else f"error ({exc.code}): {exc.message}"
    if isinstance(exc, TxError):
        for key, value in exc.details.items():
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            text += f"\n  {key}: {shown}"
    return text
