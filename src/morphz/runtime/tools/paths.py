"""Paths and content in the workspace, for the file tools (:mod:`.workspace`) and exec.

Every path argument is relative to the workspace (an absolute path is accepted only when it lies
inside it). Paths are resolved through symlinks; anything that lands outside the workspace is
refused, and so are writes to a protected path (``ToolContext.protected_paths``, relative ones
taken from the workspace: the store's files and the configuration). A protected directory
protects everything in it; a protected file also protects its ``-wal``, ``-shm`` and ``-journal``
companions.

Content hashes are the SHA-256 of the file's bytes. Walking lists entries in sorted pre-order and
never enters a symlinked directory; globs are matched without unbounded backtracking. The size
caps bound what one search or read looks at, and a read or hash stops once the activation is
cancelled. Writes are whole or nothing: an overwrite replaces the file with a complete temporary
one (flushed to the disk first), a creation links one into place, and then the folder is flushed
to the disk too, so that the rename or link survives a power loss; a process killed meanwhile
leaves a ``.morphz-*.tmp`` file beside the target, which is unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from morphz.runtime.tools.base import ToolContext, ToolError
from morphz.runtime.tools.scanlines import BINARY_PROBE, is_binary  # (the search child's)

SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024
SEARCH_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
READ_MAX_CHARS = 20_000  # one read_file page at most
HASH_CHUNK = 1 << 20  # bytes read at a time to hash a file
# read_file hashes and counts the lines of files up to this size on every page, and edit_file
# edits them; a larger file is read page by page without (only as far as the page) and is
# changed with exec
HASH_MAX_BYTES = 256 << 20


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


# what a result whose text shows a path as a JSON string says of it, once
QUOTED_NOTE = (
    'a path in "double quotes" is written as a JSON string (it holds control characters or '
    "begins with a quote): give it as a path argument as written"
)


# what a result says when a path it shows is not UTF-8 (a Latin-1 archive's names): Python
# gives such a byte as a lone surrogate, \udcXX, which no tool argument can hold
NOT_UTF8_NOTE = (
    "a name holding \\udcXX has a byte that is not UTF-8 there: the file tools cannot take it "
    "as a path; reach it with exec (a glob such as caf?.txt, or rename it)"
)


def not_utf8(path: str) -> bool:
    """Whether ``path`` holds a byte the file system gave that is not UTF-8 (a surrogate escape,
    U+DC80-U+DCFF, which a tool's arguments refuse)."""
    return any("\udc80" <= c <= "\udcff" for c in path)


def shown_path(path: str) -> str:
    """``path`` as a tool's text shows it: as it is, or, when it holds a character that is not
    printable (a line break, an escape, a format character such as a bidi override, a line
    separator) or starts with a double quote, as a JSON string literal (``"a\\nb.txt"``),
    which keeps it on one line and, written as a path argument's value, names it again."""
    if path.isprintable() and not path.startswith('"'):
        return path
    body = "".join(c if c.isprintable() and c not in '"\\' else _escaped(c) for c in path)
    return f'"{body}"'


def _escaped(char: str) -> str:
    return json.dumps(char)[1:-1]  # \n, \", \\, \u001b; a surrogate pair beyond U+FFFF


def check_writable(tc: ToolContext, resolved: Path, path: str) -> None:
    """Refuse a write to a protected path (or into a protected folder). A name is compared as a
    file system that ignores case and Unicode normalization (macOS, Windows) would see it:
    there ``MORPHZ.DB``, or ``café.db`` spelled with a combining accent, is the store, and
    resolving a path does not give it the spelling on disk. Where names are exact bytes this
    refuses a few names that differ from a protected one only so, which is harmless. A path
    that exists is also refused when it, or a folder it is in, is a protected one on the disk
    (the same device and inode), whatever its spelling."""
    root = tc.workspace.resolve()
    target = _folded(resolved)
    on_disk = _identities(resolved, root)
    for p in tc.protected_paths:
        guarded_path = (root / p).resolve()
        guarded = _folded(guarded_path)
        companions = [PurePosixPath(f"{guarded}{s}") for s in ("-wal", "-shm", "-journal")]
        if (
            target.is_relative_to(guarded)
            or target in companions
            or _identity(guarded_path) in on_disk
        ):
            raise ToolError(
                f"path {path!r} is protected (the store's files and the configuration are not "
                "writable by tools); write somewhere else in the workspace"
            )


def _folded(path: Path) -> PurePosixPath:
    """``path`` as a file system that ignores case and Unicode normalization compares it."""
    return PurePosixPath(unicodedata.normalize("NFD", path.as_posix()).casefold())


def _identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of what is at ``path``; None when nothing is there."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _identities(resolved: Path, root: Path) -> set[tuple[int, int] | None]:
    """The (device, inode) of ``resolved`` and of each folder it is in below ``root``, those
    that exist (never None: a protected path that does not exist matches nothing here)."""
    found: set[tuple[int, int] | None] = set()
    for path in (resolved, *resolved.parents):
        if path == root or not path.is_relative_to(root):
            break
        if (identity := _identity(path)) is not None:
            found.add(identity)
    return found


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
    """A glob's ``[...]`` as a regex class of one character that is never '/' (as in a shell's
    and git's globs: a range such as ``[ -~]`` holds '/' but does not match it); its
    backslashes and brackets are literal, and so are the characters of set operations."""
    negated = body[0] in "!^"
    body = body[1:] if negated else body
    if not body:
        raise re.error("'[!]' is a set of no characters")
    escaped = "".join(f"\\{c}" if c in "\\[]&~|" else c for c in body)
    return f"[^/{escaped}]" if negated else f"(?!/)[{escaped}]"


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


@dataclass(frozen=True, slots=True)
class Page:
    """One read_file page of a file: the whole file's sha256 and line count (None for a file
    over :data:`HASH_MAX_BYTES`, which is neither hashed nor read past the page, unless the page
    lies past its end), the page's lines, the offset to go on with, whether its one line was
    cut, and whether the file is binary (no page then)."""

    sha256: str | None
    size: int
    total: int | None
    lines: list[str]
    next_offset: int | None
    cut: bool
    binary: bool


def read_page(
    real: Path, offset: int, limit: int, max_chars: int, until: Callable[[], bool] | None = None
) -> Page:
    """The page of ``real`` from line ``offset``: the file is read in chunks (hashed, its lines
    counted at the speed of ``bytes.count``) to the page's start, and to its end unless it is
    over :data:`HASH_MAX_BYTES`; then the page is read line by line. ``until()`` is looked at
    before each chunk: once true, a ToolError stops the read."""
    with real.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        binary = is_binary(f.read(BINARY_PROBE))
        whole = size <= HASH_MAX_BYTES
        if binary and not whole:
            return Page(None, size, None, [], None, False, True)
        f.seek(0)
        spot = _locate(f, None if binary else offset, whole, until)
        ended = spot.end or (spot.start is not None and spot.start >= size)  # read to its end
        total = spot.lines if ended else None
        if binary or spot.start is None:
            return Page(spot.digest, size, total, [], None, False, binary)
        f.seek(spot.start)
        lines, next_offset, cut = _page_lines(f, offset, limit, max_chars)
    if total is not None and next_offset is not None and next_offset >= total:
        next_offset = None
    return Page(spot.digest, size, total, lines, next_offset, cut, False)


@dataclass(frozen=True, slots=True)
class _Spot:
    start: int | None  # the byte where the line asked for starts (None: past the end)
    digest: str | None  # the whole file's sha256 (None: not read whole)
    lines: int  # lines counted (all of them when ``end``)
    end: bool  # the file was read to its end


def _locate(
    f: BinaryIO, offset: int | None, whole: bool, until: Callable[[], bool] | None
) -> _Spot:
    """Where line ``offset`` starts, reading chunks from the start: to the end (hashing them)
    when ``whole``, else only to that line. Lines are split at \\n, a last one without it
    counted."""
    h = hashlib.sha256() if whole else None
    pos = newlines = 0
    start = 0 if offset == 0 else None
    last = b""
    while True:
        stop_if(until)
        chunk = f.read(HASH_CHUNK)
        if not chunk:
            break
        if h is not None:
            h.update(chunk)
        count = chunk.count(b"\n")
        if start is None and offset is not None and newlines + count >= offset:
            at = -1
            for _ in range(offset - newlines):
                at = chunk.index(b"\n", at + 1)
            start = pos + at + 1
        pos, newlines, last = pos + len(chunk), newlines + count, chunk[-1:]
        if not whole and start is not None:
            return _Spot(start, None, newlines, False)
    lines = newlines + (last not in (b"", b"\n"))
    return _Spot(start, None if h is None else h.hexdigest(), lines, True)


def _page_lines(
    f: BinaryIO, offset: int, limit: int, max_chars: int
) -> tuple[list[str], int | None, bool]:
    """The page's lines from the file's position (the start of line ``offset``), the offset to
    go on with (None: the file ended), and whether its one line, longer than a page, was cut
    (read no further than ``4 * max_chars + 4`` bytes)."""
    cap = 4 * max_chars + 4
    page: list[str] = []
    chars, number = 0, offset
    while raw := f.readline(cap):
        line = raw.decode("utf-8", "replace")
        if len(page) == limit or (page and chars + len(line) > max_chars):
            return page, number, False
        if len(line) > max_chars:  # alone on its page, cut; what follows it is another page
            more = f.read(1) != b""  # (or the rest of a line cut at ``cap``: a large file's)
            return [line[:max_chars] + "\n"], number + 1 if more else None, True
        page.append(line)
        chars += len(line)
        number += 1
    return page, None, False


def stop_if(until: Callable[[], bool] | None) -> None:
    """A ToolError once ``until()`` is true: the activation was cancelled, the work stops."""
    if until is not None and until():
        raise ToolError("stopped: the activation was cancelled; nothing was changed")


def check_hash(real: Path, expected: str) -> bytes:
    """The content of ``real``, refused unless its sha256 is ``expected`` (the content-hash
    precondition of every change). It holds the file whole: a caller checks the hash first
    with :func:`verify_hash`, so that a refused call costs no more than a chunk."""
    current = real.read_bytes()
    _require(sha256_hex(current), expected)
    return current


def verify_hash(real: Path, expected: str, until: Callable[[], bool] | None = None) -> None:
    """:func:`check_hash` for a caller that does not need the content: hashed in chunks, so a
    large file is never held in memory; ``until()`` is looked at before each chunk."""
    h = hashlib.sha256()
    with real.open("rb") as f:
        while True:
            stop_if(until)
            if not (chunk := f.read(HASH_CHUNK)):
                break
            h.update(chunk)
    _require(h.hexdigest(), expected)


def _require(digest: str, expected: str) -> None:
    if digest != expected.lower():
        raise ToolError(
            "the file changed since you read it: read it again with read_file and use the "
            "sha256 it reports"
        )


def replace_atomic(real: Path, data: bytes) -> None:
    """Atomic overwrite that keeps the file's mode: the new content is written to a temporary
    file beside it and flushed to the disk before it replaces the file, so that after a power
    loss the file holds the old content or the new, never a part; then the folder is flushed,
    so that the replacement itself is on the disk. A process killed meanwhile leaves the
    temporary file (``.morphz-*.tmp``) and the old content."""
    # a short name of its own: the target's name plus a prefix could pass the 255-byte limit
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=".morphz-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_durably(f, data)
        shutil.copymode(real, tmp)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_folder(real.parent)


def create_atomic(real: Path, data: bytes) -> None:
    """Create ``real`` holding ``data``, whole or not at all: written to a temporary file beside
    it (created as an ordinary new file is, the umask applied), then hard-linked into place,
    which fails when something is there already (created meanwhile: never clobbered). A write
    that fails part-way (a full disk, a file size limit) leaves nothing behind. On a file system
    without hard links the file is created in place and removed again if its write fails. The
    folder is flushed to the disk last (the link and the temporary name's removal with it)."""
    tmp = _new_temp(real.parent)
    try:
        with tmp.open("wb") as f:
            _write_durably(f, data)
        try:
            os.link(tmp, real)
        except OSError as exc:
            if isinstance(exc, FileExistsError) or exc.errno not in _NO_HARD_LINKS:
                raise
            _create_in_place(real, data)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    sync_folder(real.parent)


def _write_durably(f: BinaryIO, data: bytes) -> None:
    """``data`` written to ``f`` and flushed to the disk (before the file is renamed or linked
    into place, so that a power loss cannot leave the new name with partial content)."""
    f.write(data)
    f.flush()
    try:
        os.fsync(f.fileno())
    except OSError as exc:  # a file system that cannot sync (some FUSE and network ones)
        if exc.errno not in _NO_SYNC:
            raise


# what fsync says where the file system cannot sync: the write stands without it
_NO_SYNC = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


# what opening a folder or its fsync says where a folder cannot be synced (Windows cannot open
# one; some file systems refuse it; a folder one may write in but not read): the write stands
_NO_FOLDER_SYNC = _NO_SYNC | {errno.EBADF, errno.EACCES}


def sync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries to the disk, after a file was renamed, linked or created in
    it: without this, a power loss can undo the rename (the file then holds its old content, or
    a new one is missing). Where a folder cannot be opened or synced the change stands without
    it; another failure (an I/O error) is a ToolError that says the change was made."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno in _NO_FOLDER_SYNC:
            return
        raise _unsynced(exc) from None
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _NO_FOLDER_SYNC:
            raise _unsynced(exc) from None
    finally:
        os.close(fd)


def _unsynced(exc: OSError) -> ToolError:
    return ToolError(
        f"the change was made, but its folder could not be flushed to the disk "
        f"({exc.strerror or exc}), so a power loss could still undo it: check the disk, then "
        "read or list what you changed to see what it holds"
    )


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
            _write_durably(f, data)
        except BaseException:
            real.unlink()
            raise


__all__ = [
    "BINARY_PROBE",
    "HASH_MAX_BYTES",
    "QUOTED_NOTE",
    "READ_MAX_CHARS",
    "SEARCH_MAX_FILE_BYTES",
    "SEARCH_SKIPPED_DIRS",
    "Page",
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
    "shown_path",
    "stop_if",
    "sync_folder",
    "verify_hash",
    "walk",
]
