"""Shared fixtures. Every store-backed test runs against each backend in BACKENDS (the contract
suite): today SQLite; a new backend joins by adding a factory here."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import morphz
import processes
from histories import Clock as FixedClock
from morphz.encoding.tokens import O200K_PATTERN, _tiktoken_counter

try:
    TIKTOKEN: Any = importlib.import_module("tiktoken")  # a dev dependency
except ImportError:  # pragma: no cover - the tests that need it fail and say so
    TIKTOKEN = None

BACKENDS = ["sqlite"]
pytest_plugins = ("loopback",)  # the loopback_only fixture of the provider end-to-end tests


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach the network: any attempt to connect a socket fails loudly."""

    def guard(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tests must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket, "create_connection", guard)


@pytest.fixture(autouse=True)
def _no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Token figures are estimated unless a test installs a tokenizer (``tiny_tiktoken``), so no
    test depends on whether tiktoken, or one of its encoding files, is on this machine."""
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # importing it raises ImportError
    _tiktoken_counter.cache_clear()
    yield
    _tiktoken_counter.cache_clear()


def _tiny_ranks() -> dict[bytes, int]:
    """A byte-level BPE: every byte, then the prefixes of a few words, each one merge long."""
    ranks = {bytes([i]): i for i in range(256)}
    for word in ("context", "frame", "observation", "session", "the", "mind", "pressure"):
        for end in range(2, len(word) + 1):
            ranks.setdefault(word[:end].encode(), len(ranks))
            ranks.setdefault(b" " + word[: end - 1].encode(), len(ranks))
    return ranks


@pytest.fixture
def tiny_tiktoken(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The real tiktoken, with a small BPE standing in for ``o200k_base`` (the encoding of
    gpt-4o and its family: the real file is fetched from the network, which tests never do),
    under the real encoding's pre-tokenizer pattern. Returns that encoding."""
    if TIKTOKEN is None:
        pytest.fail("tiktoken is a dev dependency: pip install -e '.[dev]'")
    ranks = _tiny_ranks()
    encoding = TIKTOKEN.Encoding(
        "o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )
    monkeypatch.setitem(sys.modules, "tiktoken", TIKTOKEN)
    monkeypatch.setitem(TIKTOKEN.registry.ENCODINGS, "o200k_base", encoding)
    _tiktoken_counter.cache_clear()
    return encoding


@pytest.fixture(params=BACKENDS)
def open_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], morphz.Database]]:
    """A factory that opens (or reopens) the same store; every opened db is closed at the end."""
    opened: list[morphz.Database] = []
    assert request.param == "sqlite"
    path = tmp_path / "morphz.db"

    def factory() -> morphz.Database:
        db = morphz.open(path, now=FixedClock())
        opened.append(db)
        return db

    yield factory
    for db in opened:
        db.close()


@pytest.fixture
def db(open_db: Callable[[], morphz.Database]) -> morphz.Database:
    return open_db()


@pytest.fixture
def ctx(db: morphz.Database) -> morphz.Context:
    return db.context("context-default", create=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A folder for an engine's file tools (test modules may have their own)."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace folder for the file tools' tests."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def mark() -> Iterator[str]:
    """A mark for one test's processes (``processes.MARK=mark`` in their environment); whatever
    still carries it is killed at the end."""
    value = uuid.uuid4().hex
    yield value
    if Path("/proc/self/environ").exists():
        for pid in processes.marked(value):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """For CLI runs: no user configuration, no MORPHZ_DB, a workspace folder ``ws``; the cwd is
    tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    return tmp_path
