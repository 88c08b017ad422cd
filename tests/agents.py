"""Helpers the runtime and CLI tests share: an engine with the CLI's default tools, a history of
log lines, a scripted model spec, one CLI invocation."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

import morphz
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig


def make_engine(ctx: morphz.Context, model: Any, workspace: Path, **config: Any) -> Engine:
    """An engine on ``ctx`` with the tools ``morphz exec`` offers by default."""
    return Engine(ctx, model, build_tools(Settings()), RuntimeConfig(workspace=workspace, **config))


def import_log_lines(ctx: morphz.Context, count: int, words: int = 60) -> None:
    """``count`` external events of ``words`` words each, imported in session ``feed``."""
    lines = [
        json.dumps({"kind": "external_event", "text": f"log line {i}: " + "status ok " * words})
        for i in range(count)
    ]
    ctx.import_history(io.StringIO("\n".join(lines)), session="feed")


def script_spec(tmp: Path, steps: list[dict[str, Any]]) -> str:
    """A ``scripted:PATH`` model spec replaying ``steps`` (written to ``tmp``/script.json)."""
    script = tmp / "script.json"
    script.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{script}"


def invoke(args: list[str], stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, args, input=stdin)
