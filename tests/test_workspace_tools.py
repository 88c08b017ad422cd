"""The workspace tools (list_files, search_files, read_file, write_file, edit_file) and exec:
success paths, refusals (escapes, protected paths, stale hashes), paging, output caps, timeouts
and process cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.runtime.tools.base import Tool, ToolContext, ToolError, ToolOutcome, ToolRegistry
from morphz.runtime.tools.shell import exec_tool, shell_tools
from morphz.runtime.tools.workspace import (
    edit_file_tool,
    glob_regex,
    list_files_tool,
    read_file_tool,
    search_files_tool,
    workspace_tools,
    write_file_tool,
)
from processes import gone

LIST, SEARCH, READ = list_files_tool(), search_files_tool(), read_file_tool()
WRITE, EDIT, EXEC = write_file_tool(), edit_file_tool(), exec_tool()


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("top secret\n")
    return d


@pytest.fixture
def tc(ctx: morphz.Context, ws: Path) -> ToolContext:
    protected = (ws / "morphz.db", ws / "config", Path("morphz.toml"))
    return ToolContext(ctx, "session-1", "activation-1", ws, protected)


async def call(tool: Tool, tc: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    return await tool.run(args, tc)


def run(tool: Tool, tc: ToolContext, **args: Any) -> ToolOutcome:
    return asyncio.run(call(tool, tc, args))


def refused(tool: Tool, tc: ToolContext, match: str, **args: Any) -> str:
    with pytest.raises(ToolError, match=match) as info:
        run(tool, tc, **args)
    return info.value.message


# --- schemas and arguments ----------------------------------------------------------------


def test_schemas_are_precise_and_tools_register() -> None:
    tools = workspace_tools() + shell_tools()
    names = [t.name for t in tools]
    assert names == ["list_files", "search_files", "read_file", "write_file", "edit_file", "exec"]
    required = {
        "list_files": [],
        "search_files": ["query"],
        "read_file": ["path"],
        "write_file": ["path", "content"],
        "edit_file": ["path", "old", "new", "expected_sha256"],
        "exec": ["command"],
    }
    for tool in tools:
        params = tool.schema.parameters
        assert params["type"] == "object"
        assert params["additionalProperties"] is False
        assert params["required"] == required[tool.name]
        assert set(params["required"]) <= set(params["properties"])
        assert all("type" in p and p.get("description") for p in params["properties"].values())
        assert tool.external and tool.schema.description
    registry = ToolRegistry()
    for tool in tools:
        registry.add(tool)
    assert registry.authority() == {
        "edit_file": "ask",
        "exec": "ask",
        "list_files": "allow",
        "read_file": "allow",
        "search_files": "allow",
        "write_file": "ask",
    }
    assert exec_tool(policy="allow").policy == "allow"


def test_bad_arguments_are_refused_with_a_reason(tc: ToolContext) -> None:
    refused(READ, tc, r"unknown argument\(s\) \['file'\]", file="a.txt")
    refused(READ, tc, r"missing required argument\(s\) \['path'\]")
    refused(READ, tc, "'limit' must be an integer", path="a", limit="10")
    refused(READ, tc, "'limit' must be an integer", path="a", limit=True)
    refused(READ, tc, "'limit' must be in", path="a", limit=0)
    refused(SEARCH, tc, "'query' must not be empty", query="")
    refused(SEARCH, tc, "'regex' must be a boolean", query="x", regex="yes")
    refused(WRITE, tc, "'expected_sha256' is malformed", path="a", content="", expected_sha256="x")
    refused(EXEC, tc, "'timeout_s' must be in", command="true", timeout_s=601)
    refused(EXEC, tc, "'timeout_s' must be more than 0", command="true", timeout_s=0)
    refused(EXEC, tc, "must not be blank", command="   ")
    (tc.workspace / "a").write_text("x\n")
    assert run(READ, tc, path="a", limit=10.0).data["lines"] == 1  # 10.0 is a whole number


def test_glob_regex() -> None:
    assert glob_regex("*.py").fullmatch("app.py")
    assert not glob_regex("*.py").fullmatch("src/app.py")
    assert glob_regex("src/**/*.py").fullmatch("src/app.py")
    assert glob_regex("src/**/*.py").fullmatch("src/a/b/app.py")
    assert glob_regex("file[0-9].t?t").fullmatch("file7.txt")
    assert glob_regex("[!a]*").fullmatch("b") and not glob_regex("[!a]*").fullmatch("a")
    assert glob_regex("a+b(c).md").fullmatch("a+b(c).md")


# --- paths --------------------------------------------------------------------------------


def test_paths_outside_the_workspace_are_refused(tc: ToolContext, ws: Path, outside: Path) -> None:
    (ws / "link").symlink_to(outside / "secret.txt")
    (ws / "linkdir").symlink_to(outside, target_is_directory=True)
    (ws / "dangling").symlink_to(outside / "new.txt")
    for path in ["../outside/secret.txt", str(outside / "secret.txt"), "link", "linkdir/x"]:
        refused(READ, tc, "outside the workspace", path=path)
    refused(LIST, tc, "outside the workspace", path="..")
    refused(LIST, tc, "outside the workspace", path="linkdir")
    refused(SEARCH, tc, "outside the workspace", query="secret", path="/")
    refused(WRITE, tc, "outside the workspace", path="../evil.txt", content="x")
    refused(WRITE, tc, "outside the workspace", path="dangling", content="x")
    refused(WRITE, tc, "use a path relative to the workspace", path="linkdir/new", content="x")
    refused(EDIT, tc, "outside", path="link", old="top", new="x", expected_sha256=sha("x"))
    refused(EXEC, tc, "outside the workspace", command="pwd", cwd="..")
    assert not (outside / "new.txt").exists() and not (ws.parent / "evil.txt").exists()
    assert (outside / "secret.txt").read_text() == "top secret\n"
    # an absolute path inside the workspace, and a symlink that stays inside, are fine
    (ws / "inside.txt").write_text("hello\n")
    (ws / "alias").symlink_to(ws / "inside.txt")
    assert run(READ, tc, path=str(ws / "inside.txt")).data["path"] == "inside.txt"
    assert run(READ, tc, path="alias").data["sha256"] == sha("hello\n")


def test_protected_paths_are_compared_ignoring_case(tc: ToolContext, ws: Path) -> None:
    """On a file system that ignores case (macOS, Windows) ``MORPHZ.DB`` is the store itself:
    another spelling of a protected path is refused too (where case matters, such a name is a
    different file, and refusing it is harmless)."""
    (ws / "morphz.db").write_bytes(b"SQLite format 3\0")
    (ws / "config").mkdir()
    for path in ["MORPHZ.DB", "Morphz.db-WAL", "CONFIG/models.toml", "Config/New.toml"]:
        refused(WRITE, tc, "is protected", path=path, content="x")
    assert not (ws / "MORPHZ.DB").exists()
    assert run(WRITE, tc, path="morphz.db.txt", content="x").data["path"] == "morphz.db.txt"


def test_protected_paths_are_never_written(tc: ToolContext, ws: Path) -> None:
    (ws / "morphz.db").write_bytes(b"SQLite format 3\0")
    (ws / "config").mkdir()
    (ws / "config" / "models.toml").write_text("a = 1\n")
    (ws / "morphz.toml").write_text("b = 2\n")
    (ws / "alias.db").symlink_to(ws / "morphz.db")
    for path in [
        "morphz.db",
        "morphz.db-wal",
        "morphz.db-shm",
        "config/models.toml",
        "config/new.toml",
        "morphz.toml",
        "alias.db",
        "./config/../morphz.db",
    ]:
        message = refused(WRITE, tc, "is protected", path=path, content="x")
        assert "write somewhere else" in message
    digest = sha("a = 1\n")
    refused(
        EDIT,
        tc,
        "is protected",
        path="config/models.toml",
        old="1",
        new="2",
        expected_sha256=digest,
    )
    assert (ws / "config" / "models.toml").read_text() == "a = 1\n"
    assert not (ws / "morphz.db-wal").exists()
    # reading a protected file is allowed
    assert run(READ, tc, path="morphz.toml").data["sha256"] == sha("b = 2\n")


# --- list_files ---------------------------------------------------------------------------


def make_tree(ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (ws / "README.md").write_text("# readme\n")
    (ws / "b.txt").write_text("")
    (ws / "a.txt").write_text("abc")


def test_list_files_one_level_sorted_with_types_and_sizes(tc: ToolContext, ws: Path) -> None:
    make_tree(ws)
    (ws / "link.md").symlink_to(ws / "README.md")
    out = run(LIST, tc)
    assert not out.error and out.data["truncated"] is False
    assert out.data["entries"] == [
        {"path": "README.md", "type": "file", "size": 9},
        {"path": "a.txt", "type": "file", "size": 3},
        {"path": "b.txt", "type": "file", "size": 0},
        {"path": "link.md", "type": "symlink", "size": None},
        {"path": "src", "type": "dir", "size": None},
    ]
    lines = out.text.splitlines()
    assert lines[0].startswith("5 entries in .")
    assert lines[3].split() == ["file", "0", "b.txt"]
    assert lines[5].split() == ["dir", "-", "src"]
    sub = run(LIST, tc, path="src")
    assert [e["path"] for e in sub.data["entries"]] == ["src/app.py", "src/pkg"]
    refused(LIST, tc, "nothing at 'nope'", path="nope")
    one = run(LIST, tc, path="src/app.py", pattern="*.md")  # a file lists itself
    assert one.data["entries"] == [{"path": "src/app.py", "type": "file", "size": 12}]


def test_list_files_pattern_is_recursive_and_truncates(tc: ToolContext, ws: Path) -> None:
    make_tree(ws)
    out = run(LIST, tc, pattern="*.py")
    assert [e["path"] for e in out.data["entries"]] == ["src/app.py", "src/pkg/mod.py"]
    out = run(LIST, tc, path="src", pattern="pkg/**")
    assert [e["path"] for e in out.data["entries"]] == ["src/pkg/mod.py"]
    out = run(LIST, tc, pattern="**/*.py")
    assert len(out.data["entries"]) == 2
    out = run(LIST, tc, pattern="*", max_entries=3)
    assert [e["path"] for e in out.data["entries"]] == ["README.md", "a.txt", "b.txt"]
    assert out.data["truncated"] is True
    assert "[truncated at 3 entries" in out.text


def test_list_files_does_not_enter_symlinked_directories(tc: ToolContext, ws: Path) -> None:
    make_tree(ws)
    (ws / "loop").symlink_to(ws, target_is_directory=True)
    out = run(LIST, tc, pattern="*.py")
    assert [e["path"] for e in out.data["entries"]] == ["src/app.py", "src/pkg/mod.py"]


# --- search_files -------------------------------------------------------------------------


def test_search_files_literal_regex_glob_and_order(tc: ToolContext, ws: Path) -> None:
    make_tree(ws)
    (ws / "b.txt").write_text("region = eu-west-1\nnothing\nREGION = us-east-1\n")
    (ws / "a.txt").write_text("the region (primary)\n")
    out = run(SEARCH, tc, query="region")
    assert out.text.splitlines()[1:] == [
        "a.txt:1: the region (primary)",
        "b.txt:1: region = eu-west-1",
    ]
    assert out.data["matches"][0] == {
        "path": "a.txt",
        "line": 1,
        "text": "the region (primary)",
        "column": 1,
    }
    assert len(run(SEARCH, tc, query="region", ignore_case=True).data["matches"]) == 3
    literal = run(SEARCH, tc, query="(primary)")
    assert [m["path"] for m in literal.data["matches"]] == ["a.txt"]
    regex = run(SEARCH, tc, query=r"^\w+ = [a-z]{2}-", regex=True, ignore_case=True)
    assert [(m["path"], m["line"]) for m in regex.data["matches"]] == [("b.txt", 1), ("b.txt", 3)]
    assert [m["path"] for m in run(SEARCH, tc, query="=", glob="*.py").data["matches"]] == [
        "src/pkg/mod.py"
    ]
    assert run(SEARCH, tc, query="print", path="src/app.py").data["matches"][0]["line"] == 1
    assert run(SEARCH, tc, query="absent").text == "0 matches for 'absent' in ."
    refused(SEARCH, tc, "bad regex", query="(", regex=True)
    capped = run(SEARCH, tc, query="e", max_matches=2)
    assert len(capped.data["matches"]) == 2 and capped.data["truncated"] is True
    assert "[stopped at 2 matches" in capped.text


def test_search_files_skips_binary_large_and_outside_files(
    tc: ToolContext, ws: Path, outside: Path
) -> None:
    (ws / "blob.bin").write_bytes(b"needle\0\x01\x02needle")
    (ws / "big.txt").write_bytes(b"needle\n" + b"x" * (2 * 1024 * 1024))
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    (ws / "text.txt").write_text("a needle here\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("needle\n")
    out = run(SEARCH, tc, query="needle")
    assert [m["path"] for m in out.data["matches"]] == ["text.txt"]
    assert out.data["skipped"] == {"binary": 1, "large": 1, "outside": 1}
    assert "[files skipped: 1 binary, 1 large, 1 outside" in out.text
    secret = run(SEARCH, tc, query="secret")
    assert secret.data["matches"] == [] and secret.data["skipped"]["outside"] == 1


# --- read_file ----------------------------------------------------------------------------


def test_read_file_returns_content_and_whole_file_hash(tc: ToolContext, ws: Path) -> None:
    content = "region = eu-west-1\nreplicas = 3\n"
    (ws / "conf").mkdir()
    (ws / "conf" / "prod.toml").write_text(content)
    out = run(READ, tc, path="conf/prod.toml")
    assert not out.error
    assert out.data["sha256"] == sha(content)
    assert f"sha256: {sha(content)}" in out.text
    assert out.text.splitlines()[0].startswith("conf/prod.toml · lines 1-2 of 2")
    assert out.text.endswith(content)
    assert out.data["next_offset"] is None and out.data["total_lines"] == 2
    refused(READ, tc, "nothing at 'missing.txt'", path="missing.txt")
    refused(READ, tc, "is not a file", path="conf")


def test_read_file_pages_by_lines_with_the_same_hash(tc: ToolContext, ws: Path) -> None:
    content = "".join(f"line {i}\n" for i in range(1, 11))
    (ws / "ten.txt").write_text(content)
    first = run(READ, tc, path="ten.txt", limit=4)
    assert first.text.splitlines()[1:5] == ["line 1", "line 2", "line 3", "line 4"]
    assert first.data["next_offset"] == 4 and first.data["lines"] == 4
    assert "[lines 5-10 not shown: read_file offset=4]" in first.text
    second = run(READ, tc, path="ten.txt", offset=4, limit=4)
    assert second.text.splitlines()[1:5] == ["line 5", "line 6", "line 7", "line 8"]
    last = run(READ, tc, path="ten.txt", offset=8, limit=4)
    assert last.text.splitlines()[1:] == ["line 9", "line 10"]
    assert last.data["next_offset"] is None and "lines 9-10 of 10" in last.text
    assert {p.data["sha256"] for p in (first, second, last)} == {sha(content)}
    past = run(READ, tc, path="ten.txt", offset=50)
    assert past.data["lines"] == 0 and "past the end: the file has 10 lines" in past.text


def test_read_file_pages_by_characters_and_cuts_huge_lines(tc: ToolContext, ws: Path) -> None:
    small = read_file_tool(max_chars=25)
    content = "0123456789\n" * 5 + "z" * 60 + "\nend"
    (ws / "f.txt").write_text(content)
    first = run(small, tc, path="f.txt")
    assert first.data["lines"] == 2 and first.data["next_offset"] == 2
    long = run(small, tc, path="f.txt", offset=5)
    assert long.text.splitlines()[1] == "z" * 25
    assert "[line 6 is cut at 25 characters" in long.text and long.data["next_offset"] == 6
    tail = run(small, tc, path="f.txt", offset=6)
    assert tail.text.splitlines()[1] == "end" and tail.data["total_lines"] == 7
    assert tail.data["sha256"] == first.data["sha256"] == sha(content)


def test_read_file_does_not_show_binary_files(tc: ToolContext, ws: Path) -> None:
    blob = b"\x89PNG\0\0\x01binary"
    (ws / "img.png").write_bytes(blob)
    out = run(READ, tc, path="img.png")
    assert out.data["binary"] is True and out.data["sha256"] == sha(blob)
    assert "binary file" in out.text and "PNG" not in out.text


# --- write_file and edit_file -------------------------------------------------------------


def test_write_file_creates_and_overwrites_with_a_matching_hash(tc: ToolContext, ws: Path) -> None:
    created = run(WRITE, tc, path="deploy/plan/notes.md", content="v1\n")
    assert (ws / "deploy" / "plan" / "notes.md").read_text() == "v1\n"
    assert created.data == {
        "path": "deploy/plan/notes.md",
        "sha256": sha("v1\n"),
        "size": 3,
        "action": "created",
    }
    assert "sha256: " + sha("v1\n") in created.text
    message = refused(WRITE, tc, "already exists", path="deploy/plan/notes.md", content="v2\n")
    assert "expected_sha256" in message
    stale = refused(
        WRITE,
        tc,
        "the file changed since you read it: read it again",
        path="deploy/plan/notes.md",
        content="v2\n",
        expected_sha256=sha("v0\n"),
    )
    assert "read_file" in stale
    assert (ws / "deploy" / "plan" / "notes.md").read_text() == "v1\n"
    (ws / "deploy" / "plan" / "notes.md").chmod(0o640)
    over = run(
        WRITE, tc, path="deploy/plan/notes.md", content="v2\n", expected_sha256=sha("v1\n").upper()
    )
    assert over.data["sha256"] == sha("v2\n") and over.data["action"] == "overwrote"
    assert (ws / "deploy" / "plan" / "notes.md").read_text() == "v2\n"
    assert (ws / "deploy" / "plan" / "notes.md").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (ws / "deploy" / "plan").iterdir()) == ["notes.md"]
    refused(
        WRITE,
        tc,
        "no file at 'new.txt' to overwrite",
        path="new.txt",
        content="x",
        expected_sha256=sha("x"),
    )
    assert not (ws / "new.txt").exists()
    refused(WRITE, tc, "is not a file", path="deploy", content="x")


def test_write_file_then_read_file_agree_on_the_hash(tc: ToolContext) -> None:
    content = "unicode: é ✓\r\nno final newline"
    written = run(WRITE, tc, path="u.txt", content=content)
    assert run(READ, tc, path="u.txt").data["sha256"] == written.data["sha256"]


def test_edit_file_replaces_exactly_one_occurrence(tc: ToolContext, ws: Path) -> None:
    content = "region = eu-west-1\nbackup = eu-west-1\nreplicas = 3\n"
    (ws / "prod.toml").write_text(content)
    digest = run(READ, tc, path="prod.toml").data["sha256"]
    none = refused(
        EDIT,
        tc,
        "occurs 0 times",
        path="prod.toml",
        old="us-east-1",
        new="x",
        expected_sha256=digest,
    )
    assert "copy it exactly" in none
    two = refused(
        EDIT,
        tc,
        "occurs 2 times",
        path="prod.toml",
        old="eu-west-1",
        new="x",
        expected_sha256=digest,
    )
    assert "add surrounding text" in two
    refused(
        EDIT,
        tc,
        "the file changed since you read it",
        path="prod.toml",
        old="3",
        new="5",
        expected_sha256=sha("other"),
    )
    refused(
        EDIT, tc, "nothing to change", path="prod.toml", old="3", new="3", expected_sha256=digest
    )
    refused(
        EDIT,
        tc,
        "no file at 'nope.toml'",
        path="nope.toml",
        old="a",
        new="b",
        expected_sha256=digest,
    )
    assert (ws / "prod.toml").read_text() == content
    out = run(
        EDIT,
        tc,
        path="prod.toml",
        old="region = eu-west-1",
        new="region = us-east-1",
        expected_sha256=digest,
    )
    expected = content.replace("region = eu-west-1", "region = us-east-1")
    assert (ws / "prod.toml").read_text() == expected
    assert out.data["sha256"] == sha(expected) and out.data["action"] == "edited"
    again = refused(
        EDIT,
        tc,
        "changed since you read it",
        path="prod.toml",
        old="3",
        new="4",
        expected_sha256=digest,
    )
    assert again
    run(EDIT, tc, path="prod.toml", old="= 3", new="= 4", expected_sha256=out.data["sha256"])
    assert (ws / "prod.toml").read_text().endswith("replicas = 4\n")


def test_edit_file_refuses_non_utf8(tc: ToolContext, ws: Path) -> None:
    blob = b"caf\xe9\n"
    (ws / "latin1.txt").write_bytes(blob)
    refused(
        EDIT, tc, "not UTF-8", path="latin1.txt", old="caf", new="tea", expected_sha256=sha(blob)
    )


# --- exec ---------------------------------------------------------------------------------


def test_exec_captures_output_and_exit_code(tc: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    out = run(EXEC, tc, command="echo out; echo err >&2; exit 3")
    assert not out.error
    assert out.text == "$ echo out; echo err >&2; exit 3\n[exit code 3]\nout\nerr\n"
    assert out.data["exit_code"] == 3 and out.data["timed_out"] is False
    pwd = run(EXEC, tc, command="pwd", cwd="sub")
    assert pwd.text.splitlines()[-1] == str((ws / "sub").resolve())
    assert pwd.data["cwd"] == "sub" and pwd.data["exit_code"] == 0
    refused(EXEC, tc, "is not a directory", command="pwd", cwd="missing")
    assert run(EXEC, tc, command="cat").data["exit_code"] == 0  # stdin is closed, not inherited


def test_exec_caps_output_keeping_head_and_tail(tc: ToolContext) -> None:
    capped = exec_tool(max_output_chars=1000)
    out = run(capped, tc, command="seq 1 100000")
    assert out.data["exit_code"] == 0 and out.data["output_truncated"] is True
    body = out.text.split("\n", 2)[2]
    head, marker, tail = body.partition("\n[... ")
    assert head.startswith("1\n2\n3\n") and tail.endswith("99999\n100000\n")
    assert "bytes of output omitted ...]" in marker + tail
    assert len(head) + len(tail) <= 1100
    assert out.data["output_bytes"] == len("".join(f"{i}\n" for i in range(1, 100001)))
    default = run(EXEC, tc, command="seq 1 100000")
    assert 16_000 <= len(default.text) <= 16_200
    short = run(capped, tc, command="printf 'é%.0s' $(seq 1 400)")
    assert short.data["output_truncated"] is False and short.text.endswith("é" * 400)


def test_exec_timeout_kills_the_whole_process_group(tc: ToolContext, ws: Path) -> None:
    command = "echo started; echo $$ > shell.pid; sleep 5 & echo $! > child.pid; wait"
    out = run(EXEC, tc, command=command, timeout_s=0.5)
    assert out.error and out.data["timed_out"] is True and out.data["exit_code"] is None
    assert "[timed out after 0.5 s and was killed (partial output below)]" in out.text
    assert out.text.endswith("started\n")
    for name in ("shell.pid", "child.pid"):
        assert gone(int((ws / name).read_text()))


def test_exec_leaves_no_background_process(tc: ToolContext, ws: Path) -> None:
    out = run(EXEC, tc, command="sleep 30 & echo $! > bg.pid; echo done")
    assert out.data["exit_code"] == 0 and out.text.endswith("done\n")
    assert gone(int((ws / "bg.pid").read_text()))


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
def test_exec_returns_when_an_escaped_process_holds_the_output(tc: ToolContext, ws: Path) -> None:
    """A process that left the group (setsid) holds the output open: the call still returns
    once the shell has exited (on Linux the supervisor has killed it; elsewhere it escapes the
    group's kill, and the pipe is closed after the drain)."""
    escape = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 30' &"
    wait = "while [ ! -s escaped.pid ]; do sleep 0.01; done"
    out = run(EXEC, tc, command=f"{escape} {wait}; echo done")
    assert out.data["exit_code"] == 0 and out.text.endswith("done\n")
    pid = int((ws / "escaped.pid").read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    assert gone(pid)


def test_exec_cancelled_kills_the_process(tc: ToolContext, ws: Path) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(call(EXEC, tc, {"command": "echo $$ > sh.pid; sleep 30"}))
        while not (ws / "sh.pid").exists() or not (ws / "sh.pid").read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert gone(int((ws / "sh.pid").read_text()))


def test_exec_hides_provider_keys(tc: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MORPHZ_VISIBLE", "yes")
    out = run(EXEC, tc, command='echo "[$OPENAI_API_KEY] [$MORPHZ_VISIBLE] [$EXTRA]"')
    assert out.text.endswith("[] [yes] []\n")
    extra = exec_tool(env={"EXTRA": "1"}, hidden_env=())
    assert run(extra, tc, command='echo "[$OPENAI_API_KEY] [$EXTRA]"').text.endswith(
        "[sk-secret] [1]\n"
    )
