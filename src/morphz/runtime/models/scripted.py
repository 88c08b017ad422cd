"""Deterministic models for demos and tests: a script of steps, or a Python function.

A script is a JSON list of steps; each step is ``{"reply": "text"}`` or
``{"tool_calls": [{"name": "context_tx", "arguments": {...} | "raw json text"}], "reply"?: ...}``.
A step's strings may contain ``{version}`` and ``{last_ref}`` / ``{ref:N}`` placeholders that
are filled from the kernel and inbox of the encoding the model is shown, so a script can write
transactions against the live base version. Running past the end is a BadResponseError.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from morphz.errors import InputError, ParseError
from morphz.runtime.models.base import BadResponseError, ModelRequest, ModelResponse, ToolCall
from morphz.txlang.sexpr import Atom, SList, read


def _fill(text: str, encoding: str) -> str:
    if "{" not in text:
        return text
    version, refs = _shown(encoding)
    out = text.replace("{version}", version)
    out = out.replace("{last_ref}", refs[-1] if refs else "@e0")
    return re.sub(r"\{ref:(-?\d+)\}", lambda m: _ref(refs, int(m.group(1))), out)


def _shown(encoding: str) -> tuple[str, list[str]]:
    """The mind version the request states last and the refs of its inbox in order: the seed's
    ``(inbox ...)`` items, then each increment's ``(arrived ...)`` less its ``(retired ...)``.
    Read as S-expressions, so an ``(observation @eN`` inside a text or a frame body is not one."""
    try:
        nodes = read(encoding)
    except ParseError as exc:
        raise BadResponseError(f"the script cannot read the request's encoding: {exc}") from exc
    version, refs = "0", []
    regions: list[SList] = []  # a region may stand alone (a partial encoding, in tests)
    for node in nodes:
        if type(node) is SList:
            wrapped = node.head in ("context-encoding", "context-delta")
            regions.extend(_lists(node) if wrapped else [node])
    for item in regions:
        if item.head == "inbox":
            refs = [_atom(o, 1) for o in _lists(item) if o.head == "observation"]
        elif item.head == "arrived" and len(item.items) > 1 and type(item.items[1]) is SList:
            refs.append(_atom(item.items[1], 1))
        elif item.head == "retired":
            gone = {_atom(item, i) for i in range(1, len(item.items))}
            refs = [ref for ref in refs if ref not in gone]
        elif item.head in ("kernel", "kernel-update"):
            for entry in _lists(item):
                if entry.head == "mind-version":
                    version = _atom(entry, 1)
    return version, [ref for ref in refs if ref]


def _lists(node: SList) -> list[SList]:
    return [item for item in node.items[1:] if type(item) is SList]


def _atom(node: SList, index: int) -> str:
    item = node.items[index] if index < len(node.items) else None
    return item.text if type(item) is Atom else ""


def _ref(refs: list[str], index: int) -> str:
    """The ``index``-th observation ref of the encoding (``{ref:N}``; negative from the end)."""
    if not refs:
        return "@e0"
    if not -len(refs) <= index < len(refs):  # the script fails as running past its end does
        raise BadResponseError(
            f"the script's {{ref:{index}}} is out of range: the encoding shows "
            f"{len(refs)} observation{'s' if len(refs) != 1 else ''}"
        )
    return refs[index]


STEP_KEYS = ("reply", "tool_calls")  # what a script's step may hold
CALL_KEYS = ("name", "arguments")  # ... and one of its tool calls


def _check_keys(index: int, found: dict[str, Any], known: tuple[str, ...], what: str) -> None:
    """Refuse a key of ``found`` (a step or a call, ``what``) that is not ``known``: a misspelt
    key would otherwise be ignored (a call never made, arguments never passed)."""
    unknown = sorted(str(key) for key in found if key not in known)
    if unknown:
        raise InputError(
            f"script step {index}: {what} has an unknown key {unknown[0]!r}: the keys it may "
            f"have are {', '.join(repr(key) for key in known)}"
        )


def _check_call(index: int, call: Any) -> None:
    """A script's tool call, checked when the script is read (before anything is written)."""
    shape = '{"name": "context_tx", "arguments": {"tx": "..."}}'
    if not isinstance(call, dict):
        raise InputError(f"script step {index}: a tool call is an object {shape}, not {call!r}")
    _check_keys(index, call, CALL_KEYS, "a tool call")
    if not isinstance(call.get("name"), str) or not call["name"]:
        raise InputError(f"script step {index}: a tool call needs a name (text): {shape}")
    if not isinstance(call.get("arguments", {}), dict | str):
        raise InputError(
            f"script step {index}: a tool call's arguments are an object or a JSON text: {shape}"
        )


def _call(index: int, number: int, raw: dict[str, Any], encoding: str) -> ToolCall:
    args = raw.get("arguments", {})
    text = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(f"call_{index}_{number}", str(raw["name"]), _fill(text, encoding))


def script_name(path: str | Path) -> str:
    """A scripted model's name: ``scripted:`` and its file's name (what its requests'
    encodings state, and what its calibration is kept under)."""
    return f"scripted:{Path(path).name}"


class ScriptedModel:
    """Replays ``steps`` in order, one per request."""

    def __init__(self, steps: list[dict[str, Any]], name: str = "scripted") -> None:
        for index, step in enumerate(steps):
            if isinstance(step, dict):  # a misspelt key first: it says what was meant
                _check_keys(index, step, STEP_KEYS, "the step")
            if not isinstance(step, dict) or not (set(STEP_KEYS) & set(step)):
                raise InputError(f"script step {index}: expected a reply or tool_calls")
            if not isinstance(step.get("reply", ""), str):
                raise InputError(f"script step {index}: the reply must be text")
            if not isinstance(step.get("tool_calls", []), list):
                raise InputError(f"script step {index}: tool_calls must be a list")
            for call in step.get("tool_calls", []):
                _check_call(index, call)
        self.steps = steps
        self.position = 0
        self._name = name

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read the script {path}: {exc}") from exc
        except RecursionError as exc:  # json's parser recurses once per nested list or object
            raise InputError(
                f"cannot read the script {path}: it is nested too deeply to read; a script is a "
                f"flat list of steps"
            ) from exc
        if not isinstance(data, list):
            raise InputError(f"the script {path} must be a JSON list of steps")
        if not data:  # it could answer no request
            raise InputError(
                f'the script {path} has no steps: give at least one, e.g. [{{"reply": "done"}}]'
            )
        return cls(data, name=script_name(path))

    @property
    def name(self) -> str:
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.position >= len(self.steps):
            count = len(self.steps)
            has = f"only {count} step{'s' if count != 1 else ''}" if count else "no steps"
            raise BadResponseError(f"the script has {has}")
        index = self.position
        step = self.steps[index]
        self.position += 1
        calls = tuple(
            _call(index, number, raw, request.encoding)
            for number, raw in enumerate(step.get("tool_calls", []))
        )
        reply = step.get("reply")
        return ModelResponse(_fill(reply, request.encoding) if reply else None, calls)


ModelFn = Callable[[ModelRequest], Awaitable[ModelResponse] | ModelResponse]


class FunctionModel:
    """A model whose answers come from a Python function (sync or async) of the request: it
    returns a :class:`ModelResponse` (``ModelResponse("done")`` for a reply, ``ModelResponse(
    None, (ToolCall(...),))`` for tool calls), or an awaitable of one. Anything else is an
    :class:`InputError` naming what it returned."""

    def __init__(self, fn: ModelFn, name: str = "function") -> None:
        self.fn = fn
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        result: object = self.fn(request)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ModelResponse):
            raise InputError(
                f"the function of FunctionModel {self._name!r} returned "
                f"{type(result).__name__} {_shorten(result)}: it must return a ModelResponse "
                f'(or an awaitable of one), e.g. ModelResponse("done")'
            )
        return result


def _shorten(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
