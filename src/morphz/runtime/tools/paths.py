"""Paths and content in the workspace, for the file tools (:mod:`.workspace`) and exec.

Every path argument is relative to the workspace (an absolute path is accepted only when it lies
inside it). Paths are resolved through symlinks; anything that lands outside the workspace is
refused, and so are writes to a protected path (``ToolContext.protected_paths``, relative ones
taken from the workspace: the store's files and the configuration). A protected directory
protects everything in it; a protected file also protects its ``-wal``, ``-shm`` and ``-journal``
companions.

Content hashes are the SHA-256 of the file's bytes. Walking lists entries in sorted pre-order and
never enters a symlinked directory; globs are matched without unbounded backtracking. The size
caps bound what one search or read looks at. Writes are whole or nothing: an overwrite replaces
the file with a complete temporary one, a creation links one into place.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.scanlines import BINARY_PROBE, is_binary  # (the search child's)

SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
SEARCH_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
READ_MAX_CHARS = 20_000  # one read_file page at most
HASH_CHUNK = 1 << 20  # bytes read at a time to hash a file


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
    """A glob as a regex to ``fullmatch`` a relative path: ``*``, ``?`` and ``[...]`` stay
    within a path segment; a ``**`` segment spans any number of segments (a trailing one at
    least one); ``**`` within a segment is ``*``. The regex never backtracks without limit:
    each run of a star and what follows it up to the next star is an atomic group matched at
    its earliest place, which is where a glob match can always put it (fnmatch's translation
    does the same), so a match takes at most (path length x pattern length) steps."""
    try:
        return re.compile(_path_regex(pattern), re.S)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ToolError(f"the glob {pattern!r} is not a valid pattern ({exc}): fix it") from None


def _path_regex(pattern: str) -> str:
    chunks: list[list[str]] = [[]]  # the segments' regexes between '**' segments
    for seg in pattern.split("/"):
        if seg != "**":
            chunks[-1].append(_segment(seg))
        elif chunks[-1] or len(chunks) == 1:  # a run of '**' segments is one
            chunks.append([])
    body = "/".join(chunks[0])
    if len(chunks) > 1:  # the first chunk at the start, each middle one at its earliest place
        head, *middle, last = chunks
        body += "/" if head else ""
        body += "".join(f"(?>(?:[^/]*/)*?{'/'.join(chunk)}/)" for chunk in middle)
        body += f"(?:[^/]*/)*{'/'.join(last)}" if last else ".+"
    return body


def _segment(glob: str) -> str:
    """The regex of one segment of a glob (no '/' in it): literals, ``?``, ``[...]`` (``[!...]``
    or ``[^...]`` negated) and stars, with each star but the last and what follows it atomic."""
    chunks: list[list[str]] = [[]]  # the atoms between runs of stars
    i = 0
    while i < len(glob):
        c, end = glob[i], glob.find("]", i + 2)
        if c == "*":
            if chunks[-1] or len(chunks) == 1:
                chunks.append([])
        elif c == "?":
            chunks[-1].append("[^/]")
        elif c == "[" and end != -1:
            chunks[-1].append(_char_class(glob[i + 1 : end]))
            i = end
        else:
            chunks[-1].append(re.escape(c))
        i += 1
    texts = ["".join(chunk) for chunk in chunks]
    if len(texts) == 1:
        return texts[0]
    middle = "".join(f"(?>[^/]*?{text})" for text in texts[1:-1])
    return f"{texts[0]}{middle}[^/]*{texts[-1]}"


def _char_class(body: str) -> str:
    """A glob's ``[...]`` as a regex class of one character that is never '/'; its backslashes
    and brackets are literal, and so are the characters of set operations."""
    negated = body[0] in "!^"
    body = body[1:] if negated else body
    if not body:
        raise re.error("'[!]' is a set of no characters")
    escaped = "".join(f"\\{c}" if c in "\\[]&~|" else c for c in body)
    return f"[^/{escaped}]" if negated else f"[{escaped}]"


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


def walk(
    top: Path,
    recursive: bool,
    skip: frozenset[str] = frozenset(),
    until: Callable[[], bool] | None = None,
) -> Iterator[Path]:
    """Paths under ``top`` in sorted pre-order; symlinked directories are not entered. The
    walk ends early once ``until()`` is true (looked at before each entry)."""
    stack = [iter(scan(str(top)))]
    while stack and not (until is not None and until()):
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
        elif not (entry.name in skip and entry.is_dir(follow_symlinks=False)):
            yield Path(entry.path)
            if recursive and entry.is_dir(follow_symlinks=False):
                stack.append(iter(scan(entry.path)))


def select(
    top: Path,
    pattern: str | None,
    recursive: bool,
    skip: frozenset[str],
    until: Callable[[], bool] | None = None,
) -> Iterator[Path]:
    if not top.is_dir():
        return iter([top])
    matches = matcher(pattern)
    walked = walk(top, recursive, skip, until)
    return (p for p in walked if matches(p.relative_to(top).as_posix()))


# --- content: hashes, pages, atomic writes ------------------------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    _require(sha256_hex(current), expected)
    return current


def verify_hash(real: Path, expected: str) -> None:
    """:func:`check_hash` for a caller that does not need the content: hashed in chunks, so a
    large file is never held in memory."""
    h = hashlib.sha256()
    with real.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    _require(h.hexdigest(), expected)


def _require(digest: str, expected: str) -> None:
    if digest != expected.lower():
        raise ToolError(
            "the file changed since you read it: read it again with read_file and use the "
            "sha256 it reports"
        )


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


def create_atomic(real: Path, data: bytes) -> None:
    """Create ``real`` holding ``data``, whole or not at all: written to a temporary file beside
    it (created as an ordinary new file is, the umask applied), then hard-linked into place,
    which fails when something is there already (created meanwhile: never clobbered). A write
    that fails part-way (a full disk, a file size limit) leaves nothing behind. On a file system
    without hard links the file is created in place and removed again if its write fails."""
    tmp = _new_temp(real.parent)
    try:
        with tmp.open("wb") as f:
            f.write(data)
        try:
            os.link(tmp, real)
        except OSError as exc:
            if isinstance(exc, FileExistsError) or exc.errno not in _NO_HARD_LINKS:
                raise
            _create_in_place(real, data)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def _new_temp(folder: Path) -> Path:
    """A new empty file in ``folder`` with a short random name, its mode as a new file's."""
    for _ in range(100):
        tmp = folder / f".morphz-{secrets.token_hex(8)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise ToolError(f"cannot create a temporary file in {folder}: clean up its .morphz-* files")


def _create_in_place(real: Path, data: bytes) -> None:
    with real.open("xb") as f:  # exclusive: ours alone, so ours to remove if the write fails
        try:
            f.write(data)
        except BaseException:
            real.unlink()
            raise


__all__ = [
    "BINARY_PROBE",
    "READ_MAX_CHARS",
    "SEARCH_MAX_FILE_BYTES",
    "SEARCH_SKIPPED_DIRS",
    "check_hash",
    "check_writable",
    "create_atomic",
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
    "verify_hash",
    "walk",
]
