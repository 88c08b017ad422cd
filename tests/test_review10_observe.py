"""Review 10 (observe): observing, importing and recording. Each test fails against the code as
it was reviewed and states, in its docstring, the behaviour expected once fixed."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

import morphz
from morphz import Observation
from morphz.errors import HistoryImportError, MorphzError


def _ticks(ctx: morphz.Context) -> dict[str, int]:
    """The arrival tick the inbox shows for each observation ref."""
    text = ctx.encode().text
    return {
        ref: int(tick) for ref, tick in re.findall(r"\(observation (@e\d+) .*?\(tick (\d+)\)", text)
    }


# ------------------------------------------------------------------ clock ticks of a batch


def test_a_batch_shows_one_arrival_tick_for_all_its_observations(ctx: morphz.Context) -> None:
    """The results of one step (the engine appends parallel tool results as one batch) arrive
    together and advance the clock once. The protocol tells the model each inbox item carries
    "the clock tick it arrived at (its age is the kernel's clock minus that tick)", so every
    observation of the batch must show the same tick, the one an observation appended alone
    would show (the clock after its arrival). Today the tick lands on the batch's last step
    only: the first results show the clock before the batch (they look one tick older than
    their sibling), and a recall_result that happens to come last carries the tick (its event
    payload says {"tick": true}) although recall results never tick."""
    ctx.observe("user_message", "start")  # clock 1, its inbox tick is 1
    events = ctx.observe_batch(
        [
            Observation("tool_result", "first result"),
            Observation("tool_result", "second result"),
            Observation("recall_result", "a recall"),
        ]
    )
    assert ctx.status().clock == 2
    ticks = _ticks(ctx)
    assert ticks["@e1"] == 1
    assert {ticks[e.ref] for e in events} == {2}, ticks


# ------------------------------------------------------------------ import sources


def test_import_from_a_text_file_that_is_not_utf8_is_a_typed_error(
    ctx: morphz.Context, tmp_path: Path
) -> None:
    """import_history takes an open text file (IO[str]). When that file's bytes are not valid
    in its encoding, iterating it raises UnicodeDecodeError; the import must refuse with a
    HistoryImportError (what docs/cli.md and DESIGN §13 promise: a typed error, nothing
    written), not let the bare UnicodeDecodeError escape."""
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with path.open(encoding="utf-8") as handle, pytest.raises(HistoryImportError):
        ctx.import_history(handle)
    assert ctx.status().last_seq == 0


def test_import_from_a_path_holding_a_nul_is_a_typed_error(ctx: morphz.Context) -> None:
    """A path that cannot be opened is refused as a HistoryImportError naming it ("cannot read
    ..."); a path with a NUL character (ValueError: embedded null byte from open) escapes as a
    bare ValueError instead."""
    with pytest.raises(HistoryImportError):
        ctx.import_history("history\x00.jsonl")


def test_import_json_error_says_where_in_the_line(ctx: morphz.Context) -> None:
    """A line that is not JSON is refused naming the line, but the JSON reader's position is
    dropped: the message ends "(Invalid control character at)" - at what? On a long line of an
    exported chat the column (or character offset) is what finds the fault; the message should
    give it, e.g. "line 2, column 12: not valid JSON (Invalid control character)"."""
    lines = '{"text": "fine"}\n{"text": "unterminated\n'
    with pytest.raises(HistoryImportError) as info:
        ctx.import_history(io.StringIO(lines))
    assert info.value.line == 2
    message = info.value.message
    assert re.search(r"column \d+|character \d+", message), message


# ------------------------------------------------------------------ record


def test_record_with_an_unhashable_kind_is_a_typed_error(ctx: morphz.Context) -> None:
    """record() refuses a kind it does not take with an InputError listing the kinds it takes
    (observe() does the same for any non-string kind); a list as kind raises a bare
    TypeError (unhashable type) from the frozenset membership test instead."""
    with pytest.raises(MorphzError):
        ctx.record(["model_reply"])  # type: ignore[arg-type]
    assert ctx.status().last_seq == 0
