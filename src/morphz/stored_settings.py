"""A context's runtime settings as stored (``context_settings``: its budget, view and model
calibrations, each a JSON object), read back into their types. A row that cannot be read (not
JSON, not an object, or not one its type accepts) is a :class:`StoreError` that names the
context and the setting and says what to do, never the decoder's own exception; the audit
reports such rows (:func:`problem`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from morphz.errors import InputError, StoreError
from morphz.store.active_base import damaged_setting as damaged
from morphz.store.active_base import decode_setting as decode

T = TypeVar("T")


def calibration_name(model: object) -> str:
    """The setting that holds ``model``'s calibration; ``model`` is the model's name (text)."""
    if not isinstance(model, str) or not model.strip():
        raise InputError(
            f"a calibration belongs to a model named by text (its name, such as "
            f"model.name or 'openai:gpt-4o'), not {model!r}"
        )
    return f"calibration:{model}"


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
