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
from typing import TYPE_CHECKING, Any

from morphz.encoding.options import EncodeOptions
from morphz.encoding.tokens import Calibration, Counter, figure
from morphz.runtime.models.sdk import PREAMBLE
from morphz.runtime.requests import FRAMING
from morphz.runtime.tools.base import ToolRegistry

if TYPE_CHECKING:
    from morphz.contextdb import Context


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


def empty_request(options: EncodeOptions, near: Path | None = None) -> int:
    """The pressure figure of a request compiled with ``options`` on an empty context: no
    observation, no frame, no activation, no objective (the budget plays no part in it). The
    empty store is made in the system's temporary folder or, where that cannot be written (a
    read-only root, a full /tmp), in a temporary folder inside ``near`` (the user's store's
    folder, which can be written since the store is)."""

    empty = replace(
        options,
        activation=None,
        objectives=(),
        budget=None,
        budget_keys={},
        only_observations=None,
    )
    try:
        return _measure(empty, None)
    except OSError:
        if near is None:
            raise
        return _measure(empty, near)


def _measure(options: EncodeOptions, folder: Path | None) -> int:
    from morphz.database import open as open_store

    with (
        tempfile.TemporaryDirectory(prefix="morphz-floor-", dir=folder) as where,
        open_store(Path(where) / "empty.db") as db,
    ):
        return db.context("empty", create=True).encode(options).tokens


def store_folder(ctx: Context) -> Path | None:
    """The folder of ``ctx``'s store file (None for a store without one)."""
    path = getattr(ctx.db.store, "path", None)
    return path.parent if isinstance(path, Path) else None


class Floors:
    """An engine's floors (work and maintenance). Each mode's is measured once, uncalibrated;
    a calibrated floor is derived from it as the compile derives every figure (the calibration
    applies to the counted parts, the framing is added as it is), so a calibration that changes
    with every provider report costs no new measurement."""

    def __init__(self, near: Path | None = None) -> None:
        self.near = near
        self._known: dict[bool, tuple[int, int]] = {}  # each mode's counted parts and framing

    def get(self, options: EncodeOptions, maintenance: bool) -> int:
        """The floor of the requests ``options`` compile (the tools of ``maintenance``)."""
        if maintenance not in self._known:
            uncalibrated = empty_request(replace(options, calibration=None), self.near)
            self._known[maintenance] = (uncalibrated - options.framing, options.framing)
        return _counted(self._known[maintenance], options.calibration, options.counter)

    def derived(
        self, maintenance: bool, calibration: Calibration | None, counter: Counter | None
    ) -> int | None:
        """The floor of ``maintenance``'s requests counted under ``calibration`` as it is now
        (with ``counter``, the one it was measured with, exactly), without compiling; None
        when it has not been measured yet (:meth:`get`)."""
        known = self._known.get(maintenance)
        return None if known is None else _counted(known, calibration, counter)


def _counted(
    known: tuple[int, int], calibration: Calibration | None, counter: Counter | None
) -> int:
    """A floor's figure from its counted parts and framing (``known``), as the compile counts."""
    parts, framing = known
    return figure(parts, calibration, counter).tokens + framing
