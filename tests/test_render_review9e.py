"""Review 9e (render): what people read — text tables and previews, the terminal they reach,
and docs/cli.md against the commands. Each test failed against the code as it was reviewed."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces import render
from morphz.interfaces.cli import main
from test_cli import Cli

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

# A coloured tool output, as `pytest`, `ls --color` or a compiler prints it: the colour is set at
# the start and reset only at the end, far past any preview's cut; then a bell.
COLOURED = "\x1b[31m" + "build failed on step " * 8 + "\x1b[0m\x07"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "store" / "morphz.db")


def _controls(text: str) -> list[str]:
    """The control characters (C0, DEL, C1) in ``text`` other than the line breaks of the output
    itself: what would drive the terminal instead of being read."""
    return sorted({c for c in text if unicodedata.category(c) == "Cc" and c != "\n"})


def _section(title: str) -> str:
    doc = DOCS.read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", doc, re.M | re.S)
    assert found, title
    return found.group(1)


# ------------------------------------------------------------------ control characters


@pytest.mark.parametrize(
    "command",
    [
        ("context", "events"),
        ("context", "show"),
        ("context", "recall", "search", "build failed"),
    ],
    ids=["events", "show", "recall-search"],
)
def test_lossy_text_views_do_not_send_stored_control_characters_to_the_terminal(
    cli: Cli, command: tuple[str, ...]
) -> None:
    """A preview or a table cell is already not the stored text (squeezed to one line, cut at
    50-70 characters, wrapped at 60), so the decision "text output is printed as stored" (kept
    for `context encoding` and `recall read`, which give the exact content) is no reason to pass
    escape sequences through there. Today `context events` cuts the coloured text after its
    colour-setting sequence and before its reset, leaving the user's terminal red after the
    command ends; a stored `ESC[2J` clears their screen; a BEL rings. Expected: the previews and
    table cells of `context events`, `context show` (a frame body written by the model) and
    `context recall search` show control characters visibly (e.g. ``\\x1b`` or U+241B), so no
    raw C0/C1 control character other than the output's own line breaks reaches stdout."""
    cli("context", "create")
    cli("context", "observe", "--kind", "tool_result", "--text", COLOURED)
    body = (
        '(context-tx (base-version 0) (reason "r") (create notes/log (out "\x1b[2J\x1b[31mred")))'
    )
    cli("context", "tx", "--file", "-", stdin=body)
    printed = cli(*command).stdout_bytes.decode("utf-8")
    assert _controls(printed) == [], repr(printed)


def test_observe_text_line_does_not_send_stored_control_characters_to_the_terminal(
    cli: Cli,
) -> None:
    """`context observe` prints a one-line preview of the event (render.event_line), cut at 60
    characters: the coloured text's reset is cut off, so the terminal stays red. Expected: no
    raw control character in the line (shown visibly instead)."""
    cli("context", "create")
    printed = cli("context", "observe", "--kind", "tool_result", "--text", COLOURED).stdout
    assert _controls(printed) == [], repr(printed)


def test_chat_activity_line_does_not_send_tool_output_control_characters(
    ctx: morphz.Context,
) -> None:
    """`morphz chat` shows each tool result on stderr as render.activity_line (a preview cut at
    70 characters); on a terminal click keeps escape sequences, so a command run by the exec
    tool with coloured output (cut before its reset) leaves the chat's terminal coloured, and a
    tool output can move the cursor or clear the screen under the person approving the next
    call. Expected: the activity line shows control characters visibly."""
    event = ctx.observe("tool_result", COLOURED)
    line = render.activity_line(event)
    assert _controls(line) == [], repr(line)


# ------------------------------------------------------------------ recall of coloured output


def test_recall_finds_a_word_wrapped_in_colour_codes(ctx: morphz.Context) -> None:
    """Tool output is the most common coloured text an agent stores (test runners, compilers,
    `ls --color`). The tokenizer keeps the escape sequence's tail glued to the word:
    "\\x1b[31mERROR\\x1b[0m build failed" is indexed as `31merror 0m build fail`, so searching
    for "error" (by the operator's `recall search` or the agent's recall tool) misses it while it
    finds the same word uncoloured. Expected: ANSI escape sequences are not part of words (strip
    CSI sequences before tokenizing, index and query alike)."""
    coloured = ctx.observe("tool_result", "\x1b[31mERROR\x1b[0m build failed")
    plain = ctx.observe("tool_result", "ERROR in the plain log")
    refs = {h.ref for h in ctx.recall.search("error").hits}
    assert plain.ref in refs
    assert coloured.ref in refs, refs


# ------------------------------------------------------------------ output encoding


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_output_on_a_latin1_terminal_is_not_a_traceback(cli: Cli, fmt: str) -> None:
    """A terminal in a Latin-1 locale (LANG=de_DE.ISO-8859-1; PYTHONIOENCODING=latin-1) cannot
    encode CJK text. Today every command that prints stored CJK text dies with an uncaught
    UnicodeEncodeError traceback and prints nothing (JSON too, since it is written with
    ensure_ascii=False). Expected: exit 0 with the output written, characters the stream cannot
    encode escaped or replaced (JSON can always fall back to \\u escapes, which stay valid
    JSON)."""
    cli("context", "create")
    cli("context", "observe", "--kind", "user_message", "--text", "部署计划 ready")
    result = CliRunner(charset="latin-1").invoke(
        main, ["context", "events", "--db", str(cli.db), "--format", fmt]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0
    assert "@e1" in result.stdout_bytes.decode("latin-1")
    if fmt == "json":
        data = json.loads(result.stdout_bytes.decode("latin-1"))
        assert data[0]["text"] == "部署计划 ready"


# ------------------------------------------------------------------ docs/cli.md parity


def _key_paths(data: object, prefix: str = "") -> set[str]:
    """Every key of ``data`` (nested objects, the first element of lists), as names."""
    names: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            names.add(key)
            if key != "text":
                names |= _key_paths(value, prefix)
    elif isinstance(data, list) and data:
        names |= _key_paths(data[0], prefix)
    return names


def test_context_budget_json_keys_are_documented(cli: Cli) -> None:
    """docs/cli.md says `context status`'s `pressure` is "as in `context budget`", and `context
    encoding`'s is `"pressure": {...}`; but the `context budget` section never says what its
    JSON is. A script reading `.budget.configured` (the `--limit`, named otherwise), the
    ratios or `.pressure.level` has only the code to go by. Expected: the section lists the
    JSON keys: `budget` (`window`, `output_reserve`, `configured`, `reserve`, `notice_ratio`,
    `warning_ratio`) and `pressure` (`level`, `tokens`, `kind`, `hard`, `notice`, `warning`,
    `critical`, `window`)."""
    cli("context", "create")
    keys = _key_paths(cli.json("context", "budget"))
    section = _section("morphz context budget")
    missing = sorted(k for k in keys if f"`{k}`" not in section and f'"{k}"' not in section)
    assert not missing, f"docs/cli.md, morphz context budget, does not name {missing}"


def test_context_budget_defaults_are_documented() -> None:
    """Every other settings command documents its defaults (`context view` has a table of them;
    `context create --window`: default 8), but `context budget` does not say what a context
    starts with: window 128,000, output reserve 8,000, maintenance reserve 4,000, no limit
    (only docs/decisions.md does). Expected: the section states them (e.g. an options table
    with a default column, as `context view` has)."""
    section = _section("morphz context budget")
    for default in ("128,000", "8,000", "4,000"):
        assert default in section or default.replace(",", "") in section, default


@pytest.mark.parametrize(
    ("title", "option", "default"),
    [
        ("morphz exec", "--workspace", "current"),
        ("morphz exec", "--session", "default"),
        ("morphz chat", "--workspace", "current"),
        ("morphz chat", "--session", "default"),
        ("morphz context encoding", "--session", "default"),
    ],
)
def test_defaults_shown_by_help_are_in_the_docs(title: str, option: str, default: str) -> None:
    """`--help` shows `--workspace DIRECTORY [default: .]` and `--session ID [default: default]`
    for exec and chat, and `--session [default: default]` for context encoding, but their
    docs/cli.md sections have only the synopsis: the reader cannot tell that the tools work in
    the current folder, or which session a run or an encoding is for. Expected: each section
    states the option's default (a line naming the option and its default, as the other
    commands' option tables do)."""
    section = _section(title)
    lines = [line for line in section.splitlines() if option in line and "default" in line]
    assert any(default in line for line in lines), (
        f"{title}: no line states the default of {option}"
    )
