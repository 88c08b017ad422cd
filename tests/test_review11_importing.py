"""Review (eleventh session) of appending observations and importing history: each test fails
on the code it was written against and states, in its docstring, the behaviour expected."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz import observe as observe_module
from morphz.errors import HistoryImportError, InputError, MorphzError

ROOT = Path(__file__).resolve().parents[1]


def jsonl(*records: Any) -> io.StringIO:
    """A JSON Lines text stream of ``records`` (strings are taken as lines as they are)."""
    lines = (r if isinstance(r, str) else json.dumps(r) for r in records)
    return io.StringIO("".join(line + "\n" for line in lines))


# ------------------------------------------------------------------ imported replies


def test_an_imported_agent_reply_is_searchable_or_refused(ctx: morphz.Context) -> None:
    """`context import` exists "so that real conversations can be searched", and it accepts
    every observation kind, `agent_reply` (the natural kind of an assistant's turn) included.
    An `agent_reply` is left out of the recall index because the `model_reply` that delivered it
    is indexed; an imported one has no `model_reply`, so its text could never be found, by
    words or by time. Expected: an imported `agent_reply` line is found by a search for its
    words (and by its time), or the import refuses the line (HistoryImportError naming it and
    saying which kind to use) instead of silently storing unsearchable history."""
    history = jsonl(
        {"text": "Which region does checkout deploy to?", "time": "2023-05-08T13:56:00+00:00"},
        {
            "kind": "agent_reply",
            "text": "Checkout deploys to cn-shanghai since Tuesday.",
            "time": "2023-05-08T13:57:00+00:00",
        },
    )
    try:
        report = ctx.import_history(history)
    except HistoryImportError as exc:
        assert exc.line == 2
        return
    reply = report.last_ref
    assert reply in [h.ref for h in ctx.recall.search("shanghai").hits]
    in_range = ctx.recall.search(
        since="2023-05-08T13:57:00+00:00", until="2023-05-08T13:58:00+00:00"
    )
    assert reply in [h.ref for h in in_range.hits]


# ------------------------------------------------------------------ duplicate keys


@pytest.mark.parametrize(
    "line",
    [
        '{"text": "the deploy is on Monday", "text": "ok"}',
        '{"kind": "tool_result", "text": "x", "kind": "user_message"}',
        '{"text": "x", "time": "2023-05-08T13:56:00+00:00", "time": "2024-01-01T00:00:00+00:00"}',
        '{"text": "x", "meta": {"speaker": "ana", "speaker": "bo"}}',
    ],
    ids=["text", "kind", "time", "meta-key"],
)
def test_an_import_line_with_a_duplicate_key_is_refused(ctx: morphz.Context, line: str) -> None:
    """The import is strict about what a line holds (an unknown field is refused, naming the
    line), yet a key given twice in a line is silently resolved to its last value: the first
    text, kind, time or meta entry is dropped without a word. Expected: a duplicate key (at the
    top level or inside meta) is a HistoryImportError naming the line and the key, and nothing
    is imported."""
    with pytest.raises(HistoryImportError) as caught:
        ctx.import_history(jsonl({"text": "fine"}, line))
    assert caught.value.line == 2
    assert ctx.events() == []


# ------------------------------------------------------------------ the "(ticked)" marker


def test_a_chunked_import_marks_the_tick_on_an_observation_that_ticks(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import is appended in chunks of IMPORT_CHUNK lines; the "(ticked)" marker (payload
    `tick`) is placed by each chunk on its own first clock kind, defaulting to the chunk's first
    item. When the first chunk holds no clock kind (a long run of approval results before the
    first user message), the marker lands on an `approval_result`, a kind that never ticks,
    and no event of a clock kind carries it: observe_batch of the same lines marks the user
    message. Expected: exactly one event carries the marker, and it is the first observation of
    a clock kind (@e3 here), as for the same batch appended by observe_batch."""
    monkeypatch.setattr(observe_module, "IMPORT_CHUNK", 2)
    ctx.import_history(
        jsonl(
            {"kind": "approval_result", "text": "approved"},
            {"kind": "approval_result", "text": "approved again"},
            {"text": "now deploy it"},
        )
    )
    marked = [e.ref for e in ctx.events() if (e.payload or {}).get("tick")]
    assert marked == ["@e3"]


# ------------------------------------------------------------------ observe_batch(ticked=)


@pytest.mark.parametrize("ticked", [True, False])
def test_observe_batch_ticked_refuses_a_bool(ctx: morphz.Context, ticked: bool) -> None:
    """`ticked` is "the index of the item shown as the one that ticked"; the library refuses
    True and False where it takes a whole number (checks.check_whole: "Python counts them as
    integers, a user does not"), but observe_batch takes ticked=True as index 1 and ticked=False
    as index 0. Expected: an InputError naming ticked, and nothing appended."""
    batch = [morphz.Observation("user_message", "a"), morphz.Observation("user_message", "b")]
    with pytest.raises(InputError, match="ticked"):
        ctx.observe_batch(batch, ticked=ticked)
    assert ctx.events() == []


# ------------------------------------------------------------------ typed errors for sources


def _closed_file(tmp_path: Path) -> Any:
    path = tmp_path / "h.jsonl"
    path.write_text('{"text": "a"}\n', encoding="utf-8")
    handle = path.open("rb")
    handle.close()
    return handle


def _write_only_file(tmp_path: Path) -> Any:
    return (tmp_path / "out.jsonl").open("w", encoding="utf-8")


SOURCES: dict[str, Callable[[Path], Any]] = {
    "records-not-lines": lambda _: [{"text": "a"}, {"text": "b"}],
    "numbers": lambda _: [1, 2],
    "closed-file": _closed_file,
    "write-only-file": _write_only_file,
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_an_unreadable_history_source_is_a_typed_error(
    ctx: morphz.Context, tmp_path: Path, name: str
) -> None:
    """import_history refuses a source that is not a path or a readable file with an InputError
    that says what to pass (None, an int, bytes), but a list of records (dicts: the parsed
    history a caller already holds), a list of numbers, a closed file or a file open only for
    writing escape as AttributeError, ValueError or io.UnsupportedOperation. DESIGN §13: every
    refusal is a typed error that says what to do. Expected: a MorphzError (InputError or
    HistoryImportError) saying the history must be lines of JSON text, and nothing imported."""
    source = SOURCES[name](tmp_path)
    try:
        with pytest.raises(MorphzError):
            ctx.import_history(source)
    finally:
        if hasattr(source, "close"):
            source.close()
    assert ctx.events() == []


# ------------------------------------------------------------------ docs: importing twice


def _import_section() -> str:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    start = text.index("## morphz context import")
    return text[start : text.index("\n## ", start + 1)]


def test_cli_docs_say_what_importing_the_same_file_twice_does(ctx: morphz.Context) -> None:
    """Importing a file a second time appends every line again (new refs, a second clock tick,
    every search hit twice): nothing tells it from the first import. A user who cannot tell
    whether an import finished (a killed terminal, a lost ssh session) and runs it again
    duplicates the history. The import section of docs/cli.md says nothing about it. Expected:
    the section says that an import is not idempotent (a second import of the same file appends
    it again) and how to check what is already there (e.g. `context status` or `events`)."""
    first = ctx.import_history(jsonl({"text": "deploy on Monday"}))
    second = ctx.import_history(jsonl({"text": "deploy on Monday"}))
    assert (first.first_ref, second.first_ref) == ("@e1", "@e2")  # what the code does today
    section = _import_section()
    assert re.search(r"twice|again|idempot|duplicat", section, re.IGNORECASE), section[:400]
