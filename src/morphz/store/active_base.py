"""The active-state part of the storage contract (what the Context Encoding reads)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from morphz.errors import DamagedStoreError
from morphz.mind.lines import Entry
from morphz.mind.state import Edge, Frame

if TYPE_CHECKING:
    from morphz.events import Event
    from morphz.store.base import SessionRow


@dataclass(frozen=True, slots=True)
class ActiveObservation:
    seq: int
    kind: str
    session_id: str
    time: str
    text: str
    protected: bool
    arrival_clock: int  # the cognitive clock right after it arrived
    # what was kept with it as meta: (key, value) in key order, each value as value_text
    meta: tuple[tuple[str, str], ...] = ()

    def entry(self) -> Entry:
        """What its inbox entry shows besides its text (render prints it, its units count it)."""
        return Entry(self.seq, self.kind, self.session_id, self.time, self.arrival_clock, self.meta)


def observation_of(event: Event) -> ActiveObservation:
    """The observation ``event`` appended, as the inbox shows it (unprotected)."""
    seq, kind, session, text = event.seq, event.kind, event.session_id, event.text or ""
    meta = meta_pairs(event.meta)
    return ActiveObservation(seq, kind, session, event.time, text, False, event.clock, meta)


@dataclass(frozen=True, slots=True)
class SessionWindow:
    """The sessions the session directory may show, most recent first (the current one
    first of all), and the counts of the others, made in SQL without building their rows."""

    rows: list[SessionRow]
    retired: int  # other sessions whose attention is retired
    inactive: int  # other active sessions last active before the time window
    in_window: int  # other active sessions inside the window, shown or not
    retired_latest: tuple[str, ...] = ()  # the most recently active retired ones (restorable)


class ActiveStore(Protocol):
    def observations(self) -> list[ActiveObservation]: ...
    def session_window(self, current: str, horizon: str | None, count: int) -> SessionWindow: ...
    def last_active(self) -> str | None: ...
    def session_counts(self) -> dict[str, int]: ...
    def frames(self) -> list[Frame]: ...
    def frame_tokens(self) -> int: ...
    def frames_and_budget(self) -> tuple[int, dict[str, Any] | None]: ...
    def relations(self) -> list[Edge]: ...
    def checkpoint_names(self) -> list[str]: ...
    def cited_by(self, refs: list[str]) -> dict[str, int]: ...
    def settings(self) -> Mapping[str, Any]: ...
    def setting_rows(self) -> list[tuple[str, str]]: ...
    def put_setting(self, name: str, value: Any) -> None: ...


# A context's settings (context_settings) are JSON objects: one that cannot be read is a
# StoreError naming the context and the setting (morphz/stored_settings.py reads them into
# their types).

_REPLACE = {  # how a setting is written again, by name (a calibration is learnt again)
    "budget": "Context.set_budget(morphz.capacity.Budget(...))",
    "view": "Context.set_view(morphz.encoding.view.View(...))",
}


_JSON_KINDS = {str: "string", int: "number", float: "number", bool: "boolean", list: "array"}
_JSON_KINDS[type(None)] = "null"


def damaged_setting(context_id: str, name: str, why: str) -> DamagedStoreError:
    """The error for the stored setting ``name`` of ``context_id`` that cannot be read."""
    how = _REPLACE.get(name)
    fix = f"replace it ({how}), or delete it to go back to the default" if how else "delete it"
    if name.startswith("calibration:"):
        fix += " (the next activations calibrate again)"
    return DamagedStoreError(
        f"the stored setting {name!r} of context '{context_id}' cannot be read ({why}): {fix}: "
        f"DELETE FROM context_settings WHERE context_id = '{context_id}' AND name = '{name}' "
        "(in the sqlite3 shell, on the store's file); the context's events and mind are intact"
    )


def decode_setting(context_id: str, name: str, text: str) -> Any:
    """The JSON object stored as ``text`` (StoreError when it is not one)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:  # not JSON, or not text at all
        raise damaged_setting(context_id, name, f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), type(value).__name__)
        raise damaged_setting(context_id, name, f"a JSON {kind}, not an object")
    return value


def value_text(value: Any) -> str:
    """A JSON value as the encoding shows it (a binding, a scheduling fact, an observation's
    meta): a string as it is, anything else as canonical JSON (sorted keys), so equal values
    give the same bytes."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)


def meta_pairs(meta: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """An event's meta (as read back) as :attr:`ActiveObservation.meta`: (key, value_text) in
    key order."""
    return tuple((k, value_text(v)) for k, v in sorted((meta or {}).items()))


def meta_items(context_id: str, seq: int, text: str | None) -> tuple[tuple[str, str], ...]:
    """The stored meta ``text`` of event ``seq`` (a JSON object, or None) as
    :attr:`ActiveObservation.meta`; StoreError when the row holds no JSON object."""
    if text is None:
        return ()
    items, why = (_meta_items if len(text) <= META_CACHED else _decoded_meta)(text)
    if why is None:
        return items
    raise damaged_event(f"event @e{seq}", context_id, f"its stored meta is {why}")


def damaged_event(where: str, context_id: str, why: str) -> DamagedStoreError:
    """The error for an event or frame row of ``context_id`` (``where``: ``event @e12``, ``the
    body of frame plan``) that cannot be read (``why``), and what to do: audit the context,
    restore the store from a backup."""
    return DamagedStoreError(
        f"{where} of context '{context_id}' cannot be read: {why}: the store is damaged; run "
        f"`morphz context audit {context_id}` to see what else is, and restore the store from "
        "a backup"
    )


# The longest meta text whose decoded items are remembered: a runtime's tool result carries
# about 60 characters, a host's event may carry a whole payload (meta has no size limit), which
# is decoded on each read instead of being kept for the life of the process. The cache holds
# at most 16,384 texts of this size and their items (about 40 MB at worst for ASCII text).
META_CACHED = 1_024


def json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """``text`` (a stored meta) decoded as a JSON object; None and why when it is not one."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"a JSON {_JSON_KINDS.get(type(value), type(value).__name__)}, not an object"
    return value, None


def _decoded_meta(text: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """``text`` decoded as meta items, or why it cannot be."""
    value, why = json_object(text)
    if value is None:
        return (), why
    return meta_pairs(value), None


# remembered: every compile shows the same observations' meta again, a runtime's tool results
# each carry one (only texts of at most META_CACHED characters)
_meta_items = functools.lru_cache(maxsize=16_384)(_decoded_meta)


class StoredSettings(Mapping[str, Any]):
    """A context's settings rows, each decoded when it is read: a damaged row is a StoreError
    for its own readers only (one calibration of a model no longer used must not make the
    budget, the view or another model's calibration unreadable)."""

    def __init__(self, context_id: str, rows: list[tuple[str, str]]) -> None:
        self._cid = context_id
        self._rows = dict(rows)
        self._decoded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._decoded:
            self._decoded[name] = decode_setting(self._cid, name, self._rows[name])
        return self._decoded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)
