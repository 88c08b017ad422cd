"""Paths and content in the workspace, for the file tools (:mod:`.workspace`) and exec.

Every path argument is relative to the workspace (an absolute path is accepted only when it lies
inside it). Paths are resolved through symlinks; anything that lands outside the workspace is
refused, and so are writes to a protected path (``ToolContext.protected_paths``, relative ones
taken from the workspace: the store's files and the configuration). A protected directory
protects everything in it; a protected file also protects its ``-wal``, ``-shm`` and ``-journal``
companions.

Content hashes are the SHA-256 of the file's bytes. Walking lists entries in sorted pre-order and
never enters a symlinked directory. The size caps bound what one search or read looks at.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from morphz.runtime.tools.base import ToolContext, ToolError

SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
SEARCH_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
READ_MAX_CHARS = 20_000  # one read_file page at most
BINARY_PROBE = 8192  # a NUL byte in the first 8 KiB marks a binary file


# --- resolving and guarding ---------------------------------------------------------------


def resolve_path(tc: ToolContext, path: str) -> Path:
    """The real path of ``path`` (relative to the workspace); refused unless it is inside."""
    root = tc.workspace.resolve()
    try:
        resolved = (root / path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ToolError(f"cannot resolve path {path!r}: {exc}") from None
    if not resolved.is_relative_to(root):
        raise ToolError(
            f"path {path!r} is outside the workspace (symlinks are followed); "
            "use a path relative to the workspace root, e.g. 'src/app.py'"
        )
    return resolved


def relative(tc: ToolContext, resolved: Path) -> str:
    return resolved.relative_to(tc.workspace.resolve()).as_posix()


def check_writable(tc: ToolContext, resolved: Path, path: str) -> None:
    root = tc.workspace.resolve()
    for p in tc.protected_paths:
        guarded = (root / p).resolve()
        companions = [Path(f"{guarded}{suffix}") for suffix in ("-wal", "-shm", "-journal")]
        if resolved.is_relative_to(guarded) or resolved in companions:
            raise ToolError(
                f"path {path!r} is protected (the store's files and the configuration are not "
                "writable by tools); write somewhere else in the workspace"
            )


def existing(tc: ToolContext, path: str) -> Path:
    """The real path of ``path`` in the workspace; refused when nothing is there."""
    real = resolve_path(tc, path)
    if not real.exists():
        raise ToolError(f"nothing at {path!r}; use list_files to see what exists")
    return real


# --- walking ------------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex: ``*``, ``?`` and ``[...]`` stay within a path segment, ``**`` spans."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c, end = pattern[i], pattern.find("]", i + 2)
        if pattern.startswith("**", i):
            slash = pattern.startswith("**/", i)
            out.append("(?:.*/)?" if slash else ".*")
            i += 3 if slash else 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and end != -1:
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error as exc:
        raise ToolError(f"the glob {pattern!r} is not a valid pattern ({exc}): fix it") from None


def matcher(pattern: str | None) -> Callable[[str], bool]:
    """Without '/' a glob matches the name at any depth; with '/' the whole relative path."""
    if pattern is None:
        return lambda rel: True
    rx = glob_regex(pattern)
    if "/" in pattern:
        return lambda rel: rx.fullmatch(rel) is not None
    return lambda rel: rx.fullmatch(rel.rsplit("/", 1)[-1]) is not None


def scan(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def walk(top: Path, recursive: bool, skip: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Paths under ``top`` in sorted pre-order; symlinked directories are not entered."""
    stack = [iter(scan(str(top)))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
        elif not (entry.name in skip and entry.is_dir(follow_symlinks=False)):
            yield Path(entry.path)
            if recursive and entry.is_dir(follow_symlinks=False):
                stack.append(iter(scan(entry.path)))


def select(top: Path, pattern: str | None, recursive: bool, skip: frozenset[str]) -> Iterator[Path]:
    if not top.is_dir():
        return iter([top])
    matches = matcher(pattern)
    return (p for p in walk(top, recursive, skip) if matches(p.relative_to(top).as_posix()))


# --- content: hashes, pages, atomic writes ------------------------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_binary(head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is binary (a NUL in the probe)."""
    return b"\0" in head[:BINARY_PROBE]


def read_page(
    real: Path, offset: int, limit: int, max_chars: int
) -> tuple[str, int, int, list[str], int | None, bool, bool]:
    """One pass: hash, size and line count of the whole file, the page, the next offset, whether
    a line longer than a page was cut, and whether the file is binary (no page then)."""
    h, size, total, chars = hashlib.sha256(), 0, 0, 0
    page: list[str] = []
    next_offset: int | None = None
    cut = False
    with real.open("rb") as f:
        binary = is_binary(f.read(BINARY_PROBE))
        f.seek(0)
        cap = 4 * max_chars + 4  # bytes: a line longer than this is cut, and never read whole
        while raw := f.readline(cap):
            h.update(raw)
            size += len(raw)
            rest = raw
            while not rest.endswith(b"\n") and (rest := f.readline(cap)):  # the rest of a long line
                h.update(rest)
                size += len(rest)
            if not binary and total >= offset and next_offset is None:
                line = raw.decode("utf-8", "replace")
                if len(page) == limit or (page and chars + len(line) > max_chars):
                    next_offset = total
                elif len(line) > max_chars:
                    page, cut, next_offset = [line[:max_chars] + "\n"], True, total + 1
                else:
                    page.append(line)
                    chars += len(line)
            total += 1
    next_offset = next_offset if next_offset is not None and next_offset < total else None
    return h.hexdigest(), size, total, page, next_offset, cut, binary


def check_hash(real: Path, expected: str) -> bytes:
    """The content of ``real``, refused unless its sha256 is ``expected`` (the content-hash
    precondition of every change)."""
    current = real.read_bytes()
    if sha256_hex(current) != expected.lower():
        raise ToolError(
            "the file changed since you read it: read it again with read_file and use the "
            "sha256 it reports"
        )
    return current


def replace_atomic(real: Path, data: bytes) -> None:
    """Atomic overwrite that keeps the file's mode."""
    # a short name of its own: the target's name plus a prefix could pass the 255-byte limit
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=".morphz-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        shutil.copymode(real, tmp)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = [
    "BINARY_PROBE",
    "READ_MAX_CHARS",
    "SEARCH_MAX_FILE_BYTES",
    "SEARCH_SKIPPED_DIRS",
    "check_hash",
    "check_writable",
    "existing",
    "glob_regex",
    "is_binary",
    "matcher",
    "read_page",
    "relative",
    "replace_atomic",
    "resolve_path",
    "scan",
    "select",
    "sha256_hex",
    "walk",
]
