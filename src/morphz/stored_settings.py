"""A context's runtime settings as stored (``context_settings``: its budget, view and model
calibrations, each a JSON object), read back into their types. A row that cannot be read (not
JSON, not an object, or not one its type accepts) is a :class:`StoreError` that names the
context and the setting and says what to do, never the decoder's own exception; the audit
reports such rows (:func:`problem`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from morphz.checks import check_whole
from morphz.errors import InputError, StoreError
from morphz.store.active_base import damaged_setting as damaged
from morphz.store.active_base import decode_setting as decode

if TYPE_CHECKING:
    from morphz.encoding.tokens import Calibration
    from morphz.store.base import WriteTxn

T = TypeVar("T")


def calibration_name(model: object) -> str:
    """The setting that holds ``model``'s calibration; ``model`` is the model's name (text)."""
    if not isinstance(model, str) or not model.strip():
        raise InputError(
            f"a calibration belongs to a model named by text (its name, such as "
            f"model.name or 'openai:gpt-4o'), not {model!r}"
        )
    return f"{CALIBRATION_PREFIX}{model}"


CALIBRATION_PREFIX = "calibration:"


def read_setting(
    context_id: str, name: str, data: dict[str, Any] | None, build: Callable[[dict[str, Any]], T]
) -> T | None:
    """``build(data)``, or None when the context has no such setting (or an empty one); a
    ``data`` its type refuses is a StoreError."""
    if not data:
        return None
    try:
        return build(data)
    except (TypeError, ValueError, KeyError, InputError) as exc:
        raise damaged(context_id, name, f"{type(exc).__name__}: {exc}") from exc


def problem(
    context_id: str, name: str, text: str, build: Callable[[dict[str, Any]], object] | None
) -> str | None:
    """What is wrong with the stored setting row (``name``, ``text``), or None when it reads
    (``build`` is its type's reader; None for a setting this release does not know)."""
    try:
        data = decode(context_id, name, text)
        if build is not None:
            read_setting(context_id, name, data, build)
    except StoreError as exc:
        return exc.message
    return None


def calibration_sample(model: object, estimated: object, reported: object) -> tuple[str, int, int]:
    """A provider report for ``model``'s calibration, checked: its setting's name, the
    estimated tokens of what a request sent and the tokens reported (whole numbers, at least 0:
    a report of 0 teaches nothing)."""
    name = calibration_name(model)
    estimated = check_whole(estimated, "a calibration's estimated tokens", 0)
    return name, estimated, check_whole(reported, "a calibration's reported tokens", 0)


def learn_calibration(w: WriteTxn, sample: tuple[str, int, int]) -> Calibration:
    """The calibration as stored, with one provider report (:func:`calibration_sample`)
    applied and written back, inside the write ``w``: what other engines of the model stored
    meanwhile (other processes) is read there, so their samples stand. Returns the calibration
    stored."""
    from morphz.encoding.tokens import Calibration

    name, estimated, reported = sample
    data = w.active.settings().get(name)
    calibration = read_setting(w.row.context_id, name, data, Calibration.from_dict) or Calibration()
    if calibration.update(estimated, reported):
        put_calibration(w, name, calibration)
    return calibration


def put_calibration(w: WriteTxn, name: str, calibration: Calibration) -> None:
    """Write ``calibration`` as the setting ``name`` inside ``w``, marked with the context's
    last event (``learnt``), which tells :func:`latest_calibration` the most recent one."""
    w.active.put_setting(name, {**calibration.to_dict(), LEARNT: w.row.last_seq})


LEARNT = "learnt"  # the context's last event when a calibration was written (absent before 21b)


def latest_calibration(
    context_id: str, rows: list[tuple[str, str]]
) -> tuple[str, Calibration] | None:
    """The model and calibration among a context's setting ``rows`` (name, JSON text) written
    most recently (the highest ``learnt``; one written before it was kept counts as the
    oldest; a tie goes to the most samples, then the name), or None when no calibration with
    samples reads. A calibration that cannot be read is passed over here, as every reader but
    its own model's passes it (the audit reports it)."""
    from morphz.encoding.tokens import Calibration

    best: tuple[tuple[int, int, str], str, Calibration] | None = None
    for name, text in rows:
        if not name.startswith(CALIBRATION_PREFIX) or problem(
            context_id, name, text, Calibration.from_dict
        ):
            continue
        data = decode(context_id, name, text)
        calibration = Calibration.from_dict(data)
        learnt = data.get(LEARNT)
        order = learnt if isinstance(learnt, int) and not isinstance(learnt, bool) else -1
        key = (order, calibration.samples, name)
        if calibration.samples and (best is None or key > best[0]):
            best = (key, name.removeprefix(CALIBRATION_PREFIX), calibration)
    return None if best is None else (best[1], best[2])
