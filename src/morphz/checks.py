"""Checks and conversions of API input shared by the library's entry points."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from morphz.errors import InputError
from morphz.ids import describe_id_rules, is_id, is_new_id, is_ref, is_stored_id, ref_seq
from morphz.mind.lifecycle import MAX_WINDOW
from morphz.txlang.sexpr import surrogate_message, unicode_problem


def utc_now() -> datetime:
    return datetime.now(UTC)


def normalize_time(value: datetime | str | None, what: str = "time") -> str | None:
    """An ISO 8601 time with an explicit offset, or None. Naive times are refused."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InputError(
                f"{what} {value!r} is not an ISO 8601 time: use e.g. 2026-08-04T09:00:00+08:00"
            ) from exc
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise InputError(
            f"{what} must be an ISO 8601 string or a datetime, not {type(value).__name__}: "
            "e.g. 2026-08-04T09:00:00+08:00"
        )
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InputError(
            f"{what} {value!s} has no UTC offset: add one, e.g. 2026-08-04T09:00:00+08:00 or Z"
        )
    return parsed.isoformat()


def check_text(value: str, what: str) -> str:
    """``value`` when it is valid Unicode text, else an InputError saying where it is not."""
    problem = unicode_problem(value)
    if problem is not None:
        raise InputError(f"{what}: {problem[1]}")
    return value


def not_unicode(exc: UnicodeEncodeError, what: str) -> InputError:
    """The InputError for text a UTF-8 encoding refused (``exc``), naming ``what`` it was."""
    return InputError(f"{what}: {surrogate_message(exc)}")


def check_id(value: str, what: str) -> str:
    """``value`` when it is an id by this Python's rules (:func:`morphz.ids.is_id`)."""
    if not isinstance(value, str) or not is_id(value):
        raise InputError(f"{what} {value!r} is not a valid id: {describe_id_rules(value)}")
    return value


def check_stored_id(value: str, what: str) -> str:
    """``value`` when it may name something a store holds (:func:`morphz.ids.is_stored_id`:
    also an id a newer Python's Unicode database allowed), such as a context to open."""
    if not isinstance(value, str) or not is_stored_id(value):
        raise InputError(f"{what} {value!r} is not a valid id: {describe_id_rules(value)}")
    return value


NO_DASH = "a command line reads as an option"  # why a new context id may not begin with '-'


def check_new_context_id(value: str) -> str:
    """``value`` as the id of a context to create: an id (:func:`check_id`) that does not begin
    with ``-``, which a command line reads as an option (``morphz context status -ops``). Ids
    allow the dash elsewhere, and contexts made before this rule keep theirs (the command line
    names them after ``--``). Like every new id it must be in composed form (NFC) and hold only
    characters this Python's Unicode database knows (:func:`morphz.ids.is_new_id`)."""
    if not isinstance(value, str) or not is_new_id(value):
        raise InputError(f"context id {value!r} is not a valid id: {describe_id_rules(value)}")
    if value.startswith("-"):
        raise InputError(
            f"context id {value!r} begins with '-', which {NO_DASH}: a new context's id may "
            "not begin with '-', so give one without the leading '-' (a context made before "
            f"this rule keeps its id, and commands name it after --: `morphz context status -- "
            f"{value}`)"
        )
    return value


def how_to_create(context_id: str) -> str:
    """What the error that finds no context ``context_id`` says to do: create it, unless a new
    context may not have that id."""
    if context_id.startswith("-"):
        return f"a new context's id may not begin with '-' ({NO_DASH})"
    return f"create it with `morphz context create {context_id}` or db.context(..., create=True)"


def check_whole(
    value: object, what: str, least: int, most: int | None = None, *, unit: str = "", why: str = ""
) -> int:
    """``value`` as a whole number from ``least`` (to ``most``, in ``unit``), else an InputError
    naming the range (and ``why`` it is so). ``True`` and ``False`` are refused: Python counts
    them as integers, a user does not."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or (most is not None and value > most)
    ):
        span = f"of at least {least}" if most is None else f"from {least} to {most}"
        notes = "; ".join(note for note in (unit, why) if note)
        span += f" ({notes})" if notes else ""
        raise InputError(f"{what} must be a whole number {span}, not {value!r}")
    return value


def check_progress(progress: object, takes: str = "(done, total)") -> None:
    """InputError, before any work, unless ``progress`` is None or a function (of ``takes``)."""
    if progress is not None and not callable(progress):
        raise InputError(
            f"progress is a function called with {takes} as the work goes on, or None, "
            f"not {progress!r:.80}"
        )


def check_changes(changes: object, method: str, example: str) -> None:
    """InputError, before any work, unless ``changes`` (of ``Context.update_budget`` or
    ``update_view``, ``method``) is a mapping of field names to new values."""
    if not isinstance(changes, Mapping):
        raise InputError(
            f"{method} takes a mapping of the field names to change to their new values, "
            f"e.g. {method}({example}), not {type(changes).__name__} {changes!r:.80}"
        )


def check_window(window: int) -> None:
    check_whole(window, "window", 0, MAX_WINDOW, unit="ticks")


def parse_ref(ref: str) -> int:
    if not isinstance(ref, str) or not is_ref(ref):
        raise InputError(f"{ref!r} is not an event ref: use the form @e42")
    return ref_seq(ref)


# How deep lists and objects may nest in a JSON value Morphz stores or takes (meta, bindings,
# scheduling facts, a tool call's arguments). Python's json recurses once per level: on 3.11 it
# stops near the interpreter's recursion limit (about 990 levels, less the caller's stack),
# from 3.13 it goes on to about 10,000. A fixed limit well below the first keeps the same input
# accepted or refused on every version, and what one version stores readable by another.
MAX_JSON_DEPTH = 500


def too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists (or tuples) and mappings more than ``limit`` deep (a
    scalar is 0 deep, ``{}`` 1, ``{"a": []}`` 2). Walked without recursion."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
