"""Shared fixtures. Every store-backed test runs against each backend in BACKENDS (the contract
suite): today SQLite; a new backend joins by adding a factory here."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import morphz
from histories import Clock as FixedClock

BACKENDS = ["sqlite"]
pytest_plugins = ("loopback",)  # the loopback_only fixture of the provider end-to-end tests


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach the network: any attempt to connect a socket fails loudly."""

    def guard(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tests must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket, "create_connection", guard)


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
