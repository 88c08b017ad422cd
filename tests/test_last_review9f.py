"""Review 9f, the newest commit (f31f6fb, "Review 9e fixes"): delivered traversals cut to fit
the preview threshold, and the audit that reports damaged rows instead of crashing. Each test
fails on f31f6fb and states the behaviour expected once fixed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import morphz
from histories import Clock as FixedClock
from test_recall import commit


def _inbox_line(ctx: morphz.Context, ref: str) -> str:
    return next(x for x in ctx.encode().region("inbox").splitlines() if f"(observation {ref} " in x)


# ------------------------------------------------------------------ delivered traversals


def test_a_delivered_traversal_of_a_much_cited_frame_shows_whole(ctx: morphz.Context) -> None:
    """The commit promises that a delivered traversal is cut (fewer nodes) until it shows whole
    in the inbox. A page's links are every link touching any of its nodes, including links to
    nodes on later pages, so the root of a frame that 300 frames relate to carries all 300
    links on its own: the page is cut to the root alone and is still a head-and-tail preview
    (about 21,600 characters against 16,000), with nothing gained by the cut. Expected: the page
    shows whole (e.g. a page lists the links among the nodes shown so far, each node's own
    ``via`` link, so cutting nodes cuts links too), and paging on reaches every node."""
    commit(ctx, "(create goal/root (harbour))")
    n = 300
    commit(
        ctx,
        *(f"(create n/{i} (note))" for i in range(n)),
        *(f"(relate n/{i} about goal/root)" for i in range(n)),
    )
    page, event = ctx.recall.deliver("frame", frame_id="goal/root", direction="descendants")
    assert "(preview " not in _inbox_line(ctx, event.ref), (len(page.nodes), len(page.links))
    ids = [node.id for node in page.nodes]
    cursor = page.next_cursor
    for _ in range(400):
        if cursor is None:
            break
        page, event = ctx.recall.deliver(
            "frame", frame_id="goal/root", direction="descendants", cursor=cursor
        )
        assert "(preview " not in _inbox_line(ctx, event.ref)
        ids.extend(node.id for node in page.nodes)
        cursor = page.next_cursor
    assert len(ids) == len(set(ids)) == n + 1


# ------------------------------------------------------------------ the audit


def _store_with_damaged_settings(path: Path, payload: str) -> None:
    with morphz.open(path, now=FixedClock()) as db:
        ctx = db.context("context-default", create=True)
        ctx.observe("user_message", "hello", session="a")
        ctx.set_window(7, session="a")
        ctx.observe("user_message", "again", session="a")
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE events SET payload = ? WHERE kind = 'settings_changed'", (payload,))
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param('{"window": 1e400}', id="window-overflows-to-infinity"),
        pytest.param("[" * 10_000 + "]" * 10_000, id="nesting-too-deep-to-decode"),
    ],
)
def test_the_audit_reports_a_damaged_payload_it_cannot_convert(
    tmp_path: Path, payload: str
) -> None:
    """The commit says the audit "reports damaged payloads, unreadable rows and unknown kinds
    instead of crashing". It catches KeyError, TypeError, ValueError and AttributeError only: a
    settings payload whose window is 1e400 (JSON Python reads as infinity) raises OverflowError
    out of ``int()``, and a payload nested too deep for the JSON decoder raises RecursionError
    out of the event iterator; both escape ``ctx.audit()`` (``morphz context audit`` prints a
    traceback). Expected: a report that is not ok, with a difference at @e2."""
    path = tmp_path / "m.db"
    _store_with_damaged_settings(path, payload)
    with morphz.open(path, now=FixedClock()) as db:
        report = db.context("context-default").audit()
    assert not report.ok
    assert any(d.startswith("@e2") for d in report.differences), report.differences


# ------------------------------------------------------------------ recall tokens


def test_an_unterminated_osc_sequence_does_not_hide_the_rest_of_the_text() -> None:
    """Migration 0010's tokenizer drops terminal escape sequences. Its OSC pattern
    (``ESC ] ... BEL or ESC \\``) makes the terminator optional and runs to the next BEL or ESC,
    so one stray or cut-off ``ESC ]`` (a title sequence whose BEL was lost, binary noise in a
    tool's output) removes every following word of the document, across lines, from the index:
    ``build ESC]0;title`` then a newline and ``deploy failed at harbour crane`` indexes as
    ``build`` alone, and no search finds the failure. Expected: an unterminated OSC ends at the
    line break (or is dropped as a two-character escape), and the words after it are indexed."""
    from morphz.recall.tokenize import index_text

    tokens = index_text("build \x1b]0;title\ndeploy failed at harbour crane").split()
    assert {"deploy", "fail", "harbour", "crane"} <= set(tokens), tokens
