"""The two tools every agent always has: ``context_tx`` (change its own context) and ``recall``
(find what is no longer in view). Neither is withdrawn during maintenance."""

from __future__ import annotations

from typing import Any

from morphz.errors import MorphzError
from morphz.recall.read import MAX_READ_CHARS
from morphz.recall.search import MAX_LIMIT
from morphz.runtime.models.base import ToolSchema
from morphz.runtime.tools.base import Tool, ToolContext, ToolError, ToolOutcome, result_json
from morphz.runtime.tools.workspace import parse_args

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
    "inclusive, until exclusive, ISO 8601 with offset), limit 1-100, cursor to continue, "
    "kinds (observations, frames, replies, transactions, or an event kind such as "
    "tool_result) and lifecycle (active, retiring, retired) to narrow it; "
    "op=read: one event by ref (@e42) in pages (offset, limit characters); op=frame: traverse "
    "from frame_id (or from an event ref: what cites it) through sources and relations "
    "(direction ancestors|descendants|both, depth "
    "1-4). The result arrives as a recall_result observation; a page is cut to show whole in "
    "your inbox (next_cursor or next_offset says where to go on).",
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["search", "read", "frame"]},
            "query": {"type": "string"},
            "since": {"type": "string"},
            "until": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_READ_CHARS},
            "cursor": {"type": "string"},
            "kinds": {"type": "array", "items": {"type": "string"}},
            "lifecycle": {
                "type": "array",
                "items": {"type": "string", "enum": ["active", "retiring", "retired"]},
            },
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
    "search": ("query", "since", "until", "limit", "cursor", "kinds", "lifecycle"),
    "read": ("ref", "offset", "limit"),
    "frame": ("frame_id", "direction", "depth", "include_events", "include_bodies", "cursor"),
}


async def _context_tx(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    text = args.get("tx")
    if not isinstance(text, str):
        raise ToolError('context_tx needs {"tx": "(context-tx ...)"}')
    unknown = sorted(k for k, v in args.items() if k != "tx" and v is not None)  # null: not given
    if unknown:
        raise ToolError(
            f"context_tx takes only tx, not {unknown}: write everything inside the (context-tx "
            '...) form, the reason as (reason "...") after (base-version N); nothing was committed'
        )
    try:
        receipt = await tc.in_thread(
            tc.ctx.commit,
            text,
            session=tc.session,
            budget=tc.budget,
            budget_keys=tc.budget_keys,
            calibration=tc.calibration,
            request_floor=tc.floor(),
            profile_tokens=tc.profile(),
            activation=tc.activation,
            call=tc.call,
        )
    except MorphzError as exc:
        return ToolOutcome(result_json({"ok": False, "error": exc.to_dict()}), error=True)
    return ToolOutcome(result_json(receipt.to_dict(), compact=True), data=receipt.to_dict())


async def _recall(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    op: Any = args.get("op")  # any JSON value until checked
    if not isinstance(op, str) or op not in _RECALL_PARAMS:
        raise ToolError("recall needs op: search, read or frame")
    given = {k for k, v in args.items() if v is not None}  # null: not given (strict calling)
    unknown = given - {"op", *_RECALL_PARAMS[op]}
    if unknown:
        raise ToolError(f"recall op={op} does not take {sorted(unknown)}")
    params = _recall_params(op, {k: v for k, v in args.items() if k != "op" and v is not None})
    deliver: Any = tc.ctx.recall.deliver  # op is one of its three, checked above
    _result, event = await tc.in_thread(
        deliver, op, session=tc.session, activation=tc.activation, **params
    )
    return ToolOutcome(f"delivered as {event.ref} (recall_result)", delivered=event.ref)


_RECALL_REQUIRED = {"search": [], "read": ["ref"], "frame": ["frame_id"]}
# what ``limit`` counts for each op, and its largest value there (the schema shows the largest)
_RECALL_LIMITS = {"search": MAX_LIMIT, "read": MAX_READ_CHARS}


def _recall_params(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against the recall schema's properties for ``op`` (as every tool's
    arguments are: a missing required one, a wrong JSON type, a value outside its range or enum
    is a ToolError the agent reads); those not given are left to the recall API's defaults."""
    props: dict[str, dict[str, Any]] = RECALL.parameters["properties"]
    own = {name: props[name] for name in _RECALL_PARAMS[op]}
    if op in _RECALL_LIMITS:  # search counts hits (1-100), read characters
        own["limit"] = own["limit"] | {"maximum": _RECALL_LIMITS[op]}
    schema = {"properties": own, "required": _RECALL_REQUIRED[op]}
    checked = parse_args(f"recall op={op}", params, schema)
    return {name: value for name, value in checked.items() if value is not None}


def agent_tools() -> list[Tool]:
    return [
        Tool(CONTEXT_TX, _context_tx, "allow", external=False),
        Tool(RECALL, _recall, "allow", external=False),
    ]
