"""File tools for work in a workspace folder: list_files, search_files, read_file, write_file,
edit_file.

Paths are resolved and guarded by :mod:`.paths`: every path argument is relative to the
workspace, anything that lands outside it (symlinks followed) is refused, and so are writes to a
protected path (the store's files and the configuration).

Content hashes are the SHA-256 of the file's bytes. ``read_file`` pages by lines and reports the
hash of the whole file on every page; ``write_file`` overwrites and ``edit_file`` edits only when
the caller passes the hash of the current content, so an agent never overwrites a change it has
not seen. Arguments are checked against each tool's JSON Schema before it runs.
"""

from __future__ import annotations

import math
import re
import shlex
import stat
import threading
from collections.abc import Callable, Iterator
from itertools import islice, takewhile
from pathlib import Path
from typing import Any

from morphz.runtime.models.base import ToolSchema
from morphz.runtime.tools.base import (
    ArgumentError,
    Policy,
    Tool,
    ToolContext,
    ToolError,
    ToolOutcome,
)
from morphz.runtime.tools.linesearch import literal_search, notes, regex_search
from morphz.runtime.tools.paths import (
    HASH_MAX_BYTES,
    NOT_UTF8_NOTE,
    QUOTED_NOTE,
    READ_MAX_CHARS,
    SEARCH_MAX_FILE_BYTES,
    SEARCH_SKIPPED_DIRS,
    Page,
    check_hash,
    check_writable,
    create_atomic,
    existing,
    glob_regex,
    not_utf8,
    read_page,
    relative,
    replace_atomic,
    resolve_path,
    select,
    sha256_hex,
    shown_path,
    sync_folder,
    verify_hash,
)
from morphz.txlang.sexpr import unicode_problem

_WRITE_LOCK = threading.Lock()  # hash check and write are one step within this process
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
_SHA = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}

SyncFn = Callable[[dict[str, Any], ToolContext], ToolOutcome]


# --- schemas and arguments (shared with the shell tool) -----------------------------------


def prop(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


def params(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema object: these properties, these required, nothing else."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _of_type(value: Any, spec: dict[str, Any]) -> bool:
    """Whether ``value`` has the JSON type of ``spec`` (a boolean is not an integer; an array's
    items have the type its ``items`` names)."""
    kind, items = spec["type"], spec.get("items", {}).get("type")
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, _TYPES[kind]):
        return False
    return items is None or (
        isinstance(value, list) and all(isinstance(item, _TYPES[items]) for item in value)
    )


def _kind(spec: dict[str, Any]) -> str:
    items = spec.get("items", {}).get("type")
    if items is not None:
        return f"an array of {items}s"
    return f"{'an' if spec['type'] == 'integer' else 'a'} {spec['type']}"


def parse_args(tool: str, args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Check ``args`` against a :func:`params` schema; every property is in the result (its
    default, or None when it has none)."""
    props: dict[str, dict[str, Any]] = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ArgumentError(f"{tool}: unknown argument(s) {unknown}; it takes {sorted(props)}")
    missing = [name for name in schema["required"] if args.get(name) is None]
    if missing:  # null is no value (strict function calling sends every argument, as null)
        raise ArgumentError(f"{tool}: missing required argument(s) {missing} (null counts as none)")
    out: dict[str, Any] = {}
    for name, spec in props.items():
        value = args.get(name)
        if value is None:  # absent or null: the default
            value = spec.get("default")
        kind = spec["type"]
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ArgumentError(f"{tool}: argument {name!r} must be a finite number, not {value}")
        if isinstance(value, str) and (problem := unicode_problem(value)) is not None:
            raise ArgumentError(f"{tool}: argument {name!r}: {problem[1]}")
        if value is not None and not _of_type(value, spec):
            raise ArgumentError(
                f"{tool}: argument {name!r} must be {_kind(spec)}, not {value!r:.60}"
            )
        if value is not None and "enum" in spec and value not in spec["enum"]:
            raise ArgumentError(f"{tool}: argument {name!r} must be one of {spec['enum']}")
        choices = spec.get("items", {}).get("enum")
        if isinstance(value, list) and choices is not None and not set(value) <= set(choices):
            raise ArgumentError(f"{tool}: argument {name!r} takes items from {choices}")
        lo, hi, above = spec.get("minimum"), spec.get("maximum"), spec.get("exclusiveMinimum")
        if value is not None and kind in ("integer", "number"):
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise ArgumentError(
                    f"{tool}: argument {name!r} must be in [{lo}, {hi}], not {value}"
                )
            if above is not None and value <= above:
                raise ArgumentError(f"{tool}: argument {name!r} must be more than {above}")
        if isinstance(value, str) and len(value) < spec.get("minLength", 0):
            raise ArgumentError(f"{tool}: argument {name!r} must not be empty")
        if isinstance(value, str) and not re.fullmatch(spec.get("pattern", ".*"), value, re.S):
            raise ArgumentError(f"{tool}: argument {name!r} is malformed: {spec['description']}")
        out[name] = value
    return out


def _tool(name: str, description: str, schema: dict[str, Any], policy: Policy, fn: SyncFn) -> Tool:
    """A tool whose (blocking) work runs in a thread, so the event loop stays free."""

    def check(args: dict[str, Any]) -> dict[str, Any]:
        return parse_args(name, args, schema)

    async def run(args: dict[str, Any], tc: ToolContext) -> ToolOutcome:
        parsed = check(args)
        try:
            return await tc.in_thread(fn, parsed, tc)
        except OSError as exc:
            raise ToolError(f"{name} {args.get('path', '.')!r}: {exc.strerror or exc}") from None

    return Tool(ToolSchema(name, description, schema), run, policy, check=check)


# --- list_files ---------------------------------------------------------------------------

_LIST_DOC = (
    "List the workspace: entries sorted by path with type (file, dir, symlink, other) and size "
    "in bytes. Without a pattern lists one directory; with a glob pattern lists matching entries "
    "at any depth ('*.py' matches names, 'src/**/test_*.py' paths below `path`)."
)
_LIST = params(
    [],
    path=prop("string", "Directory (or file) relative to the workspace.", default="."),
    pattern=prop("string", "Glob; lists recursively."),
    max_entries=prop("integer", "Most entries to list.", minimum=1, maximum=5000, default=200),
)


def _describe(p: Path, root: Path) -> dict[str, Any]:
    kind = "symlink" if p.is_symlink() else "dir" if p.is_dir() else "file"
    kind = "other" if kind == "file" and not p.is_file() else kind
    size = p.lstat().st_size if kind == "file" else None
    return {"path": p.relative_to(root).as_posix(), "type": kind, "size": size}


def _list(a: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    top, limit, pattern = existing(tc, a["path"]), a["max_entries"], a["pattern"]
    picked = list(islice(select(top, pattern, pattern is not None, frozenset()), limit + 1))
    root = tc.workspace.resolve()
    entries = [_describe(p, root) for p in picked[:limit]]
    truncated = len(picked) > limit
    where = shown_path(relative(tc, top)) + (f" matching {pattern!r}" if pattern else "")
    rows = [
        f"{e['type']:<7} {'-' if e['size'] is None else e['size']:>10}  {shown_path(e['path'])}"
        for e in entries
    ]
    note = _notes(where, [e["path"] for e in entries], "; {}")
    lines = [f"{len(entries)} entries in {where} (type, size in bytes, path{note}):", *rows]
    if truncated:
        lines.append(
            f"[truncated at {limit} entries; narrow path or pattern, or raise max_entries]"
        )
    data = {"path": relative(tc, top), "entries": entries, "truncated": truncated}
    return ToolOutcome("\n".join(lines), data=data)


def list_files_tool(policy: Policy = "allow") -> Tool:
    return _tool("list_files", _LIST_DOC, _LIST, policy, _list)


# --- search_files -------------------------------------------------------------------------

_SEARCH_DOC = (  # its limits (long lines, time) are said in a result when they apply
    "Search the text files of the workspace for a literal string (a Python regex with "
    "regex=true); returns `path:line: text` in path order. Binary files, files over 2 MB and "
    ".git/.hg/.svn folders are skipped."
)
_SEARCH = params(
    ["query"],
    query=prop("string", "Text to find within a line.", minLength=1),
    regex=prop("boolean", "Treat query as a regular expression.", default=False),
    ignore_case=prop("boolean", "Match regardless of case.", default=False),
    path=prop("string", "File or directory to search.", default="."),
    glob=prop("string", "Only files matching this glob, e.g. '*.py'."),
    max_matches=prop("integer", "Most matches to return.", minimum=1, maximum=2000, default=100),
)


def _searchable(
    tc: ToolContext, top: Path, glob: str | None, skipped: dict[str, int], done: threading.Event
) -> Iterator[tuple[str, str]]:
    """The files to search under ``top``, as (path shown, real path), until ``done`` or the
    activation's cancellation is set (the walk looks before each entry, so a glob that matches
    nothing in a large tree stops too); those linking outside the workspace or over the size
    cap are counted in ``skipped``. A bad glob is refused at once, not when the files are first
    asked for."""

    def until() -> bool:
        return done.is_set() or tc.cancelled.is_set()

    return _checked(tc, select(top, glob, True, SEARCH_SKIPPED_DIRS, until), skipped)


def _checked(
    tc: ToolContext, found: Iterator[Path], skipped: dict[str, int]
) -> Iterator[tuple[str, str]]:
    root = tc.workspace.resolve()
    for f in found:
        try:  # top is resolved and no symlinked folder is entered: only a symlink moves
            real = f.resolve() if f.is_symlink() else f
            info = real.stat()
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if not real.is_relative_to(root):
            skipped["outside"] += 1
        elif info.st_size > SEARCH_MAX_FILE_BYTES:
            skipped["large"] += 1
        else:
            yield relative(tc, f), str(real)


def _search(a: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    query, limit, top = a["query"], a["max_matches"], existing(tc, a["path"])
    skipped = {"binary": 0, "large": 0, "outside": 0}
    done = threading.Event()  # a regex search's child has answered: walk no further
    files = _searchable(tc, top, a["glob"], skipped, done)
    if a["regex"]:  # in a child process: a regex that backtracks for ever can be stopped there
        found = regex_search(
            query, a["ignore_case"], files, limit, done=done, cancelled=tc.cancelled
        )
    else:
        found = literal_search(query, a["ignore_case"], files, limit, until=tc.cancelled.is_set)
    skipped["binary"] = found.binary
    matches = [{"path": p, "line": n, "text": t, "column": c} for p, n, t, c in found.matches]
    truncated = found.stop is not None
    where = shown_path(relative(tc, top))
    note = _notes(where, [m["path"] for m in matches], " ({})")
    lines = [f"{len(matches)} matches for {query!r} in {where}{note}"]
    lines += [_match_line(m) for m in matches]
    if found.stop == "limit":
        lines.append(f"[stopped at {limit} matches; narrow path or glob, or raise max_matches]")
    lines += notes(found)
    if said := ", ".join(f"{n} {k}" for k, n in skipped.items() if n):
        lines.append(f"[files skipped: {said} (binary, over 2 MB, or linking outside)]")
    data = {"matches": matches, "truncated": truncated, "skipped": skipped}
    data["lines_cut"] = found.lines_cut
    return ToolOutcome("\n".join(lines), data=data)


def _match_line(m: dict[str, Any]) -> str:
    """``path:line: text``; text that starts past the line's head (a match far into a long
    line) says so: ``…`` and the column it starts at."""
    column = m["column"]
    where = "" if column == 1 else f"[from column {column}] …"
    return f"{shown_path(m['path'])}:{m['line']}: {where}{m['text']}"


def _notes(where: str, paths: list[str], form: str) -> str:
    """What a result adds, in ``form``, when it shows ``where`` (as shown: a path the model gave,
    valid Unicode) or one of ``paths`` as a JSON string, and when one of them is not UTF-8."""
    notes = []
    if where.startswith('"') or any(shown_path(p) != p for p in paths):
        notes.append(QUOTED_NOTE)
    if any(not_utf8(p) for p in paths):
        notes.append(NOT_UTF8_NOTE)
    return form.format("; ".join(notes)) if notes else ""


def search_files_tool(policy: Policy = "allow") -> Tool:
    return _tool("search_files", _SEARCH_DOC, _SEARCH, policy, _search)


# --- read_file ----------------------------------------------------------------------------

_READ_DOC = (
    "Read a text file of the workspace, paged by lines: `offset` lines are skipped (0 starts at "
    "line 1), at most `limit` lines and {max_chars} characters are returned, and the page says "
    "the offset to continue with. Every page reports the sha256 of the whole file: pass it to "
    "write_file or edit_file to change the file."
)
_READ = params(
    ["path"],
    path=prop("string", "File relative to the workspace."),
    offset=prop("integer", "Lines to skip.", minimum=0, default=0),
    limit=prop("integer", "Most lines to return.", minimum=1, maximum=5000, default=500),
)


def _reader(max_chars: int) -> SyncFn:
    def read(a: dict[str, Any], tc: ToolContext) -> ToolOutcome:
        path, offset = a["path"], a["offset"]
        real = existing(tc, path)
        if not real.is_file():
            raise ToolError(f"{path!r} is not a file; use list_files to see what is in it")
        page = read_page(real, offset, a["limit"], max_chars, tc.cancelled.is_set)
        rel, digest, total, lines = relative(tc, real), page.sha256, page.total, page.lines
        data: dict[str, Any] = {"path": rel, "sha256": digest, "size": page.size, "offset": offset}
        data |= {"lines": len(lines), "total_lines": total, "next_offset": page.next_offset}
        head = f"{page.size} bytes · sha256: {digest}" if digest else _large(page.size, total)
        if page.binary:
            shown = head.replace(" · ", ", not shown · ", 1) if digest else f"not shown · {head}"
            return ToolOutcome(
                f"{shown_path(rel)} · binary file, {shown}", data={**data, "binary": True}
            )
        span = f"lines {offset + 1}-{offset + len(lines)}" if lines else "no lines"
        whole = "" if total is None else f" of {total}"
        out = [f"{shown_path(rel)} · {span}{whole} · {head}", "".join(lines)]
        if page.cut:
            out.append(f"[line {offset + 1} is cut at {max_chars} characters; see it with exec]")
        out += _read_notes(page, offset, rel)
        if len(out) > 2 and out[1] and not out[1].endswith("\n"):
            out[1] += "\n"
        return ToolOutcome(out[0] + "\n" + out[1] + "\n".join(out[2:]), data=data)

    return read


def _large(size: int, total: int | None) -> str:
    """The head of a page of a file over HASH_MAX_BYTES (its lines are counted only when the
    page reached its end)."""
    missing = "no sha256" if total is not None else "no line count and no sha256"
    return (
        f"{size} bytes, over {HASH_MAX_BYTES >> 20} MiB: {missing} "
        "(write_file and edit_file do not change it; exec does)"
    )


def _read_notes(page: Page, offset: int, rel: str) -> list[str]:
    """What a page says about the lines after it, or an offset past the end."""
    going_on, total = page.next_offset, page.total
    if going_on is not None and total is not None:
        return [f"[lines {going_on + 1}-{total} not shown: read_file offset={going_on}]"]
    if going_on is not None:
        return [
            f"[more lines follow: read_file offset={going_on}; the file's end: exec "
            f"'tail -n 100 {shlex.quote(rel)}']"
        ]
    if total is not None and offset >= total > 0:
        return [f"[offset {offset} is past the end: the file has {total} lines]"]
    return []


def read_file_tool(policy: Policy = "allow", max_chars: int = READ_MAX_CHARS) -> Tool:
    doc = _READ_DOC.format(max_chars=max_chars)
    return _tool("read_file", doc, _READ, policy, _reader(max_chars))


# --- write_file and edit_file -------------------------------------------------------------

_WRITE_DOC = (
    "Create a file (omit expected_sha256; missing folders are created) or overwrite one "
    "(expected_sha256 = the sha256 read_file reported for its current content). Returns the new "
    "sha256."
)
_WRITE = params(
    ["path", "content"],
    path=prop("string", "File relative to the workspace."),
    content=prop("string", "The whole new content."),
    expected_sha256=_SHA | {"description": "64 hex digits: the sha256 read_file reported."},
)
_EDIT_DOC = (
    "Replace the one occurrence of `old` with `new` in a file; expected_sha256 is the sha256 "
    "read_file reported for its current content. Returns the new sha256."
)
_EDIT = params(
    ["path", "old", "new", "expected_sha256"],
    path=prop("string", "File relative to the workspace."),
    old=prop("string", "Exact text to replace; it must occur exactly once.", minLength=1),
    new=prop("string", "Replacement text."),
    expected_sha256=_SHA | {"description": "64 hex digits: the sha256 read_file reported."},
)


def _target(a: dict[str, Any], tc: ToolContext) -> Path:
    real = resolve_path(tc, a["path"])
    check_writable(tc, real, a["path"])
    if real.exists() and not real.is_file():
        raise ToolError(f"{a['path']!r} is not a file; give the path of a file")
    if real.exists() and not real.stat().st_mode & _WRITE_BITS:
        # its mode, not os.access: to root every file is writable
        raise ToolError(
            f"{a['path']!r} is read-only (its permissions let no one write it): someone "
            "protected it; leave it as it is, or ask the person to make it writable"
        )
    folder = next((p for p in real.parents if p.exists()), None)  # where it is written
    if folder is not None and folder.is_dir() and not folder.stat().st_mode & _WRITE_BITS:
        raise ToolError(
            f"{relative(tc, folder) or '.'!r} is a read-only folder (its permissions let no one "
            f"write in it), so {a['path']!r} cannot be written: someone protected it; leave it "
            "as it is, or ask the person to make it writable"
        )
    return real


def _folder_for(tc: ToolContext, real: Path, path: str) -> list[Path]:
    """Create the missing folders above ``real`` (the outermost first in the list returned: to
    be flushed to the disk once the file is written, each in the folder that holds it); refused
    where one of them is a file."""
    missing = list(takewhile(lambda p: not p.exists(), real.parents))
    above = real.parents[len(missing)] if len(missing) < len(real.parents) else None
    if above is not None and not above.is_dir():
        raise ToolError(
            f"{relative(tc, above)!r} is a file, not a folder: {path!r} cannot be created "
            "below it; choose another path"
        )
    real.parent.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def _written(tc: ToolContext, real: Path, data: bytes, action: str) -> ToolOutcome:
    digest, rel = sha256_hex(data), relative(tc, real)
    return ToolOutcome(
        f"{action} {shown_path(rel)} ({len(data)} bytes) · sha256: {digest}",
        data={"path": rel, "sha256": digest, "size": len(data), "action": action},
    )


def _write(a: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    real, data, expected = _target(a, tc), a["content"].encode("utf-8"), a["expected_sha256"]
    with _WRITE_LOCK:
        if real.exists():
            if expected is None:
                msg = "read it and pass its sha256 as expected_sha256 to overwrite it"
                raise ToolError(f"{a['path']!r} already exists; {msg}")
            verify_hash(real, expected, tc.cancelled.is_set)
            replace_atomic(real, data)
            return _written(tc, real, data, "overwrote")
        if expected is not None:
            msg = "omit expected_sha256 to create it, or check the path with list_files"
            raise ToolError(f"no file at {a['path']!r} to overwrite; {msg}")
        made = _folder_for(tc, real, a["path"])
        create_atomic(real, data)  # whole or not at all; never clobbers a file made meanwhile
        for folder in made:  # after the file: a failure to flush one says the change was made
            sync_folder(folder.parent)
        return _written(tc, real, data, "created")


def _edit(a: dict[str, Any], tc: ToolContext) -> ToolOutcome:
    real, old, new = _target(a, tc), a["old"], a["new"]
    if old == new:
        raise ToolError("old and new are the same; nothing to change")
    with _WRITE_LOCK:
        if not real.is_file():
            raise ToolError(f"no file at {a['path']!r}; create it with write_file")
        if real.stat().st_size > HASH_MAX_BYTES:
            raise ToolError(
                f"{a['path']!r} is over {HASH_MAX_BYTES >> 20} MiB, too large for edit_file "
                "(it would hold it whole in memory); change it with exec (sed, a script)"
            )
        verify_hash(real, a["expected_sha256"], tc.cancelled.is_set)  # in chunks, before loading
        try:
            text = check_hash(real, a["expected_sha256"]).decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{a['path']!r} is not UTF-8 text; change it with exec") from None
        if (count := text.count(old)) != 1:
            hint = "copy it exactly from read_file" if count == 0 else "add surrounding text"
            raise ToolError(f"old text occurs {count} times, not exactly once; {hint}")
        data = text.replace(old, new, 1).encode("utf-8")
        replace_atomic(real, data)
        return _written(tc, real, data, "edited")


def write_file_tool(policy: Policy = "ask") -> Tool:
    return _tool("write_file", _WRITE_DOC, _WRITE, policy, _write)


def edit_file_tool(policy: Policy = "ask") -> Tool:
    return _tool("edit_file", _EDIT_DOC, _EDIT, policy, _edit)


def workspace_tools() -> list[Tool]:
    """The file tools with their default policies: reading allowed, writing asks."""
    return [
        list_files_tool(),
        search_files_tool(),
        read_file_tool(),
        write_file_tool(),
        edit_file_tool(),
    ]


__all__ = [  # with the path helpers that lived here before paths.py (imported from here)
    "READ_MAX_CHARS",
    "SEARCH_MAX_FILE_BYTES",
    "SEARCH_SKIPPED_DIRS",
    "check_writable",
    "edit_file_tool",
    "glob_regex",
    "list_files_tool",
    "params",
    "parse_args",
    "prop",
    "read_file_tool",
    "relative",
    "resolve_path",
    "search_files_tool",
    "workspace_tools",
    "write_file_tool",
]
