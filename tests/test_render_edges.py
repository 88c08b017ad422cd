"""Edges of the text rendering found in a review of 2026-11-30 (each failed against the code as
it was): ids kept whole, wide characters aligned, bodies shown as they are."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

import morphz
from morphz.interfaces import render
from test_cli import Cli

LONG_ID = "project/" + "segment-" * 11 + "end"  # 99 characters: a valid frame id (<= 256)
WIDE_ID = "计划/部署目标"  # a valid frame id (\w matches CJK), 7 characters, 13 terminal cells


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    made = Cli(tmp_path / "store" / "morphz.db")
    made("context", "create")
    made("context", "observe", "--kind", "user_message", "--text", "prepare the deployment")
    return made


def _cells(text: str) -> int:
    """Terminal cells a string takes (wide and fullwidth characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


# ------------------------------------------------------------------ long ids are cut in two


@pytest.fixture
def long_id(cli: Cli) -> Cli:
    cli(
        "context",
        "tx",
        "--file",
        "-",
        stdin=f'(context-tx (base-version 0) (reason "r") (derive {LONG_ID} (from @e1) (fact a)))',
    )
    return cli


def test_show_prints_a_long_frame_id_whole(long_id: Cli) -> None:
    out = long_id("context", "show").stdout
    assert any(LONG_ID in line for line in out.splitlines()), out


def test_search_prints_a_long_frame_id_whole(long_id: Cli) -> None:
    out = long_id("context", "recall", "search", "--since", "2000-01-01T00:00:00Z").stdout
    assert any(LONG_ID in line for line in out.splitlines()), out


def test_frame_links_table_prints_a_long_frame_id_whole(long_id: Cli) -> None:
    out = long_id("context", "recall", "frame", LONG_ID, "--include-events").stdout
    links = out.split("\nLinks\n", 1)[1]
    assert any(LONG_ID in line for line in links.splitlines()), links


# ------------------------------------------------------------------ wide characters


def test_show_aligns_columns_after_a_wide_frame_id(cli: Cli) -> None:
    cli(
        "context",
        "tx",
        "--file",
        "-",
        stdin=f'(context-tx (base-version 0) (reason "r") (create {WIDE_ID} (a)) '
        "(create plan/ascii-frame-id (b)))",
    )
    out = cli("context", "show").stdout
    lines = out.split("Frames (projection order)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header, rows = lines[0], lines[2:]
    want = _cells(header[: header.index("lifecycle")])
    got = {row.split()[0]: _cells(row[: row.index("active")]) for row in rows}
    assert got == {WIDE_ID: want, "plan/ascii-frame-id": want}, "\n".join(lines)


# ------------------------------------------------------------------ traversal content


def test_frame_content_shows_the_body_as_it_is(cli: Cli) -> None:
    body = '(note "two  spaces")'
    cli(
        "context",
        "tx",
        "--file",
        "-",
        stdin=f'(context-tx (base-version 0) (reason "r") (create notes/x {body}))',
    )
    page = cli.json("context", "recall", "frame", "notes/x", "--include-bodies")
    assert page["nodes"][0]["body"] == body  # the library keeps it
    out = cli("context", "recall", "frame", "notes/x", "--include-bodies").stdout
    assert f"notes/x: {body}" in out, out


# ------------------------------------------------------------------ chat's activity line


@pytest.mark.parametrize("text", ['{"ok": false, "error": "boom"}', '{"error": ["x"]}'])
def test_activity_line_of_a_tx_receipt_with_a_non_object_error(cli: Cli, text: str) -> None:
    """`tx_receipt` is an observation kind anyone can record (`context observe --kind
    tx_receipt`); `morphz chat` shows other sessions' events with render.activity_line."""
    cli("context", "observe", "--kind", "tx_receipt", "--text", text)
    with morphz.open(cli.db, create=False) as db:
        event = db.context().events()[-1]
    line = render.activity_line(event)
    assert line.startswith(f"{event.ref} context_tx ")


# ------------------------------------------------------------------ view


def test_view_text_states_the_session_window_that_is_stored(cli: Cli) -> None:
    cli("context", "view", "--session-hours", "1234.5678")
    stored = cli.json("context", "view")["view"]["session_hours"]
    assert stored == 1234.5678
    out = cli("context", "view").stdout
    assert "1234.5678 hours" in out, out
