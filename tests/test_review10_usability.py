"""Review 10, usability: a demanding new user's walk through README.md and docs/cli.md, with bad
input at every command. Each test fails on the code it was written against and states the
behaviour expected once fixed."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import morphz
from morphz.interfaces.cli import main
from morphz.runtime.engine import Engine

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither MORPHZ_DB nor the real home directory leaks into a test."""
    monkeypatch.delenv("MORPHZ_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_json_error(result: Result, code: str) -> dict[str, object]:
    """Exit 1, no exception escaped, and stdout is one valid UTF-8 JSON error object."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout_bytes.decode("utf-8"))
    assert data["ok"] is False
    assert data["error"]["code"] == code
    return data


# ------------------------------------------------ a store folder that cannot be made


def test_context_create_under_a_regular_file_is_a_store_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    """docs/cli.md, Errors: every refusal is mapped once; `store` is the database's code. A --db
    whose folder cannot be created (here its 'folder' is a regular file; likewise a read-only or
    missing mount) must exit 1 with a `store` error naming the path, as JSON on stdout — not a
    FileExistsError/NotADirectoryError traceback from the folder's mkdir."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder\n", encoding="utf-8")
    result = run("context", "create", "--db", str(blocker / "x.db"), "--format", "json")
    data = assert_json_error(result, "store")
    assert "notes.txt" in str(data["error"]["message"])  # type: ignore[index]


def test_exec_with_an_uncreatable_store_folder_is_a_store_error(tmp_path: Path) -> None:
    """`morphz exec` creates a missing store (docs/cli.md); when its folder cannot be created
    the command must exit 1 with a typed `store` error, not a traceback."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x\n", encoding="utf-8")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"reply": "ok"}]), encoding="utf-8")
    result = run(
        "exec",
        "hello",
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(tmp_path),
        "--db",
        str(blocker / "sub" / "x.db"),
        "--format",
        "json",
    )
    assert_json_error(result, "store")


def test_library_open_raises_a_morphz_error_when_the_folder_cannot_be_made(
    tmp_path: Path,
) -> None:
    """README: 'Every error is a `morphz.MorphzError` with a `code`.' morphz.open on a path whose
    folder cannot be created raises morphz.StoreError (code `store`), not a bare OSError."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x\n", encoding="utf-8")
    with pytest.raises(morphz.StoreError):
        morphz.open(blocker / "sub" / "x.db")


# ------------------------------------------------------------------ JSON errors stay JSON


def test_json_error_for_a_non_utf8_frame_id_is_valid_utf8_json(tmp_path: Path) -> None:
    """docs/cli.md, Output/Errors: with --format=json the error object goes to stdout, UTF-8. On
    Linux a non-UTF-8 argument arrives as a lone surrogate ('\\udcff'); `recall frame` echoes it
    unescaped in its not-found message, and writing that to a strict UTF-8 stdout (any
    en_US.UTF-8 terminal, click's runner) raises UnicodeEncodeError inside the error handler: a
    traceback instead of JSON (under a C locale: raw 0xFF bytes, JSON that is not UTF-8). The
    JSON must be valid UTF-8 whatever the message holds (e.g. \\u escapes), and an id that is not
    valid text is better refused as `input`."""
    db = tmp_path / "s.db"
    assert run("context", "create", "--db", str(db)).exit_code == 0
    result = run("context", "recall", "frame", "\udcff", "--db", str(db), "--format", "json")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout_bytes.decode("utf-8"))
    assert data["ok"] is False


def test_json_error_for_a_non_utf8_store_path_is_valid_utf8_json(tmp_path: Path) -> None:
    """A store path is any bytes on Linux (a file name in Latin-1 arrives as '\\udcfe'). The
    `store` error for a missing store names the path; with --format=json it must still be valid
    UTF-8 JSON on stdout, exit 1 — not a UnicodeEncodeError traceback."""
    missing = str(tmp_path / "caf\udce9.db")
    result = run("context", "status", "--db", missing, "--format", "json")
    assert_json_error(result, "store")


# ------------------------------------------------------------------ README examples run as written


def _readme_block(after_heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split(after_heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_readme_recall_example_runs_as_written(
    ctx: morphz.Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README, '## Recall': the Python block must run as written on a context that has what it
    names (@e42, the frame deployment/target-v2, events in the time range, history.jsonl). It
    reassigns `page` to the time-range search and then passes that page's cursor to the word
    query `"deployment region"`, which the library refuses (CursorError: 'this cursor belongs to
    a different query') whenever the time range has a second page. The example should continue
    the same search (e.g. name the pages apart and page the word query with its own cursor)."""
    monkeypatch.chdir(tmp_path)
    for i in range(45):
        ctx.observe("user_message", f"deployment region note {i}", time="2026-08-04T10:00:00+08:00")
    ctx.commit(
        "(context-tx (base-version 0) "
        "(derive deployment/target-v2 (from @e42) (fact (region cn-shanghai))))"
    )
    (tmp_path / "history.jsonl").write_text(
        json.dumps({"kind": "user_message", "text": "hello", "time": "2026-08-05T09:00:00Z"})
        + "\n",
        encoding="utf-8",
    )
    exec(compile(_readme_block("## Recall"), "README.md#recall", "exec"), {"ctx": ctx})


def test_readme_engine_example_awaits_the_coroutine() -> None:
    """README, 'Running an agent', From Python: `Engine(ctx, model, tools,
    RuntimeConfig(workspace)).run(prompt)`. Engine.run is a coroutine function, so that line as
    written runs nothing (RuntimeWarning: coroutine 'Engine.run' was never awaited). The README
    should show it awaited: `asyncio.run(Engine(...).run(prompt))` or `await ...`."""
    assert inspect.iscoroutinefunction(Engine.run)
    text = README.read_text(encoding="utf-8")
    snippet = text.split("From Python:", 1)[1].split("\n\n", 1)[0]
    assert ".run(prompt)" in snippet
    assert "asyncio.run(" in snippet or "await " in snippet, snippet


# ------------------------------------------------------------------ surprises in the library


def test_open_none_is_refused_and_creates_no_file_named_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`morphz.open(os.environ.get("MORPHZ_DB"))` with the variable unset passes None; open turns
    it into the path 'None' and silently creates a store file called None in the current folder.
    A target that is not a path (None, a number) must be refused with a typed error
    (morphz.MorphzError, e.g. InputError/StoreError) and create nothing."""
    monkeypatch.chdir(tmp_path)
    try:
        db = morphz.open(None)  # type: ignore[arg-type]
    except morphz.MorphzError:
        pass
    else:
        db.close()
        pytest.fail(f"morphz.open(None) opened a store; files here: {sorted(tmp_path.iterdir())}")
    assert not (tmp_path / "None").exists()


def test_search_terms_do_not_claim_words_that_matched_nothing(ctx: morphz.Context) -> None:
    """docs/cli.md, recall search: JSON `terms` are 'the query words that were matched', and the
    text output says '(matched: ...)'. A word no document holds is listed anyway: searching
    'checkout zebra' reports 'matched: checkout, zebra', and a search with no hits at all says
    'no hits' then 'matched: zebra'. Only words some document matched may be listed."""
    ctx.observe("user_message", "Prepare the deployment of the checkout service.")
    ctx.observe("user_message", "The payment gateway reported high latency.")
    page = ctx.recall.search("checkout zebra")
    assert page.hits
    assert "zebra" not in page.terms, page.terms
    none = ctx.recall.search("zebra")
    assert not none.hits
    assert none.terms == (), none.terms
