"""Review 17e: Morphz embedded in a real program, as its README and docstrings describe it.

Checked and sound (no test here): one Context and one Database shared by eight threads
observing, committing, encoding, searching and reading at once (audit clean, only typed errors);
three Databases on one path in one process, from nine threads; eight processes creating and
writing one store at once; a Database used from a forked multiprocessing pool; every Context,
Recall, RecallIndex and Database call after ``close()`` (a StoreError each); store paths with
spaces, non-ASCII, ``?``, ``#``, ``%41``, an emoji and undecodable bytes; the README's Python
blocks (the first as written; the second with its illustrative ``@e42``); mypy --strict on the
README's calls; ``Engine.run`` with a FunctionModel from ``asyncio.run`` (delivered), one Engine
shared by six threads each running its own event loop (audit clean), cancellation from another
thread through ``run_coroutine_threadsafe(...).cancel()`` and SIGINT while the model waits or
``exec`` runs (each recorded interrupted, none left running).
"""

from __future__ import annotations

import asyncio
import doctest
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import morphz
import morphz.contextdb
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.runtime.tools.base import ToolRegistry

SRC = Path(morphz.__file__).resolve().parent.parent  # the morphz under test


# ---------------------------------------------------------------- the runtime from code


def test_a_function_model_returning_text_instead_of_a_response_is_a_typed_error(
    tmp_path: Path,
) -> None:
    """README: "a model from make_model (or FunctionModel in tests)"; FunctionModel's docstring:
    "answers come from a Python function (sync or async)". A function that returns the reply's
    text (``lambda request: "done"``, the first thing one writes) makes ``Engine.run`` raise
    ``TypeError: object str can't be used in 'await' expression`` from inside
    ``FunctionModel.request`` (runtime/models/scripted.py:190-194 awaits whatever is not a
    ModelResponse). Nothing says the function must return a ModelResponse. Expected: a
    MorphzError (InputError) naming ModelResponse."""

    def answer(request: ModelRequest) -> ModelResponse:
        return "done"  # type: ignore[return-value]  # the mistake under test

    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context(create=True)
        engine = Engine(ctx, FunctionModel(answer), ToolRegistry(), RuntimeConfig(tmp_path))
        with pytest.raises(Exception) as caught:
            asyncio.run(engine.run("hello"))
        assert isinstance(caught.value, morphz.MorphzError), repr(caught.value)
        assert "ModelResponse" in str(caught.value)


# ---------------------------------------------------------------- typing of the public API


def test_runtime_config_takes_a_str_workspace_for_type_checkers_too(tmp_path: Path) -> None:
    """README: ``Engine(ctx, model, tools, RuntimeConfig(workspace))``; run_config.py says "a str
    or other path-like is taken as the Path it names" (and converts it, run_config.py:39), and
    a list of protected paths is taken too (run_config.py:40-45). But the fields are annotated
    ``workspace: Path`` and ``protected_paths: tuple[Path, ...]`` (run_config.py:24-26), so mypy
    --strict refuses ``RuntimeConfig("/srv/ws")`` and ``protected_paths=[Path(...)]``: a typed
    program must wrap what the runtime accepts anyway. Likewise ``morphz.open`` is annotated
    ``str | Path`` (database.py:164) though it takes any ``os.PathLike``. Expected: the
    annotations say what is accepted (``str | os.PathLike[str]``, ``Sequence``)."""
    pytest.importorskip("mypy")
    program = tmp_path / "embed.py"
    program.write_text(
        textwrap.dedent(
            """\
            import os
            from pathlib import Path, PurePath

            import morphz
            from morphz.runtime.engine import RuntimeConfig

            class Where(os.PathLike[str]):
                def __fspath__(self) -> str:
                    return "store.db"

            config = RuntimeConfig("/srv/workspace", protected_paths=[Path("/srv/secret")])
            db = morphz.open(Where())
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            str(program),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, MYPYPATH=str(SRC)),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- errors say what to do


@pytest.mark.parametrize(
    ("method", "changes"),
    [
        ("update_budget", None),
        ("update_budget", ["window"]),
        ("update_view", None),
        ("update_view", "preview_threshold"),
        ("update_view", ["preview_threshold"]),
    ],
)
def test_update_of_settings_with_something_not_a_mapping_is_an_input_error(
    ctx: morphz.Context, method: str, changes: object
) -> None:
    """``Context.update_budget(changes)`` and ``update_view(changes)`` take a mapping of field
    names. Given None, a str or a list they raise a bare TypeError ("'NoneType' object is not
    iterable", "'list' object is not a mapping") from contextdb.py:204 and :236, where every
    sibling (``set_budget``, ``set_view``, ``observe_batch``) refuses the wrong type with an
    InputError. Expected: InputError saying a mapping of field names is wanted."""
    with pytest.raises(morphz.InputError):
        getattr(ctx, method)(changes)


def test_a_second_database_written_from_a_callback_is_not_blamed_on_another_process(
    tmp_path: Path,
) -> None:
    """Opening one path twice in a process gives two Databases with a writer each. A write
    through the second from inside the first's write on the same thread (an import's progress
    callback) waits for a lock its own thread holds: the full ``busy_timeout`` (30 s by
    default), then StoreBusyError "another process holds it: retry later or raise
    busy_timeout" (store/sqlite.py:312-315), advice that cannot help. The same write through the
    first Database is refused at once, "a write is already open on this thread"
    (sqlite.py:450-455): the re-entrancy check is per Database, not per file. Expected: the
    same immediate, accurate refusal (a process-wide record of the files this thread writes)."""
    path = tmp_path / "m.db"
    history = tmp_path / "history.jsonl"
    history.write_text('{"text": "one"}\n{"text": "two"}\n', encoding="utf-8")
    with (
        morphz.open(path, busy_timeout=0.2) as first,
        morphz.open(path, busy_timeout=0.2) as second,
    ):
        importing = first.context(create=True)
        other = second.context()

        def progress(done: int, total: int) -> None:
            other.observe("user_message", "from the callback")

        with pytest.raises(morphz.StoreError) as caught:
            importing.import_history(history, progress=progress)
        assert "another process" not in caught.value.message, caught.value.message
        assert importing.events() == []  # the import rolled back


# ---------------------------------------------------------------- read-only media


def _read_only_mount_prefix() -> list[str]:
    """A command prefix running a shell in a private mount namespace where it may mount a
    tmpfs (root: ``unshare -m``; otherwise a user namespace), or skip."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare to mount a read-only file system")
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    probe = subprocess.run(
        [*prefix, "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs none $d && umount $d"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a private namespace here")
    return prefix


def test_a_store_on_a_read_only_file_system_is_not_told_to_chmod(tmp_path: Path) -> None:
    """A store on read-only media (a backup on a read-only mount, a container's read-only
    layer) does not open (WAL needs its -shm: a documented choice). The error says
    "m.db cannot be read and written: make it readable and writable (chmod u+rw m.db)"
    (store/sqlite_files.py:119-128): ``os.access`` reports EROFS as not writable, and the advice
    assumes a file mode; the file is mode 0644 already and chmod fails there too ("Read-only
    file system"). Expected: the advice names the read-only file system and says to copy the
    store to a writable folder (``os.statvfs(folder).f_flag & os.ST_RDONLY``), no chmod."""
    prefix = _read_only_mount_prefix()
    mount = tmp_path / "media"
    mount.mkdir()
    script = textwrap.dedent(
        f"""\
        import morphz
        path = {str(mount / "m.db")!r}
        with morphz.open(path) as db:
            db.context(create=True).observe("user_message", "hello")
        import subprocess
        subprocess.run(["mount", "-o", "remount,bind,ro", {str(mount)!r}], check=True)
        try:
            morphz.open(path, create=False).close()
            print("OPENED")
        except morphz.StoreError as exc:
            print(exc.message)
        """
    )
    shell = f'mount -t tmpfs none {mount} && PYTHONPATH={SRC} {sys.executable} -c "$1"'
    done = subprocess.run(
        [*prefix, "sh", "-c", shell, "sh", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    if message == "OPENED":
        return  # opening read-only media would be better still
    assert "chmod" not in message, message
    assert "read-only file system" in message.lower(), message


# ---------------------------------------------------------------- documented examples


def test_the_contextdb_module_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``morphz.contextdb`` docstring shows ``>>> db = open("morphz.db")`` (marked
    ``+SKIP``) and then uses ``db``: run as a doctest (``python -m doctest`` or pytest
    ``--doctest-modules``), all three examples fail (``db`` undefined; ``open`` there would be
    the builtin anyway; the last line has no expected output for the Receipt it prints).
    contextdb.py:1-8. Expected: an example that runs, like the one in ``morphz/__init__.py``
    (``morphz.open``; ``+SKIP`` on each line that needs a store, or a store in a temporary
    folder and the expected output)."""
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(verbose=False)
    for test in finder.find(morphz.contextdb):
        runner.run(test, out=lambda text: None)
    assert runner.summarize(verbose=False).failed == 0
