"""`morphz context events` prints the history as it reads it (review 17c): byte for byte what
printing the whole list at once printed, across pages and chunks; a failure to write standard
output part way through is still exit status 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from histories import Clock, tx
from morphz.interfaces import listing, render
from morphz.interfaces.cli import main
from morphz.observe import Observation

SRC = str(Path(morphz.__file__).resolve().parents[1])


def _old_text(items: list[morphz.Event]) -> str:
    """The text table as render.events built it before it streamed."""
    if not items:
        return "no events"
    rows = [
        (
            e.ref,
            e.kind,
            e.session_id,
            e.time,
            str(e.version),
            str(e.clock),
            render._preview(e.text, 50),
        )
        for e in items
    ]
    return render.table(("ref", "kind", "session", "time", "version", "clock", "text"), rows)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    with morphz.open(path, now=Clock()) as db:
        ctx = db.context("c", create=True)
        texts = ["plain", "caf\u00e9 \u4e2d\u6587 \U0001f44d", "a\tb\nc \x1b[31mred", "x" * 300]
        ctx.observe_batch(
            [Observation("tool_result", f"{i} {texts[i % len(texts)]}") for i in range(2_345)]
        )
        tx(ctx, '(create plan (goal ship "it"))')
        ctx.observe("user_message", "done", session="a-session-with-a-long-name-to-widen-it")
    return path


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--after", "999"),
        ("--after", "500", "--limit", "1500"),
        ("--limit", "1"),
        ("--after", "100000"),
    ],
)
def test_the_output_is_what_the_whole_list_printed(store: Path, args: tuple[str, ...]) -> None:
    with morphz.open(store) as db:
        ctx = db.context("c")
        after = int(args[args.index("--after") + 1]) if "--after" in args else 0
        limit = int(args[args.index("--limit") + 1]) if "--limit" in args else None
        items = ctx.events(after, limit)
    runner = CliRunner()
    base = ["context", "events", "c", "--db", str(store), *args]
    shown = runner.invoke(main, [*base, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert (
        shown.stdout
        == json.dumps([e.to_dict() for e in items], indent=2, ensure_ascii=False) + "\n"
    )
    shown = runner.invoke(main, [*base, "--format", "text"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == _old_text(items) + "\n"


def test_events_appended_while_it_prints_are_not_listed(store: Path) -> None:
    """The listing is the history as it was when the command started, though it reads it a
    page at a time."""
    with morphz.open(store) as db:
        ctx = db.context("c")
        last = ctx.events()[-1].seq
        seen = []
        for event in listing.history(ctx, 0, None, listing.last_seq(ctx)):
            seen.append(event.seq)
            if event.seq == 10:
                ctx.observe("user_message", "later")
        assert seen == list(range(1, last + 1))
        assert ctx.events()[-1].seq == last + 1


_FAILING_STDOUT = """
import errno, io, sys
from morphz.interfaces import cli

class Full(io.StringIO):
    written = 0
    encoding = "utf-8"
    def write(self, text):
        Full.written += len(text)
        if Full.written > 200_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(text)

sys.argv = ["morphz", *sys.argv[1:]]
sys.stdout = Full()
cli.main()
"""


def test_a_full_disk_part_way_through_is_exit_status_3(store: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_STDOUT, "context", "events", "c", "--db", str(store)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "the output of `morphz context events` could not be written" in done.stderr
