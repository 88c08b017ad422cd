"""History import (``ctx.import_history``): JSON Lines, one observation per line, all or
nothing, errors naming the line; imported times are the times recall's time ranges use
(issue 3, item 7)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz import observe as observe_module
from morphz.errors import HistoryImportError, InputError


@pytest.fixture(autouse=True)
def _audit_after_each_test(ctx: morphz.Context) -> Iterator[None]:
    yield
    report = ctx.audit()
    assert report.ok, report.differences


def jsonl(*records: Any) -> str:
    """JSON Lines text of ``records`` (strings are taken as lines as they are)."""
    lines = (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records)
    return "".join(line + "\n" for line in lines)


def state(ctx: morphz.Context) -> tuple[object, ...]:
    return (
        ctx.status(),
        ctx.events(),
        ctx.sessions(),
        ctx.mind(all_observations=True),
        ctx.recall_index.documents(),
    )


def refs(hits: Any) -> list[str]:
    return [h.ref for h in hits]


CONVERSATION: list[dict[str, Any]] = [
    {
        "text": "Caroline: I went to a LGBTQ support group yesterday.",
        "time": "2023-05-08T13:56:00+00:00",
        "meta": {"speaker": "Caroline", "dia_id": "D1:1"},
    },
    {
        "text": "Melanie: That's great! How was it?",
        "time": "2023-05-08T13:57:00+00:00",
        "meta": {"speaker": "Melanie", "dia_id": "D1:2"},
    },
    {
        "kind": "tool_result",
        "text": "calendar: painting class on Saturday",
        "time": "2023-05-08T21:58:00+08:00",
    },
    {"kind": "external_event", "text": "reminder: pottery workshop", "meta": {}},
    {"text": "no time, no meta"},
]


def window(ctx: morphz.Context, since: str, until: str, query: str | None = None) -> list[str]:
    return refs(ctx.recall.search(query, since=since, until=until).hits)


def test_import_a_conversation(ctx: morphz.Context) -> None:
    report = ctx.import_history(io.StringIO(jsonl(*CONVERSATION)))
    assert (report.context, report.observations) == (ctx.id, 5)
    assert (report.first_ref, report.last_ref) == ("@e1", "@e5")
    assert report.to_dict()["ok"] is True and report.to_dict()["observations"] == 5
    events = ctx.events()
    assert [e.kind for e in events] == [
        "user_message",  # kind defaults to user_message
        "user_message",
        "tool_result",
        "external_event",
        "user_message",
    ]
    assert [e.text for e in events] == [r["text"] for r in CONVERSATION]
    assert events[0].time == "2023-05-08T13:56:00+00:00"
    assert events[2].time == "2023-05-08T21:58:00+08:00"  # the offset is kept
    assert events[4].time == events[4].recorded_at  # no time: when it was recorded
    assert [e.meta for e in events] == [r.get("meta") for r in CONVERSATION]
    assert {e.session_id for e in events} == {"default"}
    status = ctx.status()
    assert status.last_seq == 5 and status.clock == 1  # one batch, one tick
    assert ctx.recall_index.inspect().current


def test_meta_is_returned_verbatim_in_hits(ctx: morphz.Context) -> None:
    meta = {
        "speaker": "Caroline",
        "dia_id": "D1:3",
        "img_url": ["https://example.invalid/a.jpg"],
        "blip_caption": "a photo of a rainbow flag",
        "nested": {"n": 1, "f": 2.5, "none": None, "yes": True, "list": [1, "二", {"x": []}]},
        "unicode": "部署 ✓ naïve",
    }
    ctx.import_history(io.StringIO(jsonl({"text": "the rainbow flag photo", "meta": meta})))
    (hit,) = ctx.recall.search("rainbow").hits
    assert hit.meta == meta
    assert hit.to_dict()["meta"] == meta
    (hit,) = ctx.recall.search(since="2000-01-01T00:00:00Z").hits
    assert hit.meta == meta
    assert ctx.recall.read("@e1").meta == meta


def test_imported_times_are_the_times_time_ranges_use(ctx: morphz.Context) -> None:
    ctx.import_history(io.StringIO(jsonl(*CONVERSATION)))
    may8 = window(ctx, "2023-05-08T00:00:00Z", "2023-05-09T00:00:00Z")
    assert may8 == ["@e1", "@e2", "@e3"]  # 21:58+08:00 is 13:58Z
    assert window(ctx, "2023-05-08T13:57:00Z", "2023-05-08T13:58:00Z") == ["@e2"]
    assert window(ctx, "2023-05-08T21:58:00+08:00", "2023-05-09T00:00:00Z") == ["@e3"]
    assert window(ctx, "2023-05-08T13:56:00Z", "2023-05-08T21:58:00+08:00") == ["@e1", "@e2"]
    # (@e2 is found too, at a lower rank, by the turn before it)
    assert window(ctx, "2023-05-08T13:56:00Z", "2023-05-08T13:57:00Z", "support group") == ["@e1"]
    assert window(ctx, "2023-05-08T13:57:00Z", "2023-05-09T00:00:00Z", "support group") == ["@e2"]
    assert window(ctx, "2023-05-09T00:00:00Z", "2026-01-01T00:00:00Z", "support group") == []
    # the lines without time are dated when they were recorded (the fixture's clock: 2026)
    assert refs(ctx.recall.search(since="2026-01-01T00:00:00Z").hits) == ["@e4", "@e5"]


def test_a_question_finds_the_answer_by_the_turn_before_it(ctx: morphz.Context) -> None:
    lines = [
        {"text": "Melanie: What did Caroline paint last weekend?"},
        {"text": "Caroline: A sunset over the lake."},
        *({"text": f"filler line {i} about nothing"} for i in range(20)),
    ]
    ctx.import_history(io.StringIO(jsonl(*lines)))
    hits = ctx.recall.search("what did Caroline paint", limit=5).hits
    assert refs(hits)[:2] == ["@e1", "@e2"]


def test_empty_and_blank_lines_are_skipped(ctx: morphz.Context) -> None:
    text = '\n{"text": "one"}\n\n   \n\t\n{"text": "two"}\n\n'
    report = ctx.import_history(io.StringIO(text))
    assert report.observations == 2
    assert [e.text for e in ctx.events()] == ["one", "two"]


def test_a_last_line_without_newline_and_crlf_lines(ctx: morphz.Context) -> None:
    ctx.import_history(io.StringIO('{"text": "one"}\r\n{"text": "two"}'))
    assert [e.text for e in ctx.events()] == ["one", "two"]


def test_import_from_a_path_or_a_file_object(ctx: morphz.Context, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(jsonl({"text": "from a path 上海"}), encoding="utf-8")
    assert ctx.import_history(path).observations == 1
    assert ctx.import_history(str(path)).first_ref == "@e2"
    with path.open(encoding="utf-8") as handle:
        assert ctx.import_history(handle).first_ref == "@e3"
    memory = io.StringIO(jsonl({"text": "from memory"}))
    assert ctx.import_history(memory, session="other").first_ref == "@e4"
    assert {h.ref for h in ctx.recall.search("上海").hits} == {"@e1", "@e2", "@e3"}


def test_import_continues_an_existing_history_in_a_session(ctx: morphz.Context) -> None:
    ctx.observe("user_message", "before the import")
    report = ctx.import_history(io.StringIO(jsonl(*CONVERSATION)), session="locomo-1")
    assert (report.first_ref, report.last_ref) == ("@e2", "@e6")
    assert {e.session_id for e in ctx.events()[1:]} == {"locomo-1"}
    assert "locomo-1" in {s.session_id for s in ctx.sessions()}
    with pytest.raises(InputError, match="session id"):
        ctx.import_history(io.StringIO(jsonl({"text": "x"})), session="bad session")


def test_import_of_recall_results_only_does_not_tick(ctx: morphz.Context) -> None:
    ctx.import_history(io.StringIO(jsonl({"kind": "recall_result", "text": "copied"})))
    assert ctx.status().clock == 0
    ctx.import_history(io.StringIO(jsonl({"kind": "approval_result", "text": "approved"})))
    assert ctx.status().clock == 0


def test_progress_is_reported(ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe_module, "IMPORT_CHUNK", 4)
    calls: list[tuple[int, int]] = []
    lines = [{"text": f"line {i}"} for i in range(10)]
    ctx.import_history(io.StringIO(jsonl(*lines)), progress=lambda d, t: calls.append((d, t)))
    assert calls == [(4, 10), (8, 10), (10, 10)]
    assert ctx.status().clock == 1 and ctx.status().last_seq == 10
    assert ctx.recall_index.inspect().current


# ------------------------------------------------------------------ bad input


BAD_LINES: list[tuple[str, str, str]] = [
    ("invalid-json", '{"text": "unterminated', "not valid JSON"),
    ("trailing-garbage", '{"text": "x"} extra', "not valid JSON"),
    ("list", '["text", "x"]', "expected a JSON object"),
    ("string", '"just text"', "expected a JSON object"),
    ("number", "42", "expected a JSON object"),
    ("null", "null", "expected a JSON object"),
    ("missing-text", '{"kind": "user_message"}', '"text" is required'),
    ("unknown-field", '{"text": "x", "speaker": "Mel"}', "unknown field(s) ['speaker']"),
    ("typo-field", '{"txt": "x"}', "unknown field(s) ['txt']"),
    ("bad-kind", '{"text": "x", "kind": "assistant"}', "unknown observation kind 'assistant'"),
    ("runtime-kind", '{"text": "x", "kind": "model_reply"}', "unknown observation kind"),
    ("naive-time", '{"text": "x", "time": "2023-05-08T13:56:00"}', "no UTC offset"),
    ("date-only", '{"text": "x", "time": "2023-05-08"}', "no UTC offset"),
    ("bad-time", '{"text": "x", "time": "8 May 2023"}', "not an ISO 8601 time"),
    ("meta-list", '{"text": "x", "meta": [1, 2]}', "meta must be a JSON object"),
    ("meta-string", '{"text": "x", "meta": "speaker"}', "meta must be a JSON object"),
    ("text-number", '{"text": 5}', "text must be a string"),
    ("text-null", '{"text": null}', "text must be a string"),
    ("time-number", '{"text": "x", "time": 1683554160}', "time"),
    ("kind-list", '{"text": "x", "kind": ["user_message"]}', 'kind ["user_message"]'),
    ("kind-object", '{"text": "x", "kind": {"a": 1}}', "kind"),
]


@pytest.mark.parametrize(
    ("bad", "message"), [(b, m) for _, b, m in BAD_LINES], ids=[i for i, _, _ in BAD_LINES]
)
def test_a_bad_line_is_refused_naming_it_and_nothing_is_imported(
    ctx: morphz.Context, bad: str, message: str
) -> None:
    ctx.observe("user_message", "already here")
    before = state(ctx)
    good = jsonl({"text": "good one"}, {"text": "good two", "time": "2023-05-08T13:56:00Z"})
    text = good + "\n" + bad + "\n" + jsonl({"text": "good three"})  # the bad line is line 4
    with pytest.raises(HistoryImportError) as info:
        ctx.import_history(io.StringIO(text))
    err = info.value
    assert err.line == 4
    assert err.message.startswith(("line 4: ", "line 4, column "))
    assert message in err.message
    assert err.to_dict() == {"code": "import", "message": err.message, "line": 4}
    assert isinstance(err, InputError)
    assert state(ctx) == before
    assert ctx.recall.search("good").hits == ()


@pytest.mark.parametrize("line", [1, 3, 250])
def test_the_error_names_the_physical_line(ctx: morphz.Context, line: int) -> None:
    rows = [json.dumps({"text": f"row {i}"}) for i in range(1, 300)]
    rows[line - 1] = '{"text": "x", "kind": "nope"}'
    rows[5] = ""  # blank lines count as lines
    with pytest.raises(HistoryImportError) as info:
        ctx.import_history(io.StringIO("\n".join(rows)))
    assert info.value.line == line and f"line {line}:" in info.value.message
    assert ctx.status().last_seq == 0


def test_an_empty_file_is_refused(ctx: morphz.Context, tmp_path: Path) -> None:
    for text in ("", "\n\n  \n"):
        with pytest.raises(HistoryImportError, match="no observations") as info:
            ctx.import_history(io.StringIO(text))
        assert info.value.line is None
    assert ctx.status().last_seq == 0


def test_a_missing_file_is_refused(ctx: morphz.Context, tmp_path: Path) -> None:
    with pytest.raises(HistoryImportError, match=r"nope\.jsonl") as info:
        ctx.import_history(tmp_path / "nope.jsonl")
    assert info.value.line is None
    assert ctx.status().last_seq == 0


def test_a_binary_file_object_and_a_byte_order_mark(ctx: morphz.Context, tmp_path: Path) -> None:
    data = "\ufeff" + jsonl({"text": "first 部署"}, {"text": "second"})
    assert ctx.import_history(io.BytesIO(data.encode("utf-8"))).observations == 2
    path = tmp_path / "bom.jsonl"
    path.write_bytes(data.encode("utf-8"))
    assert ctx.import_history(path).observations == 2
    assert ctx.import_history(io.StringIO(data)).observations == 2
    assert [e.text for e in ctx.events()] == ["first 部署", "second"] * 3


def test_invalid_utf8_is_refused_naming_the_line(ctx: morphz.Context, tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    before = state(ctx)
    with pytest.raises(HistoryImportError) as info:
        ctx.import_history(path)
    assert info.value.line == 2 and "line 2" in info.value.message
    with pytest.raises(HistoryImportError) as info:
        ctx.import_history(io.BytesIO(b'{"text": "fine"}\n\n{"text": "\xff"}\n'))
    assert info.value.line == 3
    assert state(ctx) == before


def test_a_failure_while_writing_leaves_the_store_unchanged(
    ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All or nothing per file, also when the write fails after some batches were appended."""
    ctx.observe("user_message", "already here")
    before = state(ctx)
    monkeypatch.setattr(observe_module, "IMPORT_CHUNK", 3)
    real_append = observe_module.append
    calls = 0

    def failing_append(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError("disk full")
        return real_append(*args, **kw)

    monkeypatch.setattr(observe_module, "append", failing_append)
    lines = [{"text": f"doomed {i}"} for i in range(10)]
    with pytest.raises(OSError, match="disk full"):
        ctx.import_history(io.StringIO(jsonl(*lines)))
    assert calls == 3
    assert state(ctx) == before
    monkeypatch.setattr(observe_module, "append", real_append)
    assert ctx.import_history(io.StringIO(jsonl(*lines))).observations == 10
    assert len(ctx.recall.search("doomed", limit=100).hits) == 10


# ------------------------------------------------------------------ a large import


def test_a_large_import(ctx: morphz.Context, tmp_path: Path) -> None:
    start = datetime(2023, 1, 1, tzinfo=UTC)
    times = [start + timedelta(minutes=7 * i) for i in range(20_000)]  # Jan 1 to Apr 7
    path = tmp_path / "large.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(20_000):
            record: dict[str, Any] = {
                "text": f"turn {i}: speaker {i % 7} talks about topic{i % 100} and item{i}",
                "time": times[i].isoformat(),
                "meta": {"i": i},
            }
            if i % 3 == 0:
                record["kind"] = "tool_result"
            handle.write(json.dumps(record) + "\n")
            if i % 1000 == 0:
                handle.write("\n")
    calls: list[tuple[int, int]] = []
    report = ctx.import_history(path, session="big", progress=lambda d, t: calls.append((d, t)))
    assert report.observations == 20_000
    assert (report.first_ref, report.last_ref) == ("@e1", "@e20000")
    assert calls[-1] == (20_000, 20_000)
    status = ctx.status()
    assert status.last_seq == 20_000 and status.clock == 1
    assert status.observations["active"] == 20_000
    index = ctx.recall_index.inspect()
    assert index.current and index.event_documents == 20_000
    assert index.documents == {"user_message": 13_333, "tool_result": 6_667, "frame": 0}
    hit, after = ctx.recall.search("item12345").hits  # the next turn, by the turn before it
    assert after.ref == "@e12347" and after.score < hit.score  # type: ignore[operator]
    assert hit.ref == "@e12346" and hit.meta == {"i": 12_345} and hit.session == "big"
    assert hit.kind == "tool_result" and hit.time == times[12_345].isoformat()
    since, until = datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 3, 2, tzinfo=UTC)
    in_range = [f"@e{i + 1}" for i, t in enumerate(times) if since <= t < until]
    march: list[str] = []
    cursor = None
    while True:
        page = ctx.recall.search(since=since, until=until, limit=100, cursor=cursor)
        march.extend(h.ref for h in page.hits)  # type: ignore[misc]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert march == in_range and len(in_range) == 205
    topic = [f"@e{i + 1}" for i in range(20_000) if i % 100 == 42 and since <= times[i] < until]
    both = ctx.recall.search("topic42", since=since, until=until, limit=100)
    assert {h.ref for h in both.hits[: len(topic)]} == set(topic)  # then the turns after them
    assert all(since <= times[h.meta["i"]] < until for h in both.hits)  # type: ignore[index]
    assert len(ctx.recall.search("topic42", limit=100).hits) == 100
