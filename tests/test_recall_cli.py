"""The recall commands of the `morphz` command line (`context recall search|read|frame`,
`context recall-index inspect|rebuild`, `context import`), through click's CliRunner on a store in
tmp_path. No test touches the network or the user's home store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces import cli as cli_module
from morphz.interfaces.cli import main

HIT_KEYS = {"ref", "frame_id", "kind", "time", "score", "preview", "lifecycle", "meta"}

HISTORY = [
    {
        "text": "Prepare the deployment of the checkout service.",
        "time": "2026-08-01T09:00:00+00:00",
        "meta": {"speaker": "ana", "turn": 1},
    },
    {
        "kind": "tool_result",
        "text": "region: cn-shanghai",
        "time": "2026-08-02T09:00:00+00:00",
        "meta": {"tool": "read_config"},
    },
    {
        "kind": "external_event",
        "text": "The payment gateway reported high latency.",
        "time": "2026-08-03T09:00:00+00:00",
    },
    {"text": "我们明天部署结账服务", "time": "2026-08-04T09:00:00+08:00"},  # 01:00 UTC
]

TARGET_TX = """(context-tx (base-version 0) (reason "plan the deployment")
  (derive deployment/target-v1 (from @e1) (fact (region cn-hangzhou))))"""
SUPERSEDE_TX = """(context-tx (base-version 1) (reason "the configuration says shanghai")
  (derive deployment/target-v2 (from @e2 deployment/target-v1) (fact (region cn-shanghai)))
  (relate deployment/target-v2 supersedes deployment/target-v1))"""


class Cli:
    """Runs `morphz ARGS... --db <tmp store>` and checks the exit status."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.runner = CliRunner()

    def __call__(self, *args: str, code: int = 0, stdin: str | bytes | None = None) -> Result:
        result = self.runner.invoke(main, [*args, "--db", str(self.db)], input=stdin)
        if result.exit_code != code:
            raise AssertionError(
                f"exit {result.exit_code} != {code} for {args}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: str, code: int = 0, stdin: str | bytes | None = None) -> Any:
        return json.loads(self(*args, "--format", "json", code=code, stdin=stdin).stdout)

    def search(self, *args: str, code: int = 0) -> Any:
        return self.json("context", "recall", "search", *args, code=code)

    def snapshot(self) -> tuple[Any, Any]:
        """Status and full event list: equal before and after means nothing changed."""
        return self.json("context", "status"), self.json("context", "events")


def jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def refs(page: dict[str, Any]) -> list[str]:
    return [h["ref"] or h["frame_id"] for h in page["hits"]]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither MORPHZ_DB nor the real home directory leaks into a test."""
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    made = Cli(tmp_path / "store" / "morphz.db")
    made("context", "create")
    return made


@pytest.fixture
def history(cli: Cli, tmp_path: Path) -> Cli:
    """context-default holding HISTORY as @e1..@e4, imported from a file."""
    path = tmp_path / "history.jsonl"
    path.write_text(jsonl(HISTORY), encoding="utf-8")
    cli("context", "import", str(path))
    return cli


@pytest.fixture
def minded(history: Cli) -> Cli:
    """HISTORY plus target-v1 (from @e1), then target-v2 (from @e2 and v1) superseding v1."""
    history("context", "tx", "--file", "-", stdin=TARGET_TX)
    history("context", "tx", "--file", "-", stdin=SUPERSEDE_TX)
    return history


# ------------------------------------------------------------------ import


def test_import_json_keeps_kind_time_and_meta(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(jsonl(HISTORY), encoding="utf-8")
    report = cli.json("context", "import", str(path), "--session", "chat-1")
    assert report["ok"] is True and report["context"] == "context-default"
    assert (report["observations"], report["first"], report["last"]) == (4, "@e1", "@e4")
    events = cli.json("context", "events")
    assert [e["kind"] for e in events] == [
        "user_message",  # the default kind
        "tool_result",
        "external_event",
        "user_message",
    ]
    assert [e["time"] for e in events] == [h["time"] for h in HISTORY]
    assert events[0]["meta"] == {"speaker": "ana", "turn": 1} and events[2]["meta"] is None
    assert {e["session"] for e in events} == {"chat-1"}
    hits = cli.search("checkout deployment")["hits"]
    assert hits[0]["ref"] == "@e1" and hits[0]["meta"] == {"speaker": "ana", "turn": 1}
    assert cli.search("cn-shanghai")["hits"][0]["meta"] == {"tool": "read_config"}


def test_import_text_and_stdin(cli: Cli) -> None:
    out = cli("context", "import", "-", stdin=jsonl(HISTORY[:2])).stdout
    assert out.startswith("imported 2 observations into context-default: @e1 .. @e2")
    cli("context", "create", "ops")
    report = cli.json("context", "import", "ops", "-", stdin=jsonl(HISTORY))
    assert (report["context"], report["observations"]) == ("ops", 4)
    assert cli.json("context", "status", "ops")["last_seq"] >= 4


def test_import_bad_line_names_it_and_imports_nothing(history: Cli, tmp_path: Path) -> None:
    before = history.snapshot()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(jsonl(HISTORY[:2]) + '{"text": "unterminated\n' + jsonl(HISTORY[2:]))
    out = history.json("context", "import", str(bad), code=1)
    assert out["ok"] is False and out["error"]["code"] == "import"
    assert out["error"]["line"] == 3 and "line 3" in out["error"]["message"]
    result = history("context", "import", str(bad), code=1)
    assert result.stdout == "" and "error (import): line 3" in result.stderr
    assert history.snapshot() == before


@pytest.mark.parametrize(
    ("third_line", "fragment"),
    [
        (b'{"text": "x", "time": "2026-08-01T09:00:00"}', "no UTC offset"),
        (b'{"kind": "chat", "text": "x"}', "unknown observation kind"),
        (b'{"txt": "x"}', "unknown field"),
        (b'"just a string"', "JSON object"),
        (b'{"text": "caf\xe9"}', "not valid UTF-8"),  # latin-1, not UTF-8
    ],
)
def test_import_refusals_name_the_line(cli: Cli, third_line: bytes, fragment: str) -> None:
    before = cli.snapshot()
    data = jsonl(HISTORY[:2]).encode() + third_line + b"\n" + jsonl(HISTORY[2:]).encode()
    error = cli.json("context", "import", "-", stdin=data, code=1)["error"]
    assert (error["code"], error["line"]) == ("import", 3)
    assert fragment in error["message"]
    assert cli.snapshot() == before


def test_import_usage_and_missing_context(cli: Cli, tmp_path: Path) -> None:
    missing = cli("context", "import", str(tmp_path / "nope.jsonl"), code=2)
    assert "FILE" in missing.stderr
    assert "missing argument FILE" in cli("context", "import", code=2).stderr
    path = tmp_path / "h.jsonl"
    path.write_text(jsonl(HISTORY), encoding="utf-8")
    error = cli.json("context", "import", "ghost", str(path), code=1)["error"]
    assert error["code"] == "not-found"
    empty = cli.json("context", "import", "-", stdin="\n\n", code=1)["error"]
    assert empty["code"] == "import" and "no observations" in empty["message"]


def test_import_accepts_a_byte_order_mark(cli: Cli) -> None:
    data = b"\xef\xbb\xbf" + jsonl(HISTORY[:1]).encode()
    assert cli.json("context", "import", "-", stdin=data)["observations"] == 1


# ------------------------------------------------------------------ search


def test_search_by_words_json(history: Cli) -> None:
    page = history.search("checkout deployment")
    assert page["order"] == "relevance" and page["terms"] == ["checkout", "deployment"]
    assert page["next_cursor"] is None
    first = page["hits"][0]
    assert set(first) >= HIT_KEYS
    assert (first["ref"], first["frame_id"], first["kind"]) == ("@e1", None, "user_message")
    assert first["time"] == "2026-08-01T09:00:00+00:00" and first["lifecycle"] == "active"
    assert first["score"] > 0 and "checkout service" in first["preview"]
    scores = [h["score"] for h in page["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_search_text_table(history: Cli) -> None:
    out = history("context", "recall", "search", "payment latency").stdout
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["#", "ref/frame", "kind", "time"]
    assert "@e3" in lines[2] and "external_event" in lines[2] and "payment gateway" in lines[2]
    assert "ranked by relevance (matched: payment, latency)" in out
    assert lines[-1] == "no more results (no next cursor)"
    assert "no hits" in history("context", "recall", "search", "zebra").stdout


def test_search_cjk(history: Cli) -> None:
    assert refs(history.search("部署"))[0] == "@e4"


def test_search_by_time_range(history: Cli) -> None:
    page = history.search("--since", "2026-08-02T09:00:00+00:00", "--until", "2026-08-04T01:00Z")
    assert page["order"] == "time" and refs(page) == ["@e2", "@e3"]  # until is exclusive
    assert all(h["score"] is None for h in page["hits"])
    since = history.search("--since", "2026-08-03T17:00:00+08:00")  # = 09:00 UTC: inclusive
    assert refs(since) == ["@e3", "@e4"]
    both = history.search("deployment service", "--since", "2026-08-02T00:00:00Z")
    assert "@e1" not in refs(both)
    text = history("context", "recall", "search", "--until", "2026-08-02T00:00:00Z").stdout
    assert "1 hit, in time order" in text and "@e1" in text


def test_search_in_a_named_context(history: Cli) -> None:
    history("context", "create", "ops")
    history("context", "import", "ops", "-", stdin=jsonl(HISTORY[2:3]))
    assert refs(history.search("ops", "payment")) == ["@e1"]
    assert refs(history.search("ops", "", "--since", "2026-01-01T00:00:00Z")) == ["@e1"]
    assert "@e3" in refs(history.search("payment"))  # one argument is the query
    too_many = history("context", "recall", "search", "ops", "payment", "gateway", code=2)
    assert "quote QUERY" in too_many.stderr


def test_search_filters_by_kind_and_lifecycle(minded: Cli) -> None:
    assert refs(minded.search("region", "--kind", "tool_result")) == ["@e2"]
    frames = minded.search("region", "--kind", "frames")
    assert {h["kind"] for h in frames["hits"]} == {"frame"}
    assert set(refs(frames)) == {"deployment/target-v1", "deployment/target-v2"}
    assert frames["hits"][0]["ref"] is None and frames["hits"][0]["meta"]["sources"]
    mixed = minded.search("region", "--kind", "frames", "--kind", "observations")
    assert "@e2" in refs(mixed) and "deployment/target-v2" in refs(mixed)
    retire = """(context-tx (base-version 2) (reason "superseded")
      (retire deployment/target-v1) (retire @e1))"""
    minded("context", "tx", "--file", "-", stdin=retire)
    retiring = minded.search("region", "--lifecycle", "retiring")
    assert refs(retiring) == ["deployment/target-v1"]
    retired = minded.search("checkout", "--lifecycle", "retired")
    assert refs(retired) == ["@e1"] and retired["hits"][0]["lifecycle"] == "retired"
    assert minded("context", "recall", "search", "x", "--kind", "chat", code=2).exit_code == 2


def test_search_refusals(history: Cli) -> None:
    naive = history.search("--since", "2026-08-01T00:00:00", code=1)["error"]
    assert naive["code"] == "input" and "UTC offset" in naive["message"]
    result = history("context", "recall", "search", "x", "--until", "2026-08-01T00:00:00", code=1)
    assert result.stdout == "" and result.stderr.startswith("error (input)")
    assert history.search(code=1)["error"]["code"] == "input"  # neither query nor time range
    assert history.search("deployment", "--limit", "0", code=1)["error"]["code"] == "input"
    assert history.search("deployment", "--limit", "101", code=1)["error"]["code"] == "input"
    backwards = history.search(
        "--since", "2026-08-02T00:00Z", "--until", "2026-08-01T00:00Z", code=1
    )
    assert backwards["error"]["code"] == "input"
    assert history.search("ghost", "x", code=1)["error"]["code"] == "not-found"


def _tamper(cursor: str) -> str:
    body, mac = cursor.split(".")
    flipped = "A" if body[5] != "A" else "B"
    return f"{body[:5]}{flipped}{body[6:]}.{mac}"


def test_search_tampered_or_foreign_cursor_is_refused(history: Cli) -> None:
    page = history.search("--since", "2026-08-01T00:00Z", "--limit", "1")
    cursor = page["next_cursor"]
    assert cursor
    base = ("--since", "2026-08-01T00:00Z", "--limit", "1")
    error = history.search(*base, "--cursor", _tamper(cursor), code=1)["error"]
    assert error["code"] == "cursor" and "cursor" in error["message"]
    other = history.search(
        "--since", "2026-08-02T00:00Z", "--limit", "1", "--cursor", cursor, code=1
    )
    assert other["error"]["code"] == "cursor"
    garbage = history.search(*base, "--cursor", "not-a-cursor", code=1)["error"]
    assert garbage["code"] == "cursor"
    text = history("context", "recall", "search", *base, "--cursor", _tamper(cursor), code=1)
    assert text.stderr.startswith("error (cursor)")


def _all_pages(cli: Cli, *args: str) -> list[list[str]]:
    pages = []
    cursor: str | None = None
    while True:
        extra = ("--cursor", cursor) if cursor else ()
        page = cli.search(*args, *extra)
        pages.append(refs(page))
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        # events arriving between pages do not shift or duplicate what follows
        cli("context", "observe", "--kind", "user_message", "--text", "alpha arrives late")


@pytest.mark.parametrize(
    "args",
    [("alpha", "--limit", "10"), ("--since", "2026-09-01T00:00:00Z", "--limit", "10")],
    ids=["ranked", "chronological"],
)
def test_search_paging_returns_the_rest_without_duplicates(cli: Cli, args: tuple[str, ...]) -> None:
    records = [
        {"text": f"alpha report number {i}", "time": f"2026-09-01T{i:02}:00:00+00:00"}
        for i in range(23)
    ]
    cli("context", "import", "-", stdin=jsonl(records))
    pages = _all_pages(cli, *args)
    assert [len(p) for p in pages] == [10, 10, 3]
    seen = [ref for page in pages for ref in page]
    assert len(seen) == len(set(seen)) == 23
    assert set(seen) == {f"@e{i}" for i in range(1, 24)}  # the late arrivals are not included
    if "--since" in args:
        assert seen == [f"@e{i}" for i in range(1, 24)]  # in time order
    text = cli("context", "recall", "search", *args).stdout
    assert "10 hits" in text and "next cursor: " in text


# ------------------------------------------------------------------ read


def test_read_paging_json_and_text(cli: Cli) -> None:
    long = "".join(f"line {i:04} of a long tool output\n" for i in range(300))
    cli("context", "import", "-", stdin=jsonl([{"kind": "tool_result", "text": long}]))
    total = len(long)
    chunks, offset = [], 0
    offsets = []
    while offset is not None:
        page = cli.json(
            "context", "recall", "read", "@e1", "--offset", str(offset), "--limit", "4000"
        )
        assert page["ref"] == "@e1" and page["identity"] == "context-default:@e1"
        assert page["total_chars"] == total and page["offset"] == offset
        offsets.append(offset)
        chunks.append(page["text"])
        offset = page["next_offset"]
    assert offsets == list(range(0, total, 4000)) and "".join(chunks) == long
    out = cli("context", "recall", "read", "@e1", "--offset", "4000", "--limit", "100").stdout
    footer = out.rstrip("\n").rsplit("\n", 1)[1]
    assert out == long[4000:4100] + "\n" + footer + "\n"  # the text, then the footer line
    assert footer.startswith("--- context-default:@e1 tool_result")
    assert "offset 4000" in footer and f"total_chars {total}" in footer
    assert footer.endswith("next_offset 4100")
    end = cli("context", "recall", "read", "@e1", "--offset", str(total - 5)).stdout
    assert end.rstrip("\n").endswith("next_offset none")


def test_read_by_context_and_identity(history: Cli) -> None:
    page = history.json("context", "recall", "read", "context-default", "context-default:@e2")
    assert page["text"] == "region: cn-shanghai" and page["meta"] == {"tool": "read_config"}
    assert page["next_offset"] is None and page["kind"] == "tool_result"


def test_read_refusals(history: Cli) -> None:
    assert history.json("context", "recall", "read", "@e99", code=1)["error"]["code"] == "not-found"
    assert history.json("context", "recall", "read", "e1", code=1)["error"]["code"] == "input"
    foreign = history.json("context", "recall", "read", "other:@e1", code=1)["error"]
    assert foreign["code"] == "input"
    past = history.json("context", "recall", "read", "@e1", "--offset", "999", code=1)
    assert past["error"]["code"] == "input"
    assert "missing argument REF" in history("context", "recall", "read", code=2).stderr


# ------------------------------------------------------------------ frame traversal


def test_frame_ancestors_with_events_and_bodies(minded: Cli) -> None:
    page = minded.json(
        "context",
        "recall",
        "frame",
        "deployment/target-v2",
        "--include-events",
        "--include-bodies",
    )
    assert (page["root"], page["direction"], page["depth"]) == (
        "deployment/target-v2",
        "ancestors",
        2,
    )
    nodes = {n["id"]: n for n in page["nodes"]}
    assert list(nodes) == ["deployment/target-v2", "@e2", "deployment/target-v1", "@e1"]
    assert nodes["deployment/target-v1"]["depth"] == 1 and nodes["@e1"]["depth"] == 2
    assert nodes["deployment/target-v1"]["body"] == "(fact (region cn-hangzhou))"
    assert nodes["@e1"]["type"] == "event" and "checkout" in nodes["@e1"]["preview"]
    labels = {(link["from"], link["label"], link["to"]) for link in page["links"]}
    assert ("deployment/target-v2", "supersedes", "deployment/target-v1") in labels
    assert page["next_cursor"] is None
    plain = minded.json("context", "recall", "frame", "deployment/target-v2")
    assert [n["id"] for n in plain["nodes"]] == ["deployment/target-v2", "deployment/target-v1"]
    assert "body" not in plain["nodes"][0]


def test_frame_descendants_and_both(minded: Cli) -> None:
    down = minded.json(
        "context", "recall", "frame", "deployment/target-v1", "--direction", "descendants"
    )
    assert [n["id"] for n in down["nodes"]] == ["deployment/target-v1", "deployment/target-v2"]
    assert down["nodes"][1]["via"] == {
        "from": "deployment/target-v2",
        "to": "deployment/target-v1",
        "label": "source",
    }
    both = minded.json(
        "context",
        "recall",
        "frame",
        "context-default",
        "deployment/target-v1",
        "--direction",
        "both",
        "--depth",
        "1",
        "--include-events",
    )
    assert {n["id"] for n in both["nodes"]} == {
        "deployment/target-v1",
        "deployment/target-v2",
        "@e1",
    }


def test_frame_text(minded: Cli) -> None:
    out = minded(
        "context", "recall", "frame", "deployment/target-v2", "--include-events", "--include-bodies"
    ).stdout
    assert out.startswith("traversal from deployment/target-v2: ancestors, depth 2")
    assert "Nodes\n" in out and "Links\n" in out
    assert "deployment/target-v2 -source-> @e2" in out
    assert "supersedes" in out and "(fact (region cn-shanghai))" in out
    assert out.rstrip().endswith("no more nodes (no next cursor)")


def test_frame_paging_and_cursor_pinned_to_the_mind(minded: Cli) -> None:
    args = ("context", "recall", "frame", "deployment/target-v2", "--include-events")
    first = minded.json(*args, "--budget", "3")
    assert len(first["nodes"]) == 3 and first["next_cursor"]
    rest = minded.json(*args, "--budget", "3", "--cursor", first["next_cursor"])
    ids = [n["id"] for n in first["nodes"] + rest["nodes"]]
    assert ids == ["deployment/target-v2", "@e2", "deployment/target-v1", "@e1"]
    assert rest["next_cursor"] is None
    assert "next cursor: " in minded(*args, "--budget", "3").stdout
    minded(
        "context",
        "tx",
        "--file",
        "-",
        stdin='(context-tx (base-version 2) (reason "note") (create notes/x (a)))',
    )
    stale = minded.json(*args, "--budget", "3", "--cursor", first["next_cursor"], code=1)
    assert stale["error"]["code"] == "cursor" and "mind changed" in stale["error"]["message"]
    tampered = minded.json(
        *args, "--budget", "3", "--cursor", _tamper(first["next_cursor"]), code=1
    )
    assert tampered["error"]["code"] == "cursor"


def test_frame_refusals(minded: Cli) -> None:
    ghost = minded.json("context", "recall", "frame", "nothing/here", code=1)["error"]
    assert ghost["code"] == "not-found"
    deep = minded.json("context", "recall", "frame", "deployment/target-v1", "--depth", "5", code=1)
    assert deep["error"]["code"] == "input"
    assert minded("context", "recall", "frame", "x", "--direction", "up", code=2).exit_code == 2


def test_operator_reads_change_nothing(minded: Cli) -> None:
    before = minded.snapshot()
    minded.search("region")
    minded.search("--since", "2026-08-01T00:00:00Z")
    minded.json("context", "recall", "read", "@e1")
    minded.json("context", "recall", "frame", "deployment/target-v2", "--include-events")
    minded.json("context", "recall-index", "inspect")
    assert minded.snapshot() == before
    assert all(e["kind"] != "recall_result" for e in before[1])


# ------------------------------------------------------------------ recall-index


def _documents(cli: Cli) -> list[tuple[str, str, str]]:
    with morphz.open(cli.db, create=False) as db:
        return db.context().recall_index.documents()


def test_index_inspect_json_and_text(minded: Cli) -> None:
    report = minded.json("context", "recall-index", "inspect")
    assert report["current"] is True and report["context"] == "context-default"
    assert report["last_event"] == report["last_indexed_event"] == 6
    assert report["documents"]["user_message"] == 2 and report["documents"]["frame"] == 2
    assert (report["frames"], report["frame_documents"]) == (2, 2)
    text = minded("context", "recall-index", "inspect").stdout
    assert "current             yes" in text and "last indexed event  6" in text
    assert "user_message 2" in text


def test_index_rebuild_keeps_the_documents(minded: Cli) -> None:
    before = _documents(minded)
    assert before
    result = minded("context", "recall-index", "rebuild", "--format", "json")
    assert result.stderr == ""  # no progress when stderr is not a terminal
    report = json.loads(result.stdout)
    assert report["current"] is True and report["last_indexed_event"] == 6
    assert _documents(minded) == before
    text = minded("context", "recall-index", "rebuild").stdout
    assert text.startswith("rebuilt the recall index of context-default")
    assert "current             yes" in text
    assert _documents(minded) == before
    assert refs(minded.search("checkout deployment"))[0] == "@e1"


def test_index_of_a_missing_context(cli: Cli) -> None:
    error = cli.json("context", "recall-index", "rebuild", "ghost", code=1)["error"]
    assert error["code"] == "not-found"


def test_progress_only_on_a_terminal(minded: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_module, "stderr_is_terminal", lambda: True)
    rebuilt = minded("context", "recall-index", "rebuild", "--format", "json")
    assert "rebuild: 6/6 events indexed" in rebuilt.stderr
    assert rebuilt.stderr.count("\n") == 1  # one line, redrawn; ended once
    assert json.loads(rebuilt.stdout)["current"] is True  # stdout stays clean JSON
    imported = minded("context", "import", "-", "--format", "json", stdin=jsonl(HISTORY))
    assert "import: 4/4 observations written" in imported.stderr
    assert json.loads(imported.stdout)["observations"] == 4


# ------------------------------------------------------------------ help


@pytest.mark.parametrize(
    "path",
    [
        ("context", "recall", "search"),
        ("context", "recall", "read"),
        ("context", "recall", "frame"),
        ("context", "recall-index", "inspect"),
        ("context", "recall-index", "rebuild"),
        ("context", "import"),
    ],
)
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0 and "--db" in result.stdout and "--format" in result.stdout
