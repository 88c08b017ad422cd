"""Review 14 (last): the source changes after the session's earlier reviews (git diff 18cc693
HEAD -- src): the file tools' fence and approval text, previews, read_file's paging.

Each test fails on the code it was written against; its docstring says what should happen.
Real files in temporary folders; no timed assertions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from morphz.interfaces import render
from morphz.interfaces.approval_text import shown_call
from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.workspace import write_file_tool
from toolruns import run


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, (Path("morphz.toml"),))  # type: ignore[arg-type]


# --- approval: what the person sees -------------------------------------------------------


@pytest.mark.parametrize("blank", ["\u2800", "\u3164", "\uffa0"])
def test_approval_prompt_counts_runs_of_blank_looking_characters(blank: str) -> None:
    """approval_text.shown_value counts only runs of white space (``(\\s)\\1{40,}``), and
    repr escapes every white space character but the space. Characters that are printable,
    not white space, and drawn as nothing remain: U+2800 BRAILLE PATTERN BLANK, U+3164 HANGUL
    FILLER, U+FFA0 HALFWIDTH HANGUL FILLER (the usual "invisible" characters). repr prints them
    as they are, so `'rm -rf ~; ' + 10,000 of them + 'ls'` fills 125 blank lines of an
    80-column terminal and scrolls the head off, which is what the counting is for
    (decisions.md "What the approval prompt shows"). A long run of any one character that is
    drawn blank should be counted as the spaces are (or escaped, as repr escapes U+00A0)."""
    command = "rm -rf ~; " + blank * 10_000 + "ls"
    shown = shown_call({"command": command})
    assert "rm -rf ~;" in shown and "ls" in shown
    assert blank * 200 not in shown, f"{len(shown)} characters shown"


# --- the permission fence -----------------------------------------------------------------


def test_write_file_does_not_create_in_a_read_only_folder(tc: ToolContext, ws: Path) -> None:
    """The fence of the fourteenth session checks the file's mode bits rather than os.access
    so that `chmod a-w` keeps the agent off a file even when it runs as root
    (workspace._target). A folder made read-only (`chmod a-w docs`) is the same fence for any
    other user (creating a file in it, or replacing one by rename, is refused by the system),
    but to root it is no fence: write_file creates docs/new.md (and overwrites docs' files by
    rename). The mode of the folder a file is created or replaced in should be checked as the
    file's is."""
    docs = ws / "docs"
    docs.mkdir()
    docs.chmod(0o555)
    try:
        with pytest.raises(ToolError):
            run(write_file_tool(), tc, path="docs/new.md", content="x\n")
        assert not (docs / "new.md").exists()
    finally:
        docs.chmod(0o755)


# --- previews -----------------------------------------------------------------------------


def test_preview_keeps_persian_zero_width_non_joiner() -> None:
    """render.visible now escapes every format character (category Cf), to keep a bidi
    override from showing a command reordered. That set also holds U+200C ZERO WIDTH
    NON-JOINER, which Persian (and Kurdish, Urdu, Hindi conjuncts) writes inside ordinary
    words: every preview of Persian text (activity lines, tables, tool results) now reads
    `می\\u200cخواهم` word after word. ZWNJ and ZWJ reorder nothing and cannot drive the
    terminal; only the bidi controls (U+200E/F, U+202A-202E, U+2066-2069, U+061C) need
    escaping for the stated purpose."""
    persian = "من می\u200cخواهم این فایل\u200cها را ببینم"
    assert render.visible(persian) == persian
    assert "\u202e" not in render.visible("echo \u202e~ fr- mr\u202c ok")  # still escaped
