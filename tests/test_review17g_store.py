"""Review 17g (security as a demanding user expects it of an agent runtime on their machine): the
three tests about the store's files and the scripted model's input, from review 17g's test file.
Each failed against the code as reviewed and states the behaviour expected of it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import morphz
from morphz.errors import InputError
from stores import isolated_env, morphz_at_umask_022

# --- 1. the store's files are readable by every user of the machine ----------------------------


# --- 1. the store's files are readable by every user of the machine ----------------------------


def test_a_new_store_and_its_wal_and_shm_are_private_to_their_owner(tmp_path: Path) -> None:
    """A store holds the user's conversations, tool output (file contents, command output) and
    the agent's memory. SQLite creates the file with 0644 less the umask, and the -wal and -shm
    files with the store's mode, so under the usual umask 022 every other user of the machine
    can read all of it (store/sqlite.py:211 and :231 let sqlite3.connect create the file). A
    new store should be created 0600 (as ssh, shells' histories and other agents' transcripts
    are), its companions with it."""
    old = os.umask(0o022)
    try:
        db = morphz.open(tmp_path / "private.db")
    finally:
        os.umask(old)
    try:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "my bank password is hunter2")
        files = [tmp_path / name for name in ("private.db", "private.db-wal", "private.db-shm")]
        modes = {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in files if f.exists()}
        assert len(modes) == 3, modes
        assert all(int(mode, 8) & 0o077 == 0 for mode in modes.values()), modes
    finally:
        db.close()


def test_the_default_store_folder_is_private_to_its_owner(tmp_path: Path) -> None:
    """With no --db and no MORPHZ_DB the store is ~/.morphz/morphz.db, and `context create`
    makes ~/.morphz with Path.mkdir's default mode (store/sqlite.py:143): 0755 under umask 022,
    so every user can list it and read the 0644 store in it. The folder Morphz makes for its
    own data should be 0700 (and the store in it 0600)."""
    env = isolated_env(tmp_path)
    proc = morphz_at_umask_022(tmp_path, "context", "create", "c", env=env)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "home" / ".morphz"
    store = folder / "morphz.db"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (folder, store)}
    assert all(mode & 0o077 == 0 for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


# --- 2. a script nested too deeply for json ------------------------------------------------------


def test_a_deeply_nested_script_is_an_input_error(tmp_path: Path) -> None:
    """ScriptedModel.from_file catches OSError, UnicodeDecodeError and JSONDecodeError
    (runtime/models/scripted.py:146) but not the RecursionError json raises for a file nested
    100,000 lists deep: `morphz exec --model scripted:FILE` ends in a traceback. It should be
    the InputError every other unreadable script is."""
    from morphz.runtime.models.scripted import ScriptedModel

    path = tmp_path / "steps.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"steps\.json"):
        ScriptedModel.from_file(path)
