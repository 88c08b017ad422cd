"""The fixes of reviews 17e and 17g in the library, beyond what the reviewers' tests show: a
ModelResponse checks its fields where it is made, an async FunctionModel is checked as a sync
one is, a store that exists keeps its mode, a second Database's nested write is refused on its
own thread only, and a closed store and a Context say which store and what to do."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from pathlib import Path

import pytest

import morphz
from morphz.runtime.engine import RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse, ToolCall
from morphz.runtime.models.scripted import FunctionModel


def _request() -> ModelRequest:
    return ModelRequest("(context-encoding)", ())


@pytest.mark.parametrize(
    "fields",
    [{"text": 3}, {"text": None, "tool_calls": ("call",)}, {"text": "a", "cut": None}],
)
def test_a_model_response_of_the_wrong_field_types_is_an_input_error(
    fields: dict[str, object],
) -> None:
    with pytest.raises(morphz.InputError, match=r"ModelResponse\."):
        ModelResponse(**fields)  # type: ignore[arg-type]


def test_a_model_response_takes_a_list_of_tool_calls_as_the_tuple_it_stands_for() -> None:
    call = ToolCall("1", "list_files", "{}")
    response = ModelResponse(None, [call])  # type: ignore[arg-type]
    assert response.tool_calls == (call,)


def test_an_async_function_model_returning_text_is_an_input_error() -> None:
    async def answer(request: ModelRequest) -> ModelResponse:
        return "done"  # type: ignore[return-value]  # the mistake under test

    with pytest.raises(morphz.InputError, match="must return a ModelResponse"):
        asyncio.run(FunctionModel(answer).request(_request()))


def test_an_async_function_model_returning_a_response_answers_with_it() -> None:
    async def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse("done")

    assert asyncio.run(FunctionModel(answer).request(_request())).text == "done"


def test_runtime_config_takes_any_path_like_and_refuses_a_str_of_protected_paths(
    tmp_path: Path,
) -> None:
    config = RuntimeConfig(str(tmp_path), protected_paths=[str(tmp_path / "secret")])
    assert config.workspace == tmp_path
    assert config.protected_paths == (tmp_path / "secret",)
    assert config.budget_keys == {}
    with pytest.raises(morphz.InputError, match="tuple or list of paths"):
        RuntimeConfig(tmp_path, protected_paths=str(tmp_path))


def test_a_store_and_a_folder_that_exist_keep_their_modes(tmp_path: Path) -> None:
    """Only what Morphz makes is made private: a store its owner shared stays shared."""
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o750)
    folder.chmod(0o750)
    path = folder / "m.db"
    with morphz.open(path) as db:
        db.context(create=True)
    path.chmod(0o640)
    with morphz.open(path) as db:
        db.context().observe("user_message", "hello")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750


def test_the_folders_made_for_a_new_store_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        morphz.open(tmp_path / "a" / "b" / "m.db").close()
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE((tmp_path / "a" / "b" / "m.db").stat().st_mode) == 0o600


def test_another_thread_writes_through_a_second_database_during_a_write(tmp_path: Path) -> None:
    """The record of the files being written is per thread: another thread's write through a
    second Database waits for the first write and then lands, as before."""
    history = tmp_path / "history.jsonl"
    history.write_text('{"text": "one"}\n', encoding="utf-8")
    with morphz.open(tmp_path / "m.db") as first, morphz.open(tmp_path / "m.db") as second:
        importing = first.context(create=True)
        other = second.context()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                other.observe("user_message", "from another thread")
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        def progress(done: int, total: int) -> None:
            thread = threading.Thread(target=write)
            thread.start()  # it waits for this write's lock; joined once the import is done
            threads.append(thread)

        threads: list[threading.Thread] = []
        importing.import_history(history, progress=progress)
        for thread in threads:
            thread.join()
        assert errors == []
        assert [e.text for e in importing.events()] == [
            "one",
            "from another thread",
        ]


def test_a_closed_store_says_to_open_it_again_and_a_context_names_its_store(
    tmp_path: Path,
) -> None:
    db = morphz.open(tmp_path / "m.db")
    ctx = db.context(create=True)
    assert str(tmp_path / "m.db") in repr(ctx)
    assert repr(ctx.recall) == f"Recall({ctx!r})"
    db.close()
    with pytest.raises(morphz.StoreError, match=r"open it again with morphz\.open"):
        ctx.status()
