"""EncodeOptions: what the runtime knows that the store does not, and the checks that keep a
wrong option a typed InputError naming the field (never a TypeError from deep in the compile)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, TypeVar

from morphz.capacity import Budget
from morphz.checks import (
    MAX_JSON_DEPTH,
    check_id,
    check_stored_id,
    check_whole,
    normalize_time,
    too_deep,
)
from morphz.encoding.tokens import Calibration, Counter
from morphz.encoding.view import View
from morphz.errors import InputError
from morphz.store.active_base import value_text

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class EncodeOptions:
    """What the runtime knows that the store does not. Every field is rendered verbatim, except
    binding and scheduling values that are not strings (canonical JSON) and times given as
    datetimes (ISO 8601)."""

    session: str = "default"
    activation: str | None = None
    model: str = "none"
    local_time: str = "unknown"  # free text (an ISO time has an offset), or an aware datetime
    bindings: dict[str, Any] = field(default_factory=dict)
    objectives: tuple[str, ...] = ()
    scheduling: dict[str, Any] = field(default_factory=dict)
    authority: dict[str, str] = field(default_factory=dict)  # tool -> allow/ask/deny
    profile: str | None = None  # a bound harness definition
    capabilities: str | None = None
    budget: Budget | None = None  # None: the context's stored budget (or the default)
    # Budget fields set over that budget, in the compile's own snapshot (e.g. configured: N)
    budget_keys: Mapping[str, int] = field(default_factory=dict)
    calibration: Calibration | None = None
    counter: Counter | None = None  # an exact tokenizer
    extra_parts: tuple[str, ...] = ()  # tool schemas and messages sent with the encoding
    # tokens a provider adds around the messages the request travels in (roles, delimiters),
    # added to the figure whatever its kind (not calibrated: they are not text we estimate)
    framing: int = 0
    # the view (None: the context's stored one, see morphz.encoding.view)
    preview_threshold: int | None = None
    session_hours: float | None = None
    session_count: int | None = None
    session_tokens: int | None = None
    now: str | None = None  # ISO time the session window is measured from (default local_time)
    only_observations: frozenset[int] | None = None  # a maintenance batch: show only these

    def view_over(self, stored: View) -> View:
        """``stored`` with the view settings these options give (checked: InputError)."""
        return View(
            _given(self.preview_threshold, stored.preview_threshold),
            _given(self.session_hours, stored.session_hours),
            _given(self.session_count, stored.session_count),
            _given(self.session_tokens, stored.session_tokens),
        )


def _given(value: _T | None, stored: _T) -> _T:
    return stored if value is None else value


def make_options(**given: Any) -> EncodeOptions:
    """EncodeOptions from keyword fields; an unknown field is an InputError naming the known."""
    known = {f.name for f in fields(EncodeOptions)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise InputError(
            f"unknown encoding option(s) {', '.join(unknown)}: the options are "
            + ", ".join(sorted(known))
        )
    return EncodeOptions(**given)


def checked(opts: EncodeOptions) -> EncodeOptions:
    """``opts`` checked (InputError naming the field), with datetimes as ISO 8601 text. What
    the encoding shows bare, not quoted, must be an id: the session, the activation, the names
    in scheduling, authority and bindings; an authority is allow, ask or deny."""
    _check_types(opts)
    check_stored_id(opts.session, "session id")  # read: a newer Python may have named it
    check_whole(opts.framing, "the framing", 0, unit="tokens")
    if opts.activation is not None:
        check_stored_id(opts.activation, "activation id")
    for what, names in (
        ("scheduling name", opts.scheduling),
        ("authority tool name", opts.authority),
        ("binding name", opts.bindings),
    ):
        for name in names:
            check_id(name, what)
    for tool, policy in opts.authority.items():
        if policy not in ("allow", "ask", "deny"):
            raise InputError(f"the authority of {tool} must be allow, ask or deny, not {policy!r}")
    for what, values in (("binding", opts.bindings), ("scheduling", opts.scheduling)):
        for name, value in values.items():
            if too_deep(value):
                raise InputError(
                    f"the {what} {name} nests lists and objects more than {MAX_JSON_DEPTH} deep"
                )
            try:
                value_text(value)
            except (TypeError, ValueError, RecursionError) as exc:
                raise InputError(
                    f"the {what} {name} must be a string or a JSON value (numbers finite), "
                    f"not {type(value).__name__}: {exc}"
                ) from exc
    if isinstance(opts.now, str):  # a time with an offset (local_time may be free text)
        normalize_time(opts.now, "now")
    if isinstance(opts.local_time, str):
        _not_naive(opts.local_time)
    local, now = _time(opts.local_time, "local_time"), _time(opts.now, "now")
    if local is opts.local_time and now is opts.now:
        return opts
    return replace(opts, local_time=local, now=now)


def _not_naive(local_time: str) -> None:
    """Refuse a ``local_time`` that is an ISO time without a UTC offset: the session window is
    measured from a local time with one, and this one would be ignored for it without a word.
    Free text that is no ISO time ("unknown", "Tuesday morning") is shown as given."""
    try:
        parsed = datetime.fromisoformat(local_time)
    except ValueError:
        return  # free text
    if parsed.utcoffset() is None:
        raise InputError(
            f"local_time {local_time!r} is a time without a UTC offset, which the session window "
            "cannot be measured from: add one, e.g. 2026-08-04T09:00:00+08:00 (in Python: "
            "datetime.now().astimezone().isoformat()), or give a datetime with its tzinfo"
        )


def _time(value: _T, name: str) -> _T | str:
    """A datetime option as ISO 8601 text (with its offset: a naive one is an InputError)."""
    if isinstance(value, datetime):
        text = normalize_time(value, name)
        assert text is not None
        return text
    return value


def _check_types(opts: EncodeOptions) -> None:
    for name in ("session", "model"):
        _expect(opts, name, isinstance(getattr(opts, name), str), "a string")
    _expect(opts, "local_time", isinstance(opts.local_time, str | datetime), "a string or time")
    for name in ("activation", "profile", "capabilities"):
        value = getattr(opts, name)
        _expect(opts, name, value is None or isinstance(value, str), "a string or None")
    _expect(opts, "now", opts.now is None or isinstance(opts.now, str | datetime), "a time")
    for name in ("objectives", "extra_parts"):
        value = getattr(opts, name)
        strings = isinstance(value, tuple | list) and all(isinstance(v, str) for v in value)
        _expect(opts, name, strings, 'a tuple of strings (one item: ("...",))')
    for name in ("bindings", "scheduling", "authority"):
        _expect(opts, name, isinstance(getattr(opts, name), Mapping), "a mapping of names")
    _expect(opts, "budget", opts.budget is None or isinstance(opts.budget, Budget), "a Budget")
    _expect(opts, "budget_keys", isinstance(opts.budget_keys, Mapping), "a mapping of fields")
    good = opts.calibration is None or isinstance(opts.calibration, Calibration)
    _expect(opts, "calibration", good, "a Calibration")
    good = opts.counter is None or callable(opts.counter)
    _expect(opts, "counter", good, "a function from text to a token count")
    batch = opts.only_observations
    good = batch is None or (
        isinstance(batch, frozenset | set)
        and all(isinstance(s, int) and not isinstance(s, bool) for s in batch)
    )
    _expect(opts, "only_observations", good, "a frozenset of event sequence numbers")


def _expect(opts: EncodeOptions, name: str, ok: bool, what: str) -> None:
    if not ok:
        value = getattr(opts, name)
        raise InputError(f"the encoding option {name} must be {what}, not {type(value).__name__}")
