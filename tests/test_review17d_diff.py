"""Review 17d: the seventeenth session's change as a whole (`git diff 7db4dde HEAD`).

Each test fails on the code as it is and states the behaviour expected once fixed:

- a store whose history holds a place that moved nothing (the previous release committed it)
  fails its audit, since the replay applies the new no-op refusal;
- `context events` as a text table lists events recorded after it started (each of its two
  passes takes its own bound);
- `context events --format json` on a history with a damaged event prints a document that is
  not JSON (part of the list, then the error object);
- a file name that is not UTF-8 is shown quoted with "give it as a path argument as written",
  and that argument is refused;
- a new store created through a symbolic link to a file not there yet is readable by all.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz.interfaces import listing
from morphz.interfaces.cli import main
from morphz.mind import order
from morphz.observe import Observation
from morphz.runtime.tools.base import ToolContext
from morphz.runtime.tools.workspace import list_files_tool, read_file_tool
from stores import run_sql
from toolruns import run


def _tx(ctx: morphz.Context, ops: str) -> morphz.Receipt:
    return ctx.commit(f"(context-tx (base-version {ctx.version}) {ops})")


# --- 1. the no-op place refusal replays over histories that committed one ---------------------


def test_a_history_holding_a_place_that_moved_nothing_still_passes_its_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until this change `(place b (after a))` with b after a already committed (it took a
    version and wrote the order): every store of the previous release whose agent placed a
    frame where it was holds such a commit. The audit replays stored transactions by the rule
    of the code, so the new refusal in mind/apply.py _place makes that store fail its audit
    ("the committed tx no longer applies on replay"), as decisions.md's sixteenth session
    warned for new refusals (those belong to new commits only: txlang.validate.check_new)."""
    with morphz.open(tmp_path / "old.db") as db:
        ctx = db.context("c", create=True, window=0)
        _tx(ctx, "(create a (x 1)) (create b (x 2))")
        with monkeypatch.context() as old_release:  # the previous release had no such refusal
            old_release.setattr(order, "stays", lambda *_: False)
            _tx(ctx, "(place b (after a))")
        report = ctx.audit()
    assert report.ok, report.differences


# --- 2. context events: the history as it was when the command started ----------------------


@pytest.fixture
def events_store(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe_batch([Observation("tool_result", f"result {i}") for i in range(5)])
    return path


def test_the_text_table_does_not_list_events_recorded_while_it_printed(
    events_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: "it is the history as it was when the command started (events recorded
    meanwhile are not listed)". The text table reads the history twice (widths, then rows),
    and interfaces/listing.history takes the last event anew on each read: an event another
    process records between the two reads is printed, in a row the widths were not measured
    for. Here a second Database records one between the passes, as another process would."""
    real = listing.history
    passes: list[int] = []

    def history(
        ctx: morphz.Context, after: int, limit: int | None, last: int
    ) -> Iterator[morphz.Event]:
        passes.append(1)
        yield from real(ctx, after, limit, last)
        if len(passes) == 1:  # the widths are measured: another process records an event
            with morphz.open(events_store) as other:
                other.context("c").observe("user_message", "recorded-while-the-table-printed")

    monkeypatch.setattr(listing, "history", history)
    shown = CliRunner().invoke(
        main, ["context", "events", "c", "--db", str(events_store), "--format", "text"]
    )
    assert shown.exit_code == 0, shown.output
    assert len(passes) == 2  # the two reads of the text table
    assert "recorded-while-the-table-printed" not in shown.stdout, shown.stdout


def test_json_events_of_a_history_with_a_damaged_event_is_still_one_json_document(
    tmp_path: Path,
) -> None:
    """docs/cli.md: with --format=json an error goes to stdout as {"ok": false, "error": ...},
    what a script parses. Streaming (interfaces/cli.py events_command) now prints part of the
    list, cut at a 64 KiB chunk (not even at the page before the damaged event), then that
    object: stdout is no JSON document at all. decisions.md records the choice; a consumer of
    --format=json cannot parse either the events or the error."""
    path = tmp_path / "damaged.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe_batch([Observation("tool_result", f"result {i}") for i in range(1_500)])
    run_sql(path, "UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE seq = 1200")
    shown = CliRunner().invoke(
        main, ["context", "events", "c", "--db", str(path), "--format", "json"]
    )
    assert shown.exit_code == 1
    document = json.loads(shown.stdout)  # fails today: a partial list, then the error object
    assert document["ok"] is False and "@e1200" in document["error"]["message"]


# --- 3. a quoted path that is not UTF-8 ----------------------------------------------------


@pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses names that are not UTF-8")
def test_a_quoted_name_that_is_not_utf8_is_not_promised_to_name_the_file_again(
    ws: Path,
) -> None:
    """list_files shows a name holding a byte that is not UTF-8 (a Latin-1 archive's
    caf\\xe9.txt) as "caf\\udce9.txt" and said: give it as a path argument as written. Given
    so (json.loads of the quoted text, as the model's tool call arguments are read), read_file
    refuses it: the arguments' check refuses a lone surrogate, so the promise of
    runtime/tools/paths.shown_path and docs/cli.md ("names the file again") did not hold. The
    reviewer asked that it name the file again or that the result say otherwise; the fix
    (seventeenth session) says otherwise: such a name cannot be a tool argument (it could not be
    recorded as text either), and the result says to reach it with exec."""
    try:
        with open(os.path.join(os.fsencode(ws), b"caf\xe9.txt"), "wb") as file:
            file.write(b"needle\n")
    except OSError:  # a file system that takes UTF-8 names only
        pytest.skip("this file system refuses a name that is not UTF-8")
    tc = ToolContext(None, "s", "a", ws, ())  # type: ignore[arg-type]  # no store needed
    listed = run(list_files_tool(), tc).text.splitlines()
    quoted = listed[1].split("  ")[-1].strip()
    assert quoted.startswith('"'), listed  # shown as a JSON string
    assert "not UTF-8" in listed[0] and "exec" in listed[0], listed[0]
    with pytest.raises(Exception, match="lone surrogate"):
        run(read_file_tool(), tc, path=json.loads(quoted))


# --- 4. a new store is private, also through a link ------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_a_new_store_made_through_a_link_to_a_missing_file_is_private(tmp_path: Path) -> None:
    """docs/cli.md: a new store is private to its owner whatever the umask (0600). When the
    store's path is a symbolic link to a file not there yet (the store kept on another
    volume), store/sqlite_paths.create_private_file's O_EXCL open meets the link and leaves
    it, and SQLite then creates the file through the link with the umask's mode (0644)."""
    (tmp_path / "volume").mkdir()
    target = tmp_path / "volume" / "morphz.db"
    link = tmp_path / "morphz.db"
    link.symlink_to(target)
    mask = os.umask(0o022)
    try:
        with morphz.open(link) as db:
            db.context("c", create=True)
    finally:
        os.umask(mask)
    assert target.is_file()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600, oct(target.stat().st_mode)
