"""How a context is shown to a model, apart from what it holds: the size above which an inbox
observation is shown as a preview, and the session directory's working set (time window, count,
token budget). Stored per context as a runtime setting (not mind state, so not in the audit), like
the token budget; a compile may override any of it (:class:`~morphz.encoding.EncodeOptions`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from morphz.checks import check_whole
from morphz.errors import InputError
from morphz.mind.lifecycle import DEFAULT_PREVIEW_THRESHOLD
from morphz.stored_settings import read_setting

MAX_SESSION_HOURS = 876_000  # 100 years: a window reaching past year 1 cannot be computed
# upper bounds that keep every figure a SQLite integer and a Python int a compile can use
MAX_SESSIONS_LISTED = 1_000_000
MAX_CHARS_OR_TOKENS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class View:
    preview_threshold: int = DEFAULT_PREVIEW_THRESHOLD  # characters; longer: head and tail
    session_hours: float = 24.0  # other sessions last active longer ago are left out
    session_count: int = 50  # sessions listed at most, the current one included
    session_tokens: int = 4_000  # the directory's estimated tokens: full, then metadata

    def __post_init__(self) -> None:
        most = MAX_CHARS_OR_TOKENS
        check_whole(self.preview_threshold, "preview_threshold", 1, most, unit="characters")
        why = "the current session is always listed"
        count, top = self.session_count, MAX_SESSIONS_LISTED
        check_whole(count, "session_count", 1, top, unit="sessions", why=why)
        check_whole(self.session_tokens, "session_tokens", 0, most, unit="tokens")
        hours = self.session_hours
        if isinstance(hours, bool) or not isinstance(hours, int | float):
            raise InputError(f"session_hours must be a number of hours, not {hours!r}")
        if not math.isfinite(hours) or not 0 < hours <= MAX_SESSION_HOURS:
            raise InputError(
                f"session_hours must be more than 0 and at most {MAX_SESSION_HOURS:,} hours "
                f"(100 years), not {hours!r}"
            )
        # one type whatever was given: 24 and 24.0 are one view, stored and shown alike
        object.__setattr__(self, "session_hours", float(hours))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> View:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InputError(f"unknown view settings {sorted(unknown)}: use {sorted(known)}")
        return cls(**data)


def stored_view(settings: Mapping[str, Any], context_id: str) -> View:
    """Context ``context_id``'s view, from its runtime settings (the default one until set; a
    damaged one: StoreError)."""
    return read_setting(context_id, "view", settings.get("view"), View.from_dict) or View()
