"""The fixes of review 13's API findings beyond the reviewer's tests: the smaller refusals and
what a Database says of itself."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import morphz
from morphz.errors import InputError, StoreError
from morphz.runtime.engine import RuntimeConfig


def test_a_closed_database_says_so_and_refuses_with(tmp_path: Path) -> None:
    db = morphz.open(tmp_path / "r.db")
    assert repr(db) == f"Database('{(tmp_path / 'r.db').absolute()}')"
    db.close()
    assert repr(db).endswith(", closed)")
    with pytest.raises(StoreError, match="closed"), db:
        pass


def test_a_clock_that_is_not_callable_is_refused_at_open(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="now"):
        morphz.open(tmp_path / "c.db", now="2026-01-01T00:00:00Z")  # type: ignore[arg-type]
    assert not (tmp_path / "c.db").exists()


@pytest.mark.parametrize(
    "keywords",
    [
        {"max_output_tokens": -1},
        {"max_output_tokens": 0},
        {"budget_keys": 5},
        {"approver": True},
        {"delta": "yes"},
        {"protected_paths": "secrets"},
        {"profile": 3},
    ],
)
def test_runtime_config_fields_of_the_wrong_type_are_refused(
    workspace: Path, keywords: dict[str, Any]
) -> None:
    with pytest.raises(InputError, match=next(iter(keywords))):
        RuntimeConfig(workspace, **keywords)


def test_runtime_config_takes_path_likes_as_paths(workspace: Path) -> None:
    config = RuntimeConfig(str(workspace), protected_paths=[".env"])  # type: ignore[arg-type]
    assert config.workspace == workspace
    assert config.protected_paths == (Path(".env"),)


def test_a_calibration_of_a_model_not_named_by_text_is_refused(ctx: morphz.Context) -> None:
    with pytest.raises(InputError, match="model"):
        ctx.calibration(None)  # type: ignore[arg-type]


def test_a_read_the_store_closes_under_raises_and_its_reader_is_closed(tmp_path: Path) -> None:
    """A read in progress on one thread when another closes the store ends on its own
    connection, which its thread then closes; the read's result is refused."""
    db = morphz.open(tmp_path / "t.db")
    ctx = db.context("c", create=True)
    ctx.observe("user_message", "hello")
    inside, closed = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            with db.store.read("c"):
                inside.set()
                assert closed.wait(60)
            outcome.append(None)
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    assert inside.wait(60)
    db.close()
    closed.set()
    thread.join(60)
    (result,) = outcome
    assert isinstance(result, StoreError) and "closed" in str(result)
    assert db.store._readers == []  # type: ignore[attr-defined]
