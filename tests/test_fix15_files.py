"""The file tools' fifteenth-session fixes: a write flushes its folder to the disk after the
rename or link (else a power loss can undo it), a literal search finds a match anywhere in a
line however long and shows the match, not the line's head, and a glob's bracket expression
never matches the path separator."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.linesearch import MATCH_SHOWN_CHARS, SEARCH_LINE_CHARS
from morphz.runtime.tools.workspace import list_files_tool, search_files_tool, write_file_tool
from toolruns import run

WRITE, SEARCH, LIST = write_file_tool(), search_files_tool(), list_files_tool()


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed


# --- durable writes: the folder is synced after the rename or link ---------------------------


class Syncs:
    """os.fsync recorded: for each call, the inode of a folder synced (None for a file) and
    what the watched file held at that moment; the real fsync runs unless ``folder_error``
    is set, which a folder's sync raises instead."""

    def __init__(self, watched: Path, folder_error: int | None = None) -> None:
        self.watched, self.folder_error = watched, folder_error
        self.calls: list[tuple[int | None, bytes | None]] = []
        self.real: Callable[[int], None] = os.fsync

    def __call__(self, fd: int) -> None:
        info = os.fstat(fd)
        folder = info.st_ino if stat.S_ISDIR(info.st_mode) else None
        held = self.watched.read_bytes() if self.watched.exists() else None
        self.calls.append((folder, held))
        if folder is not None and self.folder_error is not None:
            raise OSError(self.folder_error, os.strerror(self.folder_error))
        self.real(fd)

    def folders(self) -> dict[int, bytes | None]:
        return {ino: held for ino, held in self.calls if ino is not None}


def test_an_overwrite_syncs_its_folder_after_the_rename(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "kept.txt"
    target.write_bytes(b"old")
    syncs = Syncs(target)
    monkeypatch.setattr(os, "fsync", syncs)
    old = hashlib.sha256(b"old").hexdigest()
    run(WRITE, tc, path="kept.txt", content="new", expected_sha256=old)
    assert syncs.calls[0] == (None, b"old")  # the temporary file, before the rename
    assert syncs.folders() == {ws.stat().st_ino: b"new"}  # the folder, after it


def test_a_creation_syncs_its_folder_and_the_folders_it_made(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "a" / "b" / "new.txt"
    syncs = Syncs(target)
    monkeypatch.setattr(os, "fsync", syncs)
    run(WRITE, tc, path="a/b/new.txt", content="made")
    inodes = [p.stat().st_ino for p in (ws, ws / "a", ws / "a" / "b")]
    assert set(syncs.folders()) == set(inodes)  # a in ws, b in a, the file in b
    assert syncs.folders()[(ws / "a" / "b").stat().st_ino] == b"made"  # after the link
    assert not list((ws / "a" / "b").glob(".morphz-*.tmp"))


@pytest.mark.parametrize("errno_name", ["EINVAL", "ENOTSUP", "ENOSYS", "EBADF", "EACCES"])
def test_a_folder_that_cannot_be_synced_still_takes_the_write(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch, errno_name: str
) -> None:
    syncs = Syncs(ws / "new.txt", folder_error=getattr(errno, errno_name))
    monkeypatch.setattr(os, "fsync", syncs)
    run(WRITE, tc, path="new.txt", content="made")
    assert syncs.folders() and (ws / "new.txt").read_text() == "made"


def test_a_folder_that_cannot_be_opened_still_takes_the_write(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows cannot open a folder; elsewhere a folder may be writable but not readable."""
    real_open, refused = os.open, []

    def no_folders(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.isdir(path):
            refused.append(path)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_folders)
    run(WRITE, tc, path="new.txt", content="made")
    assert refused and (ws / "new.txt").read_text() == "made"


def test_a_folder_sync_that_fails_says_the_change_was_made(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", Syncs(ws / "new.txt", folder_error=errno.EIO))
    with pytest.raises(ToolError, match="the change was made, but its folder could not be"):
        run(WRITE, tc, path="new.txt", content="made")
    assert (ws / "new.txt").read_text() == "made"


# --- a literal search reads a line whole and shows the match --------------------------------


def test_a_literal_search_finds_a_match_far_into_a_long_line(tc: ToolContext, ws: Path) -> None:
    far = 50 * SEARCH_LINE_CHARS  # a minified bundle: one line of a million characters
    (ws / "min.js").write_text("a" * far + "NEEDLE" + "b" * 1000 + "\nshort\n", encoding="utf-8")
    out = run(SEARCH, tc, query="NEEDLE")
    [match] = out.data["matches"]
    start = far - MATCH_SHOWN_CHARS // 4
    assert match == {
        "path": "min.js",
        "line": 1,
        "text": ("a" * far + "NEEDLE" + "b" * 1000)[start : start + MATCH_SHOWN_CHARS],
        "column": start + 1,
    }
    assert out.text.splitlines()[1] == f"min.js:1: [from column {start + 1}] …{match['text']}"
    assert out.data["lines_cut"] == 0 and "longer than" not in out.text


def test_a_literal_search_ignoring_case_shows_the_match_past_longer_foldings(
    tc: ToolContext, ws: Path
) -> None:
    """'ß' folds to 'ss': the match's place in the folded line is not its place in the line."""
    line = "ß" * 30_000 + "Needle" + "x" * 10
    (ws / "de.txt").write_text(line + "\n", encoding="utf-8")
    [match] = run(SEARCH, tc, query="NEEDLE", ignore_case=True).data["matches"]
    assert match["column"] == 30_000 - MATCH_SHOWN_CHARS // 4 + 1
    assert match["text"].endswith("Needle" + "x" * 10)


def test_a_match_in_a_long_line_s_head_shows_the_head(tc: ToolContext, ws: Path) -> None:
    (ws / "log.json").write_text("{NEEDLE" + "z" * 100_000 + "}\n", encoding="utf-8")
    out = run(SEARCH, tc, query="NEEDLE")
    assert out.data["matches"][0]["column"] == 1
    assert out.text.splitlines()[1] == "log.json:1: {NEEDLE" + "z" * (MATCH_SHOWN_CHARS - 7)


def test_a_regex_match_past_the_shown_head_is_shown_too(tc: ToolContext, ws: Path) -> None:
    """A regex searches a line's first 20,000 characters; a match there, past what is shown of
    the head, is shown around it."""
    (ws / "a.txt").write_text("a" * 5_000 + "key=42" + "a" * 5_000 + "\n", encoding="utf-8")
    out = run(SEARCH, tc, query=r"key=\d+", regex=True)
    assert "[from column 4926] …" in out.text and "key=42" in out.text


# --- globs: a bracket expression never matches '/' --------------------------------------------


def test_a_bracket_expression_never_matches_the_separator(tc: ToolContext, ws: Path) -> None:
    """'[ -~]' (printable ASCII) and '[.-0]' hold '/' in their range; as in a shell's and git's
    globs they do not match it, so they never cross a folder boundary."""
    for rel in ("a/c/x.txt", "abc/x.txt", "src/x/m.py", "src.x/m.py", "srcx"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("needle\n", encoding="utf-8")

    def listed(pattern: str) -> list[str]:
        return [e["path"] for e in run(LIST, tc, pattern=pattern).data["entries"]]

    def searched(glob: str) -> list[str]:
        return [m["path"] for m in run(SEARCH, tc, query="needle", glob=glob).data["matches"]]

    assert listed("a[ -~]c/x.txt") == ["abc/x.txt"]
    assert listed("a[!b]c/x.txt") == listed("a[^b]c/x.txt") == []
    assert listed("src[/]x") == []  # the '/' splits the glob: 'src[' and ']x', literal
    assert searched("src[.-0]x/*.py") == ["src.x/m.py"]
    assert searched("**/a[ -~]c/*") == ["abc/x.txt"]
