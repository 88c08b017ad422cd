"""Review 20c's findings 6 to 9, which fix 20e takes (several contexts in one store): advice
that names another context (or store) than the one the command ran on, and a context id the
command line cannot take. Each test failed against the code as reviewed and states the behaviour
expected of it."""

from __future__ import annotations

from pathlib import Path

import pytest

import morphz
from stores import run_morphz, run_sql

# --- 4. advice that names another context or another store -------------------------------------


def test_exec_s_budget_advice_names_the_context_it_ran_on(tmp_path: Path) -> None:
    """When even the minimum request does not fit, ``morphz exec ops ...`` fails with "raise the
    budget (`morphz context budget --limit N` or `--window N`)" (runtime/batches.py:96; the same
    text in capacity.py:269): run as written, that command changes context-default's budget (or
    fails, no such context), not ops's, and reads the default store rather than the --db the run
    used. decisions.md ("Advice names the command's own context and store", review 17h) says a
    follow-up command suggested after a failure carries the command's CTX (and --db);
    committing.py:258 at least writes CTX. The advice should name ``ops``."""
    store = tmp_path / "s.db"
    assert run_morphz(tmp_path, "context", "create", "ops", "--db", str(store)).returncode == 0
    budget = ["context", "budget", "ops", "--limit", "1500", "--reserve", "100"]
    assert run_morphz(tmp_path, *budget, "--db", str(store)).returncode == 0
    (tmp_path / "steps.json").write_text('[{"reply": "hello"}]', encoding="utf-8")
    run = ["exec", "ops", "hello", "--model", "scripted:steps.json", "--db", str(store)]
    done = run_morphz(tmp_path, *run)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "morphz context budget --limit" not in said, said
    assert "morphz context budget ops" in said, said


@pytest.mark.parametrize(
    "command",
    [
        ["context", "requests", "ops", "--activation", "act-000000000000"],
        ["context", "recover", "ops", "--activation", "act-000000000000"],
    ],
    ids=["requests", "recover"],
)
def test_advice_after_a_refusal_names_the_store_the_command_ran_on(
    tmp_path: Path, command: list[str]
) -> None:
    """``context requests CTX --activation ID`` and ``context recover CTX --activation ID`` for
    an unknown activation advise "`morphz context requests ops --last 10`" (runtime/report.py:140)
    and "`morphz context recover ops`" (interfaces/cli.py:503), without the ``--db`` the command
    was given: run as written they read ~/.morphz/morphz.db (or MORPHZ_DB), another store, where
    ``ops`` may not exist or is another context of the same name. decisions.md ("Advice names the
    command's own context and store", review 17h) says such advice carries ``--db`` when the
    store is not the default one."""
    store = tmp_path / "elsewhere.db"
    assert run_morphz(tmp_path, "context", "create", "ops", "--db", str(store)).returncode == 0
    done = run_morphz(tmp_path, *command, "--db", str(store))
    assert done.returncode == 1, done.stderr
    assert "act-000000000000" in done.stderr, done.stderr
    assert f"--db {store}" in done.stderr, done.stderr


def test_recall_index_inspect_advice_names_the_context_inspected(tmp_path: Path) -> None:
    """``morphz context recall-index inspect ops`` on an index that is not current prints
    "current  no (run `morphz context recall-index rebuild`)" (interfaces/render.py:422), which
    rebuilds context-default's index (or fails: no such context), not ops's; the same report's
    building-table advice quotes the context (render.py:441). The advice should name ``ops``.
    (Here the index is stale because an event of ops cannot be read: the rebuild it advises then
    fails too, so the advice might better point at the audit.)"""
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        ops = db.context("ops", create=True)
        ops.observe("user_message", "first")
        ops.observe("user_message", "second")
    run_sql(
        store,
        "UPDATE events SET text = CAST(X'68C3' AS TEXT) WHERE context_id = 'ops' AND seq = 2",
        "UPDATE recall_meta SET indexed_seq = -1",  # as a migration marks it
    )
    done = run_morphz(tmp_path, "context", "recall-index", "inspect", "ops", "--db", str(store))
    assert done.returncode == 0, done.stderr
    current = next(line for line in done.stdout.splitlines() if line.startswith("current"))
    assert current.split(None, 1)[1].startswith("no"), done.stdout
    assert "recall-index rebuild`" not in current, current
    assert "ops" in current, current


# --- 5. a context id the command line cannot take ---------------------------------------------


def test_a_context_id_beginning_with_a_dash_is_refused_or_named_so_the_cli_takes_it(
    tmp_path: Path,
) -> None:
    """Ids may begin with ``-`` (ids.py: ``[\\w.:/-]{1,256}``), so ``db.context("-ops",
    create=True)`` makes a context that ``morphz context status -ops`` cannot name (click reads
    it as options: "No such option '-o'", exit 2), and every piece of advice naming it is a usage
    error as written: ContextNotFoundError's "create it with `morphz context create -ops`"
    (store/sqlite.py:445), recover's and audit's. Either a context id should not begin with a
    dash (refused at creation, with the reason), or the advice should name it after ``--``."""
    store = tmp_path / "s.db"
    with morphz.open(store) as db:
        try:
            db.context("-ops", create=True)
        except morphz.InputError:
            return  # refused at creation: no context the command line cannot name
        with pytest.raises(morphz.ContextNotFoundError) as refused:
            db.context("-gone")
    assert "`morphz context create -gone`" not in str(refused.value), str(refused.value)


# --- fix 20e's own cases around them ------------------------------------------------------------


def _old_dashed_context(store: Path) -> None:
    """A store holding ``-old``, a context made before such ids were refused (written past the
    check, as an older Morphz did)."""
    with morphz.open(store) as db:
        db.store.create_context("-old", 8, db.timestamp())


def test_advice_names_an_old_dashed_context_after_a_double_dash(tmp_path: Path) -> None:
    """A context whose id begins with ``-`` stays readable (after ``--``), and the advice its
    commands give puts it there, their options (``--db``) before."""
    store = tmp_path / "s.db"
    _old_dashed_context(store)
    status = run_morphz(tmp_path, "context", "status", "--db", str(store), "--", "-old")
    assert status.returncode == 0, status.stderr
    done = run_morphz(
        tmp_path, "context", "recover", "--db", str(store), "--activation", "act-1", "--", "-old"
    )
    assert done.returncode == 1, done.stderr
    assert f"`morphz context recover --db {store} -- -old`" in done.stderr, done.stderr


def test_a_dashed_context_id_is_refused_before_a_store_is_made(tmp_path: Path) -> None:
    """``context create`` and ``exec`` refuse a new context id beginning with ``-`` (given after
    ``--``) before any store is created; a missing one is not advised to be created."""
    store = tmp_path / "s.db"
    done = run_morphz(tmp_path, "context", "create", "--db", str(store), "--", "-ops")
    assert done.returncode == 1 and "may not begin with '-'" in done.stderr, done.stderr
    (tmp_path / "steps.json").write_text('[{"reply": "hello"}]', encoding="utf-8")
    run = ["exec", "--model", "scripted:steps.json", "--db", str(store), "--", "-ops", "hi"]
    done = run_morphz(tmp_path, *run)
    assert done.returncode == 1 and "may not begin with '-'" in done.stderr, done.stderr
    assert not store.exists()
    _old_dashed_context(store)
    with morphz.open(store) as db, pytest.raises(morphz.ContextNotFoundError) as missing:
        db.context("-gone")
    assert "morphz context create" not in str(missing.value), str(missing.value)
    assert "may not begin with '-'" in str(missing.value), str(missing.value)


def test_a_command_on_the_default_store_advises_no_db(tmp_path: Path) -> None:
    """Advice on the default store (``--db`` not given, MORPHZ_DB unset: HOME's) stays as the
    library says it: no ``--db``."""
    assert run_morphz(tmp_path, "context", "create", "ops").returncode == 0
    done = run_morphz(tmp_path, "context", "requests", "ops", "--activation", "act-1")
    assert done.returncode == 1, done.stderr
    assert "`morphz context requests ops --last 10`" in done.stderr, done.stderr
