"""An observation's meta in the inbox (review 16a): the immutable facts kept with it (a tool
result's tool, call id and error flag; an import's speaker) are shown with it, canonically, and a
long one is named with its size instead (recall reads it whole)."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from histories import Clock
from morphz.mind.lines import META_SHOWN
from stores import run_sql

LOCAL = "2026-08-04T10:00:00+00:00"


def _ctx(tmp_path: Path) -> morphz.Context:
    return morphz.open(tmp_path / "m.db", now=Clock()).context("c", create=True)


def _line(ctx: morphz.Context, ref: str) -> str:
    inbox = ctx.encode(local_time=LOCAL).region("inbox")
    return next(line for line in inbox.splitlines() if f"(observation {ref} " in line)


def test_a_tool_results_meta_is_shown_before_its_text(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    meta = {"tool": "exec", "error": True, "call": "call_7"}
    ref = ctx.observe("tool_result", "exit status 2", meta=meta).ref
    line = _line(ctx, ref)
    assert (
        '(tick 1) (meta (call "call_7") (error "true") (tool "exec")) (text "exit status 2"))'
        in line
    )


def test_meta_keys_that_are_no_ids_are_quoted_and_values_are_canonical(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    meta = {"x y": [1, "a"], "speaker": "ana", "n": {"b": None, "a": 2.5}, 'q"': 'say "hi"'}
    ref = ctx.observe("user_message", "ship it", meta=meta).ref
    shown = _line(ctx, ref).split(" (meta ", 1)[1].split(" (text ", 1)[0]
    assert shown == (
        '(n "{\\"a\\": 2.5, \\"b\\": null}") ("q\\"" "say \\"hi\\"") (speaker "ana") '
        '("x y" "[1, \\"a\\"]"))'
    )


def test_an_observation_without_meta_shows_none(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for meta in (None, {}):
        ref = ctx.observe("user_message", "plain", meta=meta).ref
        assert "(meta" not in _line(ctx, ref)


def test_a_long_meta_is_named_with_its_size_and_recall_reads_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    fits = {"blob": "m" * (META_SHOWN - len('(blob "")'))}
    too_long = {"blob": "m" * (META_SHOWN - len('(blob "")') + 1)}
    shown = ctx.observe("external_event", "a", meta=fits).ref
    named = ctx.observe("external_event", "b", meta=too_long).ref
    assert f'(meta (blob "{fits["blob"]}"))' in _line(ctx, shown)
    line = _line(ctx, named)
    assert "(meta " not in line
    note = f'(meta-omitted "{META_SHOWN + 1} characters: read {named} with recall for its meta")'
    assert note in line
    assert ctx.recall.read(named).meta == too_long


def test_appending_an_observation_with_meta_keeps_the_inbox_prefix(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.observe("tool_result", "one", meta={"tool": "read_file", "call": "c1", "error": False})
    before = ctx.encode(local_time=LOCAL)
    ctx.observe("tool_result", "two", meta={"tool": "exec", "call": "c2", "error": True})
    after = ctx.encode(local_time=LOCAL)
    end = next(r.end for r in before.regions if r.name == "inbox") - len(")\n")
    assert after.text.encode()[:end] == before.text.encode()[:end]


def test_a_contextdelta_increment_shows_the_arrivals_meta(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    delta = morphz.encoding.DeltaEncoder()
    delta.next(ctx.encode(local_time=LOCAL))
    meta = {"tool": "exec", "call": "c9", "error": False}
    ref = ctx.observe("tool_result", "later", meta=meta).ref
    text = delta.next(ctx.encode(local_time=LOCAL))
    assert delta.last == "increment"
    assert f"(arrived (observation {ref} " in text
    assert '(meta (call "c9") (error "false") (tool "exec")) (text "later"))' in text


@pytest.mark.parametrize("stored", ["'not json'", "'[1, 2]'"])
def test_a_damaged_meta_is_a_store_error_naming_the_event(tmp_path: Path, stored: str) -> None:
    ctx = _ctx(tmp_path)
    ref = ctx.observe("user_message", "x", meta={"speaker": "ana"}).ref
    ctx.db.close()
    run_sql(tmp_path / "m.db", f"UPDATE events SET meta = {stored} WHERE seq = 1")
    with morphz.open(tmp_path / "m.db") as db, pytest.raises(morphz.StoreError) as caught:
        db.context("c").encode(local_time=LOCAL)
    assert f"event {ref} of context 'c' cannot be read: its stored meta is" in str(caught.value)
    assert "restore the store from a backup" in str(caught.value)
