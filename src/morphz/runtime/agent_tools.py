"""The two tools every agent always has: ``context_tx`` (change its own context) and ``recall``
(find what is no longer in view). Neither is withdrawn during maintenance."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from morphz.errors import MorphzError
from morphz.runtime.models.base import ToolSchema
from morphz.runtime.tools.base import Tool, ToolContext, ToolError, ToolOutcome

CONTEXT_TX = ToolSchema(
    "context_tx",
    'Commit a context transaction to your mind: (context-tx (base-version N) (reason "...") '
    "OP...). The protocol region lists the operations and rules. Returns the receipt, or a typed "
    "error naming the operation, line and column (nothing changed then).",
    {
        "type": "object",
        "properties": {"tx": {"type": "string", "description": "the (context-tx ...) text"}},
        "required": ["tx"],
        "additionalProperties": False,
    },
)

RECALL = ToolSchema(
    "recall",
    "Find what is no longer in view. op=search: words (query) and/or a time range (since "
    "inclusive, until exclusive, ISO 8601 with offset), limit 1-100, cursor to continue; "
    "op=read: one event by ref (@e42) in pages (offset, limit characters; a page is cut to "
    "show whole in your inbox, next_offset says where to go on); op=frame: traverse "
    "from frame_id through sources and relations (direction ancestors|descendants|both, depth "
    "1-4). The result arrives as a recall_result observation.",
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["search", "read", "frame"]},
            "query": {"type": "string"},
            "since": {"type": "string"},
            "until": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1},
            "cursor": {"type": "string"},
            "kinds": {"type": "array", "items": {"type": "string"}},
            "ref": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "frame_id": {"type": "string"},
            "direction": {"type": "string", "enum": ["ancestors", "descendants", "both"]},
            "depth": {"type": "integer", "minimum": 1, "maximum": 4},
            "include_events": {"type": "boolean"},
            "include_bodies": {"type": "boolean"},
        },
        "required": ["op"],
        "additionalProperties": False,
    },
)

_RECALL_PARAMS = {
    "search": ("query", "since", "until", "limit", "cursor", "kinds"),
    "read": ("ref", "offset", "limit"),
    "frame": ("frame_id", "direction", "depth", "include_events", "include_bodies", "cursor"),
}


async def _context_tx(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    text = args.get("tx")
    if not isinstance(text, str):
        raise ToolError('context_tx needs {"tx": "(context-tx ...)"}')
    try:
        receipt = await asyncio.to_thread(tc.ctx.commit, text, session=tc.session)
    except MorphzError as exc:
        return ToolOutcome(json.dumps({"ok": False, "error": exc.to_dict()}), error=True)
    return ToolOutcome(json.dumps(receipt.to_dict(), separators=(",", ":")), data=receipt.to_dict())


async def _recall(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    op = args.get("op")
    if op not in _RECALL_PARAMS:
        raise ToolError("recall needs op: search, read or frame")
    unknown = set(args) - {"op", *_RECALL_PARAMS[op]}
    if unknown:
        raise ToolError(f"recall op={op} does not take {sorted(unknown)}")
    params = _recall_params(op, {k: v for k, v in args.items() if k != "op" and v is not None})
    _result, event = await asyncio.to_thread(
        tc.ctx.recall.deliver, op, session=tc.session, **params
    )
    return ToolOutcome(f"delivered as {event.ref} (recall_result)", delivered=event.ref)


_RECALL_REQUIRED = {"search": (), "read": ("ref",), "frame": ("frame_id",)}
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "boolean": (bool,), "array": (list,),
}  # fmt: skip


def _recall_params(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against the recall schema: a missing required argument, or a value of
    the wrong JSON type or outside its enum, is a ToolError the agent reads."""
    missing = [name for name in _RECALL_REQUIRED[op] if name not in params]
    if missing:
        raise ToolError(f"recall op={op} needs {' and '.join(missing)}")
    props: dict[str, dict[str, Any]] = RECALL.parameters["properties"]
    return {name: _recall_arg(name, value, props[name]) for name, value in params.items()}


def _recall_arg(name: str, value: Any, spec: dict[str, Any]) -> Any:
    kind, items = spec["type"], spec.get("items", {}).get("type")
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON's 10.0 is 10
    fits = isinstance(value, _JSON_TYPES[kind]) and isinstance(value, bool) == (kind == "boolean")
    if fits and items is not None:
        fits = all(isinstance(item, _JSON_TYPES[items]) for item in value)
    if not fits:
        what = f"an array of {items}s" if items else f"{'an' if kind == 'integer' else 'a'} {kind}"
        raise ToolError(f"recall: argument {name!r} must be {what}, not {value!r:.60}")
    if "enum" in spec and value not in spec["enum"]:
        raise ToolError(f"recall: argument {name!r} must be one of {spec['enum']}")
    return value


def agent_tools() -> list[Tool]:
    return [
        Tool(CONTEXT_TX, _context_tx, "allow", external=False),
        Tool(RECALL, _recall, "allow", external=False),
    ]
