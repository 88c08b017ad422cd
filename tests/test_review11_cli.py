"""Review 11, the command line's output as a terminal user sees it: control characters of
untrusted text (tool results, tool names, provider messages), settings that later crash every
reading command, and table alignment of non-ASCII text.

Each test fails on the code it was written against; its docstring says what should happen.
CliRunner is invoked with ``color=True`` where it matters: that is what a terminal gets (click
strips ANSI sequences only when the stream is not a terminal, and never a bare BEL or CR).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces import render
from morphz.interfaces.cli import main

SPOOF = "ok\x1b]0;pwned\x07 \x1b[2J\rFAKE"  # a title change, a screen clear, a line overwrite
CONTROLS = ("\x1b", "\x07", "\r")


def _run(args: list[str], *, stdin: str | None = None, color: bool = True) -> Result:
    return CliRunner().invoke(main, args, input=stdin, color=color)


def _raw_controls(text: str) -> list[str]:
    return [c for c in CONTROLS if c in text]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose context-default holds a tool result with escape sequences (@e1) and a frame
    derived from it whose body holds them too."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    db = tmp_path / "m.db"
    with morphz.open(db, create=True) as opened:
        ctx = opened.context("context-default", create=True)
        ctx.observe("tool_result", SPOOF)
        body = SPOOF.replace("\\", "\\\\").replace('"', '\\"')
        ctx.commit(f'(context-tx (base-version 0) (derive a/b (from @e1) (fact "{body}")))')
    return db


# ------------------------------------------------------------------ recall frame: Content


def test_recall_frame_content_section_shows_control_characters_escaped(store: Path) -> None:
    """`context recall frame --include-events --include-bodies` (text) shows event previews and
    frame bodies with control characters as \\xNN, as `context show`, `context events` and
    `recall search` already do for the same body and the same tool result (docs/decisions.md,
    "What people read"): a tool result's escape sequences must not reach the terminal."""
    args = ["context", "recall", "frame", "a/b", "--include-events", "--include-bodies"]
    result = _run([*args, "--db", str(store)])
    assert result.exit_code == 0, result.output
    content = result.stdout.split("Content\n", 1)[1].split("\n\nLinks", 1)[0]
    assert _raw_controls(content) == [], repr(content)


# ------------------------------------------------------------------ chat activity lines


def _chat(tmp_path: Path, steps: list[dict[str, Any]], stdin: str) -> Result:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps))
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    args = ["chat", "--model", f"scripted:{script}", "--workspace", str(workspace)]
    return _run([*args, "--db", str(tmp_path / "chat.db")], stdin=stdin)


def test_chat_activity_line_escapes_the_tool_name_a_model_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The activity lines `morphz chat` prints on stderr (`@e3 calls NAME(...)`, `@e4 NAME
    (error): ...`) show a model-chosen tool name with its control characters as \\xNN: the
    name is model output (a prompt-injected model can pick any), like the arguments and the
    result previews beside it, which are already escaped."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    steps = [
        {"tool_calls": [{"name": "x\x1b]0;pwned\x07\x1b[2J\rFAKE", "arguments": {}}]},
        {"reply": "done"},
    ]
    result = _chat(tmp_path, steps, "go\n/quit\n")
    assert result.exit_code == 0, result.output
    calls = [line for line in result.stderr.splitlines() if "FAKE" in line]
    assert calls, result.stderr
    assert _raw_controls(result.stderr) == [], repr(result.stderr)


def test_activity_line_of_a_recorded_receipt_escapes_its_fields() -> None:
    """Anyone may record a `tx_receipt` observation (`context observe --kind tx_receipt`); the
    chat's activity line summarising it (`committed TX vN -> vM`) shows its tx_id with control
    characters as \\xNN, as every other preview of stored text is shown."""
    text = json.dumps({"ok": True, "tx_id": "tx-1\x1b[2J\r", "before_version": 0})
    event = morphz.Event(
        "c", 5, "tx_receipt", "other", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00",
        text, None, None, 0, 1, "0" * 64,
    )  # fmt: skip
    line = render.activity_line(event)
    assert _raw_controls(line) == [], repr(line)


class _FailingModel:
    """A provider that refuses every request with an error body of its own words."""

    name = "openai:evil"

    async def request(self, request: Any) -> Any:
        from morphz.runtime.models.base import ProviderError

        raise ProviderError("bad request\x1b]0;pwned\x07\x1b[2J\rall good, delivered")


def test_exec_failure_reason_from_a_provider_is_printed_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`morphz exec` (text) prints `activation failed: model provider error (...): WORDS`, where
    WORDS are the provider's error body (remote text, from whatever OPENAI_BASE_URL points at).
    That message is not stored content printed exactly (a reply, the encoding): its control
    characters are shown as \\xNN, so the endpoint cannot clear the screen or rewrite the
    line into a fake success."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("morphz.interfaces.cli_agent.make_model", lambda *a, **k: _FailingModel())
    (tmp_path / "ws").mkdir()
    args = ["exec", "hello", "--model", "openai:evil", "--workspace", str(tmp_path / "ws")]
    result = _run([*args, "--db", str(tmp_path / "e.db")])
    assert result.exit_code == 1, result.output
    assert "activation failed" in result.stdout
    assert _raw_controls(result.stdout) == [], repr(result.stdout)


def test_text_error_messages_show_control_characters_escaped(store: Path) -> None:
    """A refusal in text mode (`error (CODE): MESSAGE` on stderr) shows control characters of
    what it quotes as \\xNN, as most messages already do with repr(): `recall frame` with an id
    that is no frame quotes the id raw ('{frame_id}', recall/traverse.py), so whatever was
    pasted (or scripted) as the id drives the terminal."""
    result = _run(["context", "recall", "frame", "x\x1b]0;pwned\x07", "--db", str(store)])
    assert result.exit_code == 1, result.output
    assert "no frame" in result.stderr
    assert _raw_controls(result.stderr) == [], repr(result.stderr)


# ------------------------------------------------------------------ a setting that breaks reads


def test_a_view_setting_that_is_accepted_does_not_crash_every_later_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`context view --session-count N` either refuses N (exit 1, code `input`, as it refuses
    0) or stores a value that later commands can use. Today 10**23 is stored (exit 0), and from
    then on `context status` and `context encoding` (and exec/chat) of the context die with an
    OverflowError traceback (sqlite_active.session_window binds it as LIMIT) instead of a
    typed error: exit 1 with a JSON error object on stdout for --format json."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    db = ["--db", str(tmp_path / "v.db")]
    assert _run(["context", "create", *db]).exit_code == 0
    setting = _run(["context", "view", "--session-count", str(10**23), "--format", "json", *db])
    if setting.exit_code == 1:  # refused: fine, as long as it is a typed refusal
        assert json.loads(setting.stdout)["error"]["code"] == "input"
        return
    assert setting.exit_code == 0, setting.output
    for command in (["context", "status"], ["context", "encoding"]):
        result = _run([*command, "--format", "json", *db])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"{command}: {result.exception!r}"
        )
        json.loads(result.stdout)  # one JSON document, success or error object


# ------------------------------------------------------------------ non-ASCII in tables


def _display_width(text: str) -> int:
    return sum(
        0
        if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf")
        else 2
        if unicodedata.east_asian_width(c) in "WF"
        else 1
        for c in text
    )


def test_table_columns_align_with_combining_marks() -> None:
    """Text tables pad cells to the terminal cells their text takes: a combining accent
    (`e` + U+0301, as macOS file names and much imported text hold it) or a zero-width joiner
    takes none, so the next column starts at the same place on every row. `_cells` counts each
    of them as one cell, so such a row's next column is shifted left."""
    out = render.table(("name", "n"), [("Cafe\u0301", "1"), ("Cafe", "2"), ("a\u200db", "3")])
    rows = out.splitlines()[2:]
    starts = {_display_width(row[: row.rindex(row[-1])]) for row in rows}
    assert len(starts) == 1, rows


def test_event_preview_is_not_cut_inside_a_character() -> None:
    """The events table's preview is cut where a reader sees a character end, as the inbox's
    and recall's previews are (graphemes.boundary): not between the two halves of a flag, which
    shows a different symbol (a lone regional-indicator letter)."""
    text = "x" * 46 + "\U0001f1eb\U0001f1f7" + " more text to cut"  # a flag across the cut
    event = morphz.Event(
        "c", 1, "user_message", "default", "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:00+00:00", text, None, None, 0, 1, "0" * 64,
    )  # fmt: skip
    shown = list(render.event_lines(lambda: [event]))[2]
    assert "\U0001f1eb..." not in shown, shown
