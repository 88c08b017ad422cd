"""Creating a store that cannot be written (review 20a's minor point): the file Morphz made
for it is removed again, so the error's "nothing was changed" holds and a later command does
not meet "an empty file, not a Morphz store yet"."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stores import SRC, isolated_env, run_morphz


def _create(tmp_path: Path, path: Path, limit: int | None) -> subprocess.CompletedProcess[str]:
    env = dict(isolated_env(tmp_path), PYTHONPATH=str(SRC))
    args = ("context", "create", "c", "--db", str(path))
    return run_morphz(tmp_path, *args, env=env, file_size_limit=limit)


def test_a_store_that_cannot_be_created_leaves_no_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    failed = _create(tmp_path, path, 1024)  # SQLite cannot write even the first pages
    assert failed.returncode == 1, failed.stderr
    assert "nothing was changed" in failed.stderr, failed.stderr
    assert not path.exists(), "the empty file made for the store was left behind"
    done = _create(tmp_path, path, None)  # once there is room, it is created as usual
    assert done.returncode == 0, done.stderr


def test_an_empty_file_that_was_there_already_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"")  # the user's (say, made with touch): not Morphz's to remove
    failed = _create(tmp_path, path, 1024)
    assert failed.returncode == 1, failed.stderr
    assert path.exists()
