"""Review 15 of the fifteenth session's changes: the damaged-event reads, the protected-path
check, the folder flush of a new file's folders and the literal search ignoring case. Each test
failed on the code as reviewed because of the defect its docstring names (the exec supervisor's
findings are in tests/test_review15_exec.py)."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import unicodedata
from pathlib import Path

import pytest

import morphz
from morphz.errors import StoreError
from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.workspace import search_files_tool, write_file_tool
from toolruns import run

CONTEXT = "context-default"


@pytest.fixture
def tc(ws: Path) -> ToolContext:
    return ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed


# --- 1. a damaged event in a column other than text, meta or payload -------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        db.context(CONTEXT, create=True).observe_batch(
            [morphz.Observation("tool_result", f"result {i}") for i in range(600)], session="s"
        )
    return path


@pytest.mark.parametrize("column", ["kind", "session_id", "time", "recorded_at", "head"])
def test_a_damaged_event_is_named_whatever_text_column_is_damaged(store: Path, column: str) -> None:
    """sqlite_rows.undecodable_event (sqlite_rows.py:62) looks for the undecodable row in text,
    meta and payload only, but the batch reads eight text columns (sqlite_txn.py:30). Damage in
    kind, session_id, time, recorded_at or head is not found: the error names "an event after
    @e0", the intact events @e1..@e499 of the batch are not given, and the audit blames @e1."""
    conn = sqlite3.connect(store)
    with conn:
        conn.execute(f"UPDATE events SET {column} = CAST(X'68C3' AS TEXT) WHERE seq = 500")
    conn.close()
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        with pytest.raises(StoreError) as caught:
            ctx.events(after=0)
        report = ctx.audit()
    assert f"event @e500 of context '{CONTEXT}' cannot be read" in str(caught.value)
    (stop,) = [d for d in report.differences if "cannot be read" in d]
    assert stop.startswith("@e500: "), stop


# --- 5. protected paths under another Unicode normalization ---------------------------------


def test_the_store_is_protected_under_another_unicode_normalization(ws: Path) -> None:
    """check_writable (paths.py:74) compares casefolded paths, for file systems that ignore
    case (macOS, Windows). But macOS's file systems ignore Unicode normalization too (APFS is
    normalization-insensitive, HFS+ stores NFD): 'café.db' written with a combining accent is
    the store 'café.db', yet casefold leaves the two spellings different, so write_file
    overwrites the store. Where names are bytes (Linux) refusing the other spelling is as
    harmless as refusing another case."""
    store = unicodedata.normalize("NFC", "café.db")
    (ws / store).write_bytes(b"SQLite format 3\x00")
    tc = ToolContext(None, "s", "a", ws, (ws / store,))  # type: ignore[arg-type]
    other = unicodedata.normalize("NFD", store)
    assert other != store
    with pytest.raises(ToolError, match="protected"):
        run(write_file_tool(), tc, path=other, content="clobbered")


# --- 7. a folder that cannot be flushed before the file is written --------------------------------


def test_a_new_folder_that_cannot_be_flushed_does_not_claim_the_file_was_written(
    tc: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_file flushes each folder it creates (workspace.py:_folder_for) before the file is
    created; sync_folder's error (paths.py:_unsynced) says "the change was made ... read or list
    what you changed". Raised there, the file was never written: the model is told a write
    happened that did not."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # a folder's flush fails: an I/O error
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(ToolError) as caught:
        run(write_file_tool(), tc, path="new/sub/file.txt", content="hello\n")
    written = (ws / "new" / "sub" / "file.txt").exists()
    assert written or "the change was made" not in str(caught.value), str(caught.value)


# --- 8. ignore_case and the dotted capital I ------------------------------------------------------


def test_a_literal_search_ignoring_case_finds_the_dotted_capital_i(
    tc: ToolContext, ws: Path
) -> None:
    """The literal search ignores case by str.casefold (linesearch.py:_literal), which folds
    'İ' (U+0130) to 'i' plus a combining dot: 'istanbul' with ignore_case finds neither
    'İstanbul' nor 'İSTANBUL', though the same search with regex=true does (re folds 'İ' to
    'i'). Older than this session; the rewrite of _literal kept it."""
    (ws / "cities.txt").write_text("İSTANBUL\n")
    literal = run(search_files_tool(), tc, query="istanbul", ignore_case=True)
    regex = run(search_files_tool(), tc, query="istanbul", ignore_case=True, regex=True)
    assert [m["line"] for m in regex.data["matches"]] == [1]
    assert [m["line"] for m in literal.data["matches"]] == [1], literal.text


def test_a_protected_file_under_another_name_on_the_disk_is_refused(ws: Path) -> None:
    """Beside the folded comparison, a path that exists is compared on the disk (device and
    inode): another name of the store (a hard link here; on other file systems a short name or
    another spelling) is refused, and so is a file in a protected folder reached so."""
    (ws / "morphz.db").write_bytes(b"SQLite format 3\x00")
    os.link(ws / "morphz.db", ws / "other-name.db")
    (ws / "config").mkdir()
    tc = ToolContext(None, "s", "a", ws, (ws / "morphz.db", ws / "config"))  # type: ignore[arg-type]
    with pytest.raises(ToolError, match="protected"):
        run(write_file_tool(), tc, path="other-name.db", content="clobbered")
    assert (ws / "morphz.db").read_bytes() == b"SQLite format 3\x00"
    assert run(write_file_tool(), tc, path="notes.txt", content="x").data["path"] == "notes.txt"
