"""Review 11 (dstore): a review of the store and API changes of commit 4f243ef (store file
errors, the audit's quick_check, table-less files, API entry-point checks, the lazy
``morphz.encoding``). Each test fails on the code it was written against; its docstring states
the expected behaviour.

Checked and found sound (no test, since those pass): ``db.context(name, window=W)`` with W equal
to the window after ``set_window`` (and from a second opener), the README's Python examples and
``morphz demo``; the audit's quick_check on a store another connection is writing to (an open
write transaction, a WAL of 14 MB pinned by a reader), on a store file of mode 0444 (twice, with
the -wal/-shm it leaves), on paths holding ``?``, ``#``, ``%20``, ``&mode=rw`` and non-ASCII;
a store in a 0555 folder (the error names the folder); a str subclass as path and context id,
``busy_timeout=0.5``; a payload that is valid JSON but not an object (no traceback anywhere);
``close()`` inside an audit's progress (a StoreError), a rebuild's and an import's progress;
``recall.deliver`` with the README's parameters and an unknown one; pickling the exported
errors added by the commit; ``from morphz import *``; mypy sees ``morphz.encoding`` and
``morphz.capacity`` with their types."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import morphz
from test_review11_recovery import _cli, _damage_pages

SRC = Path(morphz.__file__).resolve().parent.parent  # the morphz under test


def _unprivileged(probe: Path) -> list[str]:
    """A command prefix under which file modes are enforced (as root: setpriv drops the
    capabilities that override them); skips when there is no such way."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: file modes are not enforced")
        prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    probe.write_text("x")
    probe.chmod(0o000)
    check = subprocess.run(
        [*prefix, sys.executable, "-c", f"open({str(probe)!r}).read()"],
        capture_output=True,
        check=False,
    )
    probe.chmod(0o644)
    probe.unlink()
    if check.returncode == 0:
        pytest.skip("file modes are not enforced here")
    return prefix


# ---------------------------------------------------------------- a store being created


def test_a_store_another_process_is_creating_is_waited_for_not_refused_as_table_less(
    tmp_path: Path,
) -> None:
    """A store's first open (``morphz chat`` / ``context create``) sets WAL mode, which writes
    the database header, then runs every migration in one write transaction. While that
    transaction is open, another process opening the store without ``create`` (``morphz
    context status``) sees a SQLite file without tables, and the new check of commit 4f243ef
    refuses it at once: "a SQLite database without tables, not a Morphz store yet: nothing was
    changed". Before the commit, it waited for the writer like any busy store (busy_timeout,
    30 s by default) and then opened the new store. Expected: a table-less file whose tables
    are being written by another connection is waited for as a busy store: with
    ``busy_timeout=0`` a ``StoreBusyError`` ("retry later"), never the "without tables"
    refusal."""
    path = tmp_path / "morphz.db"
    creator = sqlite3.connect(path, isolation_level=None)  # what SqliteStore._connect does
    try:
        creator.execute("PRAGMA journal_mode = WAL")
        creator.execute("BEGIN IMMEDIATE")  # the first migration, not committed yet
        creator.execute(
            "CREATE TABLE schema_migrations "
            "(number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        with pytest.raises(morphz.StoreBusyError):
            morphz.open(path, create=False, busy_timeout=0).close()
    finally:
        creator.execute("ROLLBACK")
        creator.close()


# ---------------------------------------------------------------- the audit's file check


def test_the_audit_names_the_context_whose_recall_index_is_damaged(
    open_db: Callable[[], morphz.Database], tmp_path: Path
) -> None:
    """The audit's quick_check covers the whole file, so ``morphz context audit alpha`` reports
    damage in the recall index of another context (``recall_fts_2_idx``, beta's) and says "run
    `morphz context recall-index rebuild`". That command rebuilds context-default's index (CTX
    defaults to it), and ``recall-index rebuild alpha`` rebuilds alpha's: neither touches the
    damaged table, and the audit keeps failing with the same advice. Nothing in the message
    says which context the table belongs to. Expected: the difference names the context whose
    recall index is damaged (beta), e.g. ``morphz context recall-index rebuild beta``."""
    db = open_db()
    alpha = db.context("alpha", create=True)
    beta = db.context("beta", create=True)
    for i in range(30):
        alpha.observe("user_message", f"alpha step {i}: deploy the checkout service")
        beta.observe("user_message", f"beta step {i}: deploy the payment service")
    table = beta.recall_index.inspect().table
    db.close()
    _damage_pages(tmp_path / "morphz.db", f"{table}_idx")
    report = open_db().context("alpha").audit()
    assert not report.ok
    first = report.differences[0]
    assert "recall-index rebuild" in first, first  # the advice given today
    assert "beta" in first, f"the advice does not say which context's index to rebuild: {first}"


def test_the_audit_checks_the_store_it_opened_after_the_working_folder_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened by a relative path keeps working after the process changes its working
    folder (its connections are open), and ``ctx.audit()`` did too before commit 4f243ef. The
    audit's new quick_check opens a connection of its own from ``self.path.resolve()`` at audit
    time, i.e. against the new working folder: the audit of a sound store then raises
    ``StoreError: cannot check the file morphz.db: unable to open database file``. Expected:
    the check opens the file the store opened (its path made absolute at open), and the audit
    passes."""
    monkeypatch.chdir(tmp_path)
    db = morphz.open("morphz.db")
    try:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "hello")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        assert ctx.status().last_seq == 1  # the store itself still works
        report = ctx.audit()
        assert report.ok, report.differences
    finally:
        db.close()


# ---------------------------------------------------------------- file errors


@pytest.mark.parametrize("mode", [0o000, 0o200], ids=["mode-000", "mode-200"])
def test_a_store_file_that_cannot_be_read_says_it_cannot_be_read(
    open_db: Callable[[], morphz.Database], tmp_path: Path, mode: int
) -> None:
    """store/sqlite_files.py words SQLITE_CANTOPEN as a write problem. A store file the user
    cannot read (mode 000: a file copied with the wrong mode, another user's) is reported as
    "cannot be written: make it writable (chmod u+w ...)"; after that chmod (mode 200) the error
    is SQLite's bare "unable to open database file" with no advice at all, and the store still
    does not open. Expected: the error says the file cannot be read (e.g. ``chmod u+r`` /
    ``u+rw``), not only that it cannot be written."""
    db = open_db()
    db.context("context-default", create=True).observe("user_message", "hello")
    db.close()
    path = tmp_path / "morphz.db"
    prefix = _unprivileged(tmp_path / "probe")
    path.chmod(mode)
    try:
        status = _cli(prefix, path, "context", "status")
    finally:
        path.chmod(0o644)
    assert status.returncode == 1, status.stderr
    said = status.stderr
    assert "cannot be read" in said or "u+r" in said, (
        f"a store that cannot be read, and the error does not say so: {said.strip()}"
    )


# ---------------------------------------------------------------- the package's attributes


def test_type_checkers_still_report_an_unknown_attribute_of_morphz(tmp_path: Path) -> None:
    """``morphz`` ships ``py.typed``. The module-level ``__getattr__`` added for the lazy
    ``morphz.encoding`` is typed ``(name: str) -> Any`` and visible to type checkers, so mypy
    (and Pyright/IDEs) now take every attribute of ``morphz`` to exist, as Any: a typo such as
    ``morphz.opne(...)`` or ``except morphz.InputErorr`` passes type checking, where before the
    commit mypy said ``Module has no attribute "opne"``. Expected: mypy still reports unknown
    attributes of ``morphz`` (e.g. define ``__getattr__`` under ``if not TYPE_CHECKING``; the
    ``TYPE_CHECKING`` import already gives checkers ``morphz.encoding``)."""
    pytest.importorskip("mypy")
    snippet = tmp_path / "uses_morphz.py"
    snippet.write_text(
        "import morphz\ndb = morphz.opne('store.db')\nview = morphz.encoding.View()\n"
    )
    env = dict(os.environ, MYPYPATH=str(SRC))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    out = result.stdout + result.stderr
    assert 'has no attribute "opne"' in out, f"mypy accepted morphz.opne: {out.strip()!r}"
    assert "encoding" not in out, out  # morphz.encoding itself is known


def test_dir_of_morphz_lists_encoding() -> None:
    """``morphz.encoding`` is in ``morphz.__all__`` and reachable after ``import morphz``, but
    until its first use ``dir(morphz)`` does not list it (a module ``__getattr__`` without a
    ``__dir__``), so tab completion in a REPL or IDE and ``inspect.getmembers`` do not offer
    it. Expected: ``"encoding" in dir(morphz)`` in a fresh interpreter (a module
    ``__dir__`` returning the globals plus ``encoding``)."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, "-c", "import morphz; print('encoding' in dir(morphz))"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True", "dir(morphz) does not list encoding"


# ---------------------------------------------------------------- ctx.event


def test_a_missing_event_of_an_empty_context_does_not_name_a_latest_event(
    ctx: morphz.Context,
) -> None:
    """``ctx.event`` of a missing ref now names the latest event. In a context without events
    it says "no event @e1 in context 'context-default': the latest is @e0", but there is no
    @e0 (refs begin at @e1; ``ctx.event('@e0')`` is refused as an invalid seq). Expected: a
    RecordNotFoundError that says the context has no events yet, naming no @e0."""
    with pytest.raises(morphz.RecordNotFoundError) as raised:
        ctx.event("@e1")
    assert "@e0" not in str(raised.value), str(raised.value)
