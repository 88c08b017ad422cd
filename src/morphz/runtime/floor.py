"""The smallest request a runtime sends: the encoding of an empty context (the protocol, the
profile, the kernel, the empty regions) with the tool schemas, the preamble and the framing it
sends beside it. The work request's floor decides when work resumes after maintenance
(:func:`morphz.capacity.resume_below`), and the `budget` refusal of a commit counts the
maintenance request's floor with the frames it would leave (:mod:`morphz.committing`).

Measured, not estimated: the options are compiled on an empty context of a store made in
a temporary folder, so every part the compiler adds is counted as a request's figure counts it.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from morphz.encoding.options import EncodeOptions
from morphz.encoding.tokens import Calibration
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.requests import FRAMING
from morphz.runtime.tools.base import ToolRegistry


def request_options(tools: ToolRegistry, *, maintenance: bool, **fields: Any) -> EncodeOptions:
    """The options of a request offering ``tools`` (the maintenance set, or the work set), with
    what the adapters send beside the encoding counted; ``fields``: the other options (model,
    profile, calibration, counter...)."""
    offered = tools.offered(maintenance)
    return EncodeOptions(
        authority=tools.authority(maintenance),
        extra_parts=(PREAMBLE, *(t.schema.text for t in offered)),
        framing=FRAMING,
        **fields,
    )


def empty_request(options: EncodeOptions) -> int:
    """The pressure figure of a request compiled with ``options`` on an empty context: no
    observation, no frame, no activation, no objective (the budget plays no part in it)."""
    from morphz.database import open as open_store

    empty = replace(
        options,
        activation=None,
        objectives=(),
        budget=None,
        budget_keys={},
        only_observations=None,
    )
    with (
        tempfile.TemporaryDirectory(prefix="morphz-floor-") as folder,
        open_store(Path(folder) / "empty.db") as db,
    ):
        return db.context("empty", create=True).encode(empty).tokens


class Floors:
    """An engine's floors (work and maintenance), measured once for each calibration state."""

    def __init__(self, calibration: Calibration) -> None:
        self.calibration = calibration
        self._known: dict[tuple[bool, float | None], int] = {}

    def get(self, options: EncodeOptions, maintenance: bool) -> int:
        """The floor of the requests ``options`` compile (the tools of ``maintenance``)."""
        cal = self.calibration
        key = (maintenance, cal.factor if cal.samples else None)
        if key not in self._known:
            self._known[key] = empty_request(options)
        return self._known[key]
