"""A store written by an older Morphz opens with this one: the migrations added since are applied
in place and everything recorded before still reads, audits and works.

``tests/data/store-0003.sql`` rebuilds a store written by commit 1cabcdb (schema 0003: before
activation owners and objectives; how it was made: tests/data/README.md): an observation, a
derive, a tool result in another session, a supersede-and-retire commit, and an activation left
running. It is kept as SQL text, not as a database file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import morphz

OLD_STORE = Path(__file__).parent / "data" / "store-0003.sql"


@pytest.fixture
def upgraded(tmp_path: Path) -> Path:
    copy = tmp_path / "store.db"
    conn = sqlite3.connect(copy)
    try:
        conn.executescript(OLD_STORE.read_text(encoding="utf-8"))
    finally:
        conn.close()
    return copy


def _schema(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT number FROM schema_migrations ORDER BY 1")]
    finally:
        conn.close()


def test_the_old_store_is_migrated_and_reads_as_before(upgraded: Path) -> None:
    assert _schema(upgraded) == [1, 2, 3]
    with morphz.open(upgraded) as db:
        assert db.store.schema_version() >= 5
        ctx = db.context("context-default")
        status = ctx.status()
        assert (status.version, status.clock, status.last_seq) == (2, 2, 5)
        assert ctx.audit().ok
        target = ctx.mind().frame("deployment/target-v2")
        assert target is not None and target.sources == ("@e3", "deployment/target-v1")
        hits = ctx.recall.search("shanghai")
        assert "@e3" in [h.ref for h in hits.hits]
        (act,) = ctx.activations(running_only=True)
        assert act.owner is None and act.objective is None  # not recorded back then
        kernel = ctx.encode().region("kernel")
        assert f"({act.activation_id} (session default) (root @e1))" in kernel
        directory = ctx.encode(session="ops", session_count=1).region("session-directory")
        assert "(session ops " in directory and "(excluded (beyond-count 1))" in directory
    assert _schema(upgraded)[:3] == [1, 2, 3] and len(_schema(upgraded)) >= 6
    conn = sqlite3.connect(upgraded)
    try:  # 0006 counted the sessions the old store had
        counts = conn.execute("SELECT context_id, attention, n FROM session_counts").fetchall()
    finally:
        conn.close()
    assert counts == [("context-default", "active", 2)]


def test_the_old_store_keeps_working_after_the_upgrade(upgraded: Path) -> None:
    with morphz.open(upgraded) as db:
        ctx = db.context("context-default")
        (act,) = ctx.activations(running_only=True)
        assert ctx.interrupt_orphaned() == []  # no owner recorded: not provably dead
        assert ctx.interrupt_orphaned(include_unowned=True) == [act.activation_id]
        ctx.commit(
            f"(context-tx (base-version {ctx.version}) (revise deployment/target-v2 "
            "(fact (region cn-shanghai) (replicas 3))))"
        )
        new = ctx.start_activation("default", objective="roll out")
        assert ctx.activations(running_only=True)[0].objective == "roll out"
        ctx.finish_activation(new)
        assert ctx.audit().ok


def test_the_rebuild_on_opening_an_old_store_reports_progress(upgraded: Path) -> None:
    """The recall indexes an upgrade marks stale are rebuilt as the store opens; ``progress``
    hears of each context's events, up to the end."""
    seen: list[tuple[str, int, int]] = []
    with morphz.open(upgraded, progress=lambda *args: seen.append(args)) as db:
        assert db.context("context-default").recall_index.inspect().current
    assert seen and {c for c, _, _ in seen} == {"context-default"}
    assert seen[-1] == ("context-default", 5, 5)
    calls = len(seen)
    with morphz.open(upgraded, progress=lambda *args: seen.append(args)):
        pass  # current now: nothing to rebuild
    assert len(seen) == calls


def test_the_cli_shows_the_rebuild_on_a_terminal(
    upgraded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``morphz`` on a store from an older release says on stderr (a terminal) what it rebuilds
    before it answers."""
    from click.testing import CliRunner

    from morphz.interfaces import cli

    monkeypatch.setattr(cli, "stderr_is_terminal", lambda: True)
    result = CliRunner().invoke(cli.main, ["context", "status", "--db", str(upgraded)])
    assert result.exit_code == 0, result.output
    assert "recall index of context-default: 5/5 events" in result.stderr
