"""Row conversions shared by the SQLite modules."""

from __future__ import annotations

from typing import Any

from morphz.mind.state import Frame

FRAME_COLS = "frame_id, body, sources, revision, lifecycle, protected, pos, deadline, reason"


def frame_from_row(row: tuple[Any, ...]) -> Frame:
    fid, body, sources, revision, lifecycle, protected, pos, deadline, reason = row
    return Frame(
        fid,
        body,
        tuple(sources.split()) if sources else (),
        revision,
        lifecycle,
        bool(protected),
        pos,
        deadline,
        reason,
    )
