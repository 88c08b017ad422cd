"""Review 11, docs truth: README.md, docs/cli.md, docs/ARCHITECTURE.md and the module docstrings
against the code. Each test failed against the code as it was reviewed. No network, no store
needed (these are claims about the source tree)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "morphz"


def _morphz_imports(path: Path) -> set[str]:
    """The morphz modules ``path`` imports (dotted, without the ``morphz.`` prefix)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("morphz."):
            names.add(node.module.removeprefix("morphz."))
        elif isinstance(node, ast.Import):
            names.update(
                a.name.removeprefix("morphz.") for a in node.names if a.name.startswith("morphz.")
            )
    return names


def test_the_bottom_layer_of_architecture_md_imports_nothing_above_it() -> None:
    """docs/ARCHITECTURE.md draws errors.py, events.py, graphemes.py, ids.py and results.py in
    the bottom layer, below `mind/` and `txlang/`, and says "each layer uses only the ones below
    it", with store/ as the one exception. Expected: these modules import only each other
    (mind and txlang themselves import errors, ids and graphemes as the lowest layer). Actual:
    events.py imports morphz.mind.lifecycle (OBSERVATION_KINDS) and results.py imports
    morphz.mind.state (Edge, OpEffect), an upward use the document does not show."""
    bottom = {"errors", "events", "graphemes", "ids", "results", "token_estimate"}
    # the one use the document names: the pure mind's value types (and the mind imports neither)
    named = {"events.py imports morphz.mind.lifecycle", "results.py imports morphz.mind.state"}
    upward = {
        f"{name}.py imports morphz.{imported}"
        for name in sorted(bottom)
        for imported in _morphz_imports(SRC / f"{name}.py")
        if imported.split(".")[0] not in bottom
    }
    assert upward <= named, upward - named
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "`events.py` (`OBSERVATION_KINDS`" in doc and "`results.py` (`Edge`" in doc
    mind = [m for p in (SRC / "mind").glob("*.py") for m in _morphz_imports(p)]
    assert not {"events", "results"} & {m.split(".")[0] for m in mind}


def test_cli_md_names_every_module_that_defines_commands() -> None:
    """docs/cli.md's first paragraph says where the command line's code is: "cli.py (commands),
    cli_recall.py (the recall and import commands) and render.py". Expected: every
    interfaces/cli_*.py module that defines commands is named there, so a reader looking for
    `exec`, `chat`, `context encoding/budget/view/requests` finds their code. Actual:
    cli_encoding.py and cli_agent.py are not named (and `cli.py (commands)` claims them)."""
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    intro = doc[: doc.index("## ")]
    defining = sorted(
        p.name
        for p in (SRC / "interfaces").glob("cli*.py")
        if re.search(r"^@\w+\.command\(", p.read_text(encoding="utf-8"), re.MULTILINE)
    )
    assert {"cli.py", "cli_recall.py"} <= set(defining)  # the check finds the known ones
    assert [name for name in defining if name not in intro] == []
