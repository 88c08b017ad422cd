"""The bounds of the file tools that the eleventh review's fixes set: globs matched without
backtracking (same matches as the glob's definition), regex searches in a child process under
time limits, lines searched in their first characters, creations that are whole or absent."""

from __future__ import annotations

import errno
import os
import random
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from morphz.runtime.tools import linesearch
from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.linesearch import SEARCH_LINE_CHARS
from morphz.runtime.tools.paths import create_atomic, glob_regex
from morphz.runtime.tools.workspace import search_files_tool, write_file_tool
from toolruns import run


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws)  # type: ignore[arg-type]  # the file tools need no store


# --- globs -----------------------------------------------------------------------------------


def _segment_matches(glob: str, name: str) -> bool:
    """The definition, by recursion: '*' any run, '?' one character, '[...]' ('[!...]') one
    character in (not in) the set."""

    @cache
    def at(i: int, j: int) -> bool:
        if i == len(glob):
            return j == len(name)
        c = glob[i]
        if c == "*":
            return at(i + 1, j) or (j < len(name) and at(i, j + 1))
        if j == len(name):
            return False
        end = glob.find("]", i + 2)
        if c == "[" and end != -1:
            body = glob[i + 1 : end]
            negated = body[0] in "!^"
            members = body[1:] if negated else body
            inside = any(m == name[j] for m in members)
            return inside != negated and at(end + 1, j + 1)
        return (c == "?" or c == name[j]) and at(i + 1, j + 1)

    return at(0, 0)


def _path_matches(glob: str, path: str) -> bool:
    """A '**' segment spans any number of segments (a trailing one at least one)."""
    globs, names = glob.split("/"), path.split("/")

    @cache
    def at(i: int, j: int) -> bool:
        if i == len(globs):
            return j == len(names)
        if globs[i] == "**":
            if i == len(globs) - 1:
                return j < len(names)
            return at(i + 1, j) or (j < len(names) and at(i, j + 1))
        return j < len(names) and _segment_matches(globs[i], names[j]) and at(i + 1, j + 1)

    return at(0, 0)


def test_glob_matches_what_its_definition_matches() -> None:
    """The translation (atomic groups, no unbounded backtracking) matches exactly the paths the
    glob's definition does, on random globs and paths over a small alphabet."""
    rng = random.Random(11)
    atoms = ["a", "b", "*", "?", "/", "**", "[!a]", "[ab]"]
    checked = 0
    for _ in range(20_000):
        glob = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 7)))
        path = "".join(rng.choice("ab/") for _ in range(rng.randint(1, 8)))
        if path.startswith("/") or path.endswith("/") or "//" in path:
            continue
        try:
            rx = glob_regex(glob)
        except ToolError:  # '[!]': a set of no characters
            continue
        assert (rx.fullmatch(path) is not None) == _path_matches(glob, path), (glob, path)
        checked += 1
    assert checked > 5_000


def test_globs_that_backtracked_are_translated_atomic() -> None:
    """Each star but a segment's last, with what follows it, is one atomic group, and so is
    each '**' segment but the last with the segments after it: the regex has no nested
    unbounded repeats to backtrack through."""
    assert glob_regex("*?" * 16 + "x").pattern.count("(?>[^/]*?[^/])") == 15
    assert glob_regex("**/a/" * 8 + "x").pattern.count("(?>(?:[^/]*/)*?a/)") == 7  # the 8th: last
    assert glob_regex("src/**.py").fullmatch("src/a.py")  # '**' within a segment is '*'
    assert not glob_regex("src/**.py").fullmatch("src/a/b.py")


# --- search_files: regexes and long lines ------------------------------------------------------


def test_a_regex_too_costly_on_one_line_is_refused_naming_the_line(
    tc: ToolContext, ws: Path
) -> None:
    """The search's child process stops a line's match at LINE_TIMEOUT_S (in the agent's
    process re could not be stopped): the refusal names the file and line and says what to
    do."""
    (ws / "data.txt").write_text("ok\n" + "a" * 60 + "b\n", encoding="utf-8")
    with pytest.raises(ToolError) as caught:
        run(search_files_tool(), tc, query="(a|aa)+$", regex=True)
    assert "data.txt:2" in caught.value.message
    assert "simplify it" in caught.value.message


def test_a_regex_search_out_of_time_returns_the_matches_so_far(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.txt").write_text("x\n", encoding="utf-8")
    monkeypatch.setattr(linesearch, "REGEX_SEARCH_S", 0.0)  # out of time at the first line
    out = run(search_files_tool(), tc, query="x", regex=True)
    assert out.data["matches"] == [] and out.data["truncated"] is True
    assert "[the regex search stopped after 0 s" in out.text
    literal = run(search_files_tool(), tc, query="x")  # a literal has no time limit
    assert len(literal.data["matches"]) == 1


def test_a_long_line_is_searched_by_a_regex_in_its_first_characters(
    tc: ToolContext, ws: Path
) -> None:
    """(A literal searches a line whole: tests/test_fix15_files.py.)"""
    (ws / "min.js").write_text("a" * SEARCH_LINE_CHARS + "NEEDLE\nNEEDLE\n", encoding="utf-8")
    out = run(search_files_tool(), tc, query="NEEDLE", regex=True)
    assert [m["line"] for m in out.data["matches"]] == [2]
    assert out.data["lines_cut"] == 1
    assert f"longer than {SEARCH_LINE_CHARS} characters were searched by the regex" in out.text


@pytest.mark.parametrize("query", ["(", "a{4294967296}", "(" * 2000 + ")" * 2000])
def test_a_regex_that_does_not_compile_names_the_way_out(
    tc: ToolContext, ws: Path, query: str
) -> None:
    (ws / "a.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(ToolError, match=re.escape("pass regex=false")):
        run(search_files_tool(), tc, query=query, regex=True)


# --- creations -------------------------------------------------------------------------------


def test_a_creation_without_hard_links_is_made_in_place(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system without hard links (FAT, some network shares) the file is still
    created, and no temporary file is left beside it."""

    def no_links(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    out = run(write_file_tool(), tc, path="new.txt", content="hello\n")
    assert out.data["action"] == "created"
    assert sorted(p.name for p in ws.iterdir()) == ["new.txt"]
    assert (ws / "new.txt").read_text(encoding="utf-8") == "hello\n"


def test_a_creation_never_clobbers_a_file_made_meanwhile(ws: Path) -> None:
    (ws / "x.txt").write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        create_atomic(ws / "x.txt", b"ours")
    assert (ws / "x.txt").read_bytes() == b"theirs"
    assert sorted(p.name for p in ws.iterdir()) == ["x.txt"]


def test_a_created_file_has_the_mode_of_a_new_file(ws: Path) -> None:
    mask = os.umask(0o022)
    try:
        create_atomic(ws / "m.txt", b"x")
    finally:
        os.umask(mask)
    assert (ws / "m.txt").stat().st_mode & 0o777 == 0o644


def test_a_literal_search_ignoring_case_folds_case(tc: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text("STRASSE\nstraße\nother\n", encoding="utf-8")
    out = run(search_files_tool(), tc, query="Straße", ignore_case=True)
    assert [m["line"] for m in out.data["matches"]] == [1, 2]


def test_a_regex_search_reaches_a_file_whose_name_is_not_utf8(tc: ToolContext, ws: Path) -> None:
    """The file list goes to the search's child process as JSON: a Latin-1 name (kept by
    Python as surrogate escapes) reaches it and comes back as it was."""
    name = os.fsdecode(b"caf\xe9.txt")
    (ws / name).write_text("needle\n", encoding="utf-8")
    out = run(search_files_tool(), tc, query="ne+dle", regex=True)
    assert [(m["path"], m["line"]) for m in out.data["matches"]] == [(name, 1)]


def test_a_regex_search_with_a_bad_glob_is_refused(tc: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text("x\n", encoding="utf-8")
    with pytest.raises(ToolError, match="is not a valid pattern"):
        run(search_files_tool(), tc, query="x", regex=True, glob="[z-a]")
