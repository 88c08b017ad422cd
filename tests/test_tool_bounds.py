"""The file tools' bounds on large files and cancelled work, and what the approval prompt and
the previews show (review 14's fixes, beyond the reviewer's own tests): a file over the hash
cap is read page by page without its sha256 and line count, a page's start is found across
chunks as a line-by-line read finds it, a cancelled write stops before it changes anything,
and the prompt's counted blanks equal the text they stand for."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from morphz.interfaces import render
from morphz.interfaces.approval_text import shown_call, shown_value
from morphz.runtime.tools import paths, workspace
from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.workspace import (
    edit_file_tool,
    read_file_tool,
    search_files_tool,
    write_file_tool,
)
from toolruns import run

READ, WRITE, EDIT = read_file_tool(), write_file_tool(), edit_file_tool()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """A hash cap of 1,000 bytes and chunks of 7, so that small files are "large"."""
    for module in (paths, workspace):
        monkeypatch.setattr(module, "HASH_MAX_BYTES", 1000)
    monkeypatch.setattr(paths, "HASH_CHUNK", 7)
    return 1000


def test_a_file_over_the_cap_is_read_by_pages_without_a_hash(
    tc: ToolContext, ws: Path, small_cap: int
) -> None:
    (ws / "big.log").write_bytes(b"".join(b"line %d\n" % i for i in range(1, 1001)))
    first = run(READ, tc, path="big.log", limit=3)
    assert first.text.splitlines()[1:4] == ["line 1", "line 2", "line 3"]
    assert first.data["sha256"] is None and first.data["total_lines"] is None
    assert first.data["next_offset"] == 3 and "more lines follow: read_file offset=3" in first.text
    assert "no sha256" in first.text and "tail -n 100 big.log" in first.text
    last = run(READ, tc, path="big.log", offset=998, limit=5)
    assert last.text.splitlines()[1:] == ["line 999", "line 1000"]
    assert last.data["next_offset"] is None
    past = run(READ, tc, path="big.log", offset=5000)
    assert "past the end: the file has 1000 lines" in past.text
    assert "no line count" not in past.text  # the page read to the end: it counted them
    at_end = run(READ, tc, path="big.log", offset=1000)  # the file ends with a line break
    assert "past the end: the file has 1000 lines" in at_end.text
    assert at_end.data["total_lines"] == 1000
    (ws / "big.bin").write_bytes(b"\0" * 2000)
    blob = run(READ, tc, path="big.bin")
    assert blob.data["binary"] is True and blob.data["sha256"] is None
    assert blob.text.startswith("big.bin · binary file, not shown · 2000 bytes, over ")


def test_edit_file_refuses_a_file_over_the_cap(tc: ToolContext, ws: Path, small_cap: int) -> None:
    data = b"alpha\n" + b"x" * 2000
    (ws / "big.txt").write_bytes(data)
    with pytest.raises(ToolError, match="too large for edit_file"):
        run(EDIT, tc, path="big.txt", old="alpha", new="beta", expected_sha256=sha(data))
    assert (ws / "big.txt").read_bytes() == data


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"a", b"a\nbb\n\nccc", b"\n\n\nx\n", b"one line of some length\n" * 5],
)
def test_pages_are_found_across_chunks(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    monkeypatch.setattr(paths, "HASH_CHUNK", 3)
    (ws / "f.txt").write_bytes(content)
    lines = content.decode().split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    for offset in range(len(lines) + 2):
        for limit in (1, 2, 3):
            page = paths.read_page(ws / "f.txt", offset, limit, 1000)
            assert page.lines == lines[offset : offset + limit], (offset, limit)
            going_on = offset + limit if offset + limit < len(lines) else None
            assert page.next_offset == going_on and page.total == len(lines)
            assert page.sha256 == sha(content)


def test_a_cancelled_write_changes_nothing(tc: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_bytes(b"old\n")
    tc.cancelled.set()
    with pytest.raises(ToolError, match="cancelled"):
        run(WRITE, tc, path="a.txt", content="new\n", expected_sha256=sha(b"old\n"))
    with pytest.raises(ToolError, match="cancelled"):
        run(EDIT, tc, path="a.txt", old="old", new="new", expected_sha256=sha(b"old\n"))
    assert (ws / "a.txt").read_bytes() == b"old\n"


def test_edit_file_refuses_a_read_only_file(tc: ToolContext, ws: Path) -> None:
    (ws / "ro.txt").write_bytes(b"old\n")
    (ws / "ro.txt").chmod(0o444)
    with pytest.raises(ToolError, match="read-only"):
        run(EDIT, tc, path="ro.txt", old="old", new="new", expected_sha256=sha(b"old\n"))


def test_write_file_below_a_file_in_a_folder_names_that_file(tc: ToolContext, ws: Path) -> None:
    (ws / "a").mkdir()
    (ws / "a" / "b").write_text("x")
    with pytest.raises(ToolError, match="'a/b' is a file, not a folder"):
        run(WRITE, tc, path="a/b/c/d.txt", content="y")


@pytest.mark.parametrize(
    "text", ["x" + " " * 45 + "y", " " * 100, "a\n" + "\t" * 50 + "b" + " " * 40, "  ok  "]
)
def test_counted_blanks_equal_the_text(text: str) -> None:
    shown = shown_value(text)
    assert eval(shown) == text  # the prompt's expression is the value exactly
    assert " " * 41 not in shown  # a run of more than 40 is counted


def test_the_prompt_names_where_a_path_resolves(ws: Path) -> None:
    (ws / "real.txt").write_text("x")
    (ws / "link.txt").symlink_to("real.txt")
    root = ws.resolve()
    assert shown_call({"path": "link.txt"}, root) == "path='link.txt' (resolves to 'real.txt')"
    assert shown_call({"path": "real.txt"}, root) == "path='real.txt'"
    assert shown_call({"path": "./real.txt"}, root) == "path='./real.txt'"
    assert shown_call({"cwd": "link.txt", "content": "link.txt"}, root).count("resolves") == 1


def test_previews_escape_format_characters() -> None:
    shown = render.visible("a\u200bb\U000e0041c\u202ed\nz")
    assert shown == "a\\u200bb\\U000e0041c\\u202ed\nz"


def test_a_cancelled_walk_with_no_match_is_marked_cut_short(tc: ToolContext, ws: Path) -> None:
    for i in range(50):
        (ws / f"d{i}").mkdir()
        (ws / f"d{i}" / "x.txt").write_text("needle\n")
    tc.cancelled.set()
    out = run(search_files_tool(), tc, query="needle", glob="*.none")
    assert out.data["truncated"] is True and "cancelled" in out.text


@pytest.mark.parametrize("errno_name", ["EINVAL", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"])
def test_a_file_system_that_cannot_sync_still_takes_the_write(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch, errno_name: str
) -> None:
    import errno
    import os

    def no_sync(fd: int) -> None:
        raise OSError(getattr(errno, errno_name), "fsync not supported")

    monkeypatch.setattr(os, "fsync", no_sync)
    run(WRITE, tc, path="new.txt", content="made")
    assert (ws / "new.txt").read_text() == "made"


def test_a_failing_sync_fails_the_write_and_leaves_the_file(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    (ws / "kept.txt").write_text("old")

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises((OSError, ToolError), match="I/O error"):
        digest = hashlib.sha256(b"old").hexdigest()
        run(WRITE, tc, path="kept.txt", content="new", expected_sha256=digest)
    assert (ws / "kept.txt").read_text() == "old"
    assert not list(ws.glob(".morphz-*.tmp"))
