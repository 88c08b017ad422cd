"""Running one agent tool to its outcome, outside any engine, for tests of the tools."""

from __future__ import annotations

import asyncio
from typing import Any

from morphz.runtime.tools.base import Tool, ToolContext, ToolOutcome


def run(tool: Tool, tc: ToolContext, **args: Any) -> ToolOutcome:
    """``tool`` called with ``args`` in ``tc``, to its outcome (a ToolError raises)."""
    return asyncio.run(tool.run(args, tc))
