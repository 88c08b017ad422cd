"""Appending observations: one batch, one database transaction, one clock tick at most.

Each observation is its own step of the head-hash chain (its observation-state row, and the
session row when it opens a session); the clock tick is part of the batch's first step (so the
whole batch arrives at one tick), and the retirements it makes due are finalized in the same
database transaction (a runtime commit).
Rows are written with one statement per table for the whole batch, so long histories import fast.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any, cast

from morphz import events as ev
from morphz.checks import MAX_JSON_DEPTH, check_text, too_deep
from morphz.errors import HistoryImportError, InputError, MorphzError
from morphz.mind import OBSERVATION_KINDS, Changes, Overlay, chain_head, ensure_session
from morphz.mind.lifecycle import CLOCK_KINDS
from morphz.mind.lines import Entry, observation_units
from morphz.mind.state import ObsState
from morphz.recall import maintain
from morphz.store.active_base import meta_pairs
from morphz.store.base import WriteTxn

IMPORT_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class Observation:
    """One observation to append (see :meth:`morphz.Context.observe_batch`)."""

    kind: str
    text: str
    time: datetime | str | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Checked:
    kind: str
    text: str
    time: str | None
    meta: dict[str, Any] | None


def check_meta(meta: Mapping[str, Any] | None, what: str = "meta") -> dict[str, Any] | None:
    """``meta`` (``what``) as the store writes and reads it back, or an InputError."""
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise InputError(f"{what} must be a JSON object (a mapping)")
    if too_deep(meta):
        raise InputError(
            f"{what} must be a JSON object (strict JSON, string keys): nested too deeply "
            f"(more than {MAX_JSON_DEPTH} lists and objects)"
        )
    try:  # as the store writes it: keys sorted, strict JSON (no NaN or Infinity)
        text = json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InputError(f"{what} must be a JSON object (strict JSON, string keys): {why}") from exc
    check_text(text, what)
    stored: dict[str, Any] = json.loads(text)  # what reading the event back gives
    return stored


def check_reason(reason: object, what: str = "a reason") -> str | None:
    """An activation's finishing reason (or objective): None or text, which goes into the log as
    strict JSON; else an InputError naming it."""
    if reason is not None and not isinstance(reason, str):
        raise InputError(f"{what} must be text (a str) or None, not {type(reason).__name__}")
    return reason if reason is None else check_text(reason, what)


def check_objective(objective: object) -> str | None:
    """An activation's objective: None, or text that says something."""
    text = check_reason(objective, "an objective")
    if text is not None and not text.strip():
        raise InputError("an objective must say something: pass None to leave it out")
    return text


def check_setting(value: object, name: str) -> None:
    """InputError unless ``value`` is what ``name`` takes: the budget (set_budget), the view
    (set_view), encode's options or a model's calibration (save_calibration). None is refused
    too: it does not reset a setting."""
    from morphz.capacity import Budget
    from morphz.encoding.options import EncodeOptions
    from morphz.encoding.tokens import Calibration
    from morphz.encoding.view import View

    kind, example = {
        "budget": (Budget, "a morphz.capacity.Budget (Budget() is the default one)"),
        "view": (View, "a morphz.encoding.View (View() is the default one)"),
        "options": (EncodeOptions, "a morphz.encoding.EncodeOptions, or None"),
        "calibration": (
            Calibration,
            "a morphz.encoding.tokens.Calibration (ctx.calibration(model) reads the stored one)",
        ),
    }[name]
    if not isinstance(value, kind):
        raise InputError(f"the {name} must be {example}, not {type(value).__name__}")


def check_all(items: object) -> list[Checked]:
    """Each item of an observe_batch checked; the batch itself must be a list (an iterable)."""
    if not isinstance(items, Iterable) or isinstance(items, str | bytes | Mapping):
        raise InputError(
            f"observe_batch takes a list of Observation items, not {type(items).__name__}: "
            "[morphz.Observation(kind, text), ...]"
        )
    return [check(item) for item in items]


def check(item: Observation) -> Checked:
    from morphz.checks import normalize_time

    if not isinstance(item, Observation):
        raise InputError(
            f"observe_batch takes Observation items, not {type(item).__name__}: "
            "morphz.Observation(kind, text)"
        )
    if not isinstance(item.kind, str) or item.kind not in OBSERVATION_KINDS:
        kinds = ", ".join(sorted(OBSERVATION_KINDS))
        raise InputError(f"unknown observation kind {item.kind!r}: use one of {kinds}")
    if not isinstance(item.text, str):
        raise InputError("observation text must be a string")
    check_text(item.text, "observation text")
    return Checked(item.kind, item.text, normalize_time(item.time), check_meta(item.meta))


def append(
    w: WriteTxn,
    session: str,
    batch: list[Checked],
    recorded: str,
    tick: bool,
    *,
    ticked: int | None = None,
    marked: bool | None = None,
    activation: str | None = None,
) -> list[ev.Event]:
    """Append ``batch`` in ``session``; ``tick`` advances the clock with the first one, so
    every observation of the batch shows the same arrival tick. ``marked`` (default: ``tick``)
    says whether the "(ticked)" marker goes on an item of this batch, ``ticked`` which one (an
    import's chunks: the clock ticks with the first, the marker may sit in a later one).
    ``activation``: the activation whose work the batch records (its tool results), named in
    each event's payload (which the encoding does not show)."""
    row = w.row
    merged = Changes()
    view = Overlay(w, merged)
    head, seq, clock = row.head, row.last_seq, row.clock
    out: list[ev.Event] = []
    # the "(ticked)" marker goes on the observation that ticks: the first of a clock kind
    marker = (
        ticked
        if ticked is not None
        else next((i for i, item in enumerate(batch) if item.kind in CLOCK_KINDS), 0)
    )
    mark = tick if marked is None else marked
    for index, item in enumerate(batch):
        seq += 1
        changes = Changes()
        ensure_session(view, changes, session)
        merged.sessions.update(changes.sessions)
        if tick and index == 0:  # the new clock from the batch's first event on (the replay's)
            clock += 1
            changes.clock = clock
        time = item.time or recorded
        entry = Entry(seq, item.kind, session, time, clock, meta_pairs(item.meta))
        units = observation_units(entry, item.text)
        obs = ObsState(seq, item.kind, "active", False, len(item.text), units)
        changes.observations[seq] = obs
        merged.observations[seq] = obs
        head = chain_head(head, changes)
        payload: dict[str, Any] | None = {"tick": True} if mark and index == marker else None
        if activation is not None:
            payload = {"activation": activation, **(payload or {})}
        out.append(
            ev.Event(
                row.context_id,
                seq,
                item.kind,
                session,
                time,
                recorded,
                item.text,
                item.meta,
                payload,
                row.version,
                clock,
                head,
            )
        )
    first = row.last_seq + 1
    w.write_changes(merged, None, first)
    w.append_events(out)
    w.set_row(replace(row, last_seq=seq, clock=clock, head=head))
    maintain.index_events(w, out)
    return out


# ------------------------------------------------------------------ history import


@dataclass(frozen=True, slots=True)
class ImportReport:
    context: str
    observations: int
    first_ref: str | None
    last_ref: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "context": self.context,
            "observations": self.observations,
            "first": self.first_ref,
            "last": self.last_ref,
            "seconds": round(self.seconds, 3),
            "rate_per_s": round(self.observations / self.seconds, 1) if self.seconds else None,
        }


# a kind an import refuses: the runtime writes it for the agent's own delivered replies, and it
# is not indexed (its model_reply is), so an imported one could never be found. (A recall_result
# is importable: it copies evidence indexed elsewhere, and is not searched either.)
NOT_IMPORTED = frozenset({"agent_reply"})


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (a repeated key would lose a value)."""
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice!r} is given twice")
    return record


def _not_json(constant: str) -> Any:
    """JSON has no NaN or Infinity (Python's reader accepts them)."""
    raise ValueError(f"{constant} is not JSON")


def parse_line(number: int, line: str) -> Checked:
    """One JSON Lines record: {"kind"?, "text", "time"?, "meta"?}; errors name the line."""
    try:
        record = json.loads(line, parse_constant=_not_json, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as exc:
        where = f"line {number}, column {exc.colno}"
        reason = exc.msg.removesuffix(" at")
        raise HistoryImportError(f"{where}: not valid JSON ({reason})", line=number) from exc
    except (ValueError, RecursionError) as exc:  # NaN, a huge integer, nesting too deep
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise HistoryImportError(f"line {number}: not valid JSON ({what})", line=number) from exc
    if not isinstance(record, dict):
        raise HistoryImportError(f"line {number}: expected a JSON object", line=number)
    unknown = set(record) - {"kind", "text", "time", "meta"}
    if unknown:
        raise HistoryImportError(
            f"line {number}: unknown field(s) {sorted(unknown)}; use kind, text, time, meta",
            line=number,
        )
    if "text" not in record:
        raise HistoryImportError(f'line {number}: "text" is required', line=number)
    kind = _import_kind(number, record.get("kind"))
    try:
        return check(
            Observation(
                kind,
                record["text"],
                record.get("time"),
                record.get("meta"),
            )
        )
    except MorphzError as exc:
        raise HistoryImportError(f"line {number}: {exc.message}", line=number) from exc


def _import_kind(number: int, kind: Any) -> str:
    """The line's kind: user_message when absent or null (as time and meta take their defaults
    when null), else one an import takes, or a HistoryImportError naming it as the file has it."""
    if kind is None:
        return "user_message"
    if isinstance(kind, str) and kind in NOT_IMPORTED:
        raise HistoryImportError(
            f"line {number}: kind {kind!r} is written by the runtime for its own "
            "turns and is not searchable on its own: import an assistant's turn as "
            'external_event (or user_message) with meta such as {"speaker": "assistant"}',
            line=number,
        )
    if not isinstance(kind, str) or kind not in OBSERVATION_KINDS:
        said = repr(kind) if isinstance(kind, str) else json.dumps(kind, ensure_ascii=False)
        kinds = ", ".join(sorted(OBSERVATION_KINDS - NOT_IMPORTED))
        raise HistoryImportError(
            f"line {number}: unknown observation kind {said}: use one of {kinds}", line=number
        )
    return kind


def read_lines(source: str | Path | IO[str] | IO[bytes]) -> Iterator[tuple[int, str]]:
    """Numbered non-blank lines of a path or an open file (text or bytes); bytes are decoded as
    UTF-8 line by line (a leading byte-order mark is allowed), so a bad line is named."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise HistoryImportError(f"cannot read {path}: {exc.strerror}", line=None) from exc
        except ValueError as exc:  # a NUL in the path
            raise HistoryImportError(f"cannot read {path!r}: {exc}", line=None) from exc
        with handle:
            yield from read_lines(handle)
        return
    if not isinstance(source, Iterable) or isinstance(source, bytes | bytearray):
        raise InputError(
            f"a history is a file path or a file open for reading, not {type(source).__name__}: "
            'pass a path, or open("history.jsonl", "rb")'
        )
    try:
        lines = iter(cast(Iterable[str | bytes], source))
    except (OSError, ValueError) as exc:  # a closed file
        raise HistoryImportError(f"cannot read the history: {exc}", line=None) from exc
    number = 0
    while True:
        try:
            raw = next(lines, None)
        except UnicodeDecodeError as exc:  # a text file decodes in chunks: no line to name
            raise HistoryImportError(
                f"after line {number}: the text is not UTF-8 ({exc.reason}): save the file as "
                "UTF-8, or pass its path or a binary file to have the line named",
                line=None,
            ) from exc
        except (OSError, ValueError) as exc:  # closed, or open only for writing
            raise HistoryImportError(f"cannot read the history: {exc}", line=None) from exc
        if raw is None:
            return
        if not isinstance(raw, str | bytes | bytearray):
            raise InputError(
                f"a history is lines of JSON text, not {type(raw).__name__}: pass a path or a "
                "file; for records already parsed, use observe_batch"
            )
        number += 1
        line = raw if isinstance(raw, str) else _decode(number, raw)
        if number == 1:
            line = line.removeprefix("\ufeff")
        if line.strip():
            yield number, line


def _decode(number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HistoryImportError(
            f"line {number}: not UTF-8 (byte {exc.start + 1}): save the file as UTF-8", line=number
        ) from exc


def parse_all(lines: Iterable[tuple[int, str]]) -> list[Checked]:
    """Validate every line before anything is written (the import is all-or-nothing)."""
    items = [parse_line(number, line) for number, line in lines]
    if not items:
        raise HistoryImportError("the file holds no observations", line=None)
    return items


ProgressFn = Callable[[int, int], None]
