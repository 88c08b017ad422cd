"""Review 13c: the command line as a person uses it from a terminal (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stores import cli_env, run_cli

TX = '(context-tx (base-version 0) (reason "note") (create a/b (x 1)))\n'


def _store(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir(exist_ok=True)
    db = tmp_path / "s.db"
    made = run_cli(tmp_path, "context", "create", "--db", str(db))
    assert made.returncode == 0, made.stderr
    return db


def _version(tmp_path: Path, db: Path) -> int:
    shown = run_cli(tmp_path, "context", "status", "--db", str(db), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    return int(json.loads(shown.stdout)["version"])


# ------------------------------------------------------------------ the configuration's bytes


@pytest.mark.parametrize(
    "args",
    [
        ("context", "tx", "--file", "t.tx"),
        ("context", "budget", "--limit", "90000"),
        ("context", "encoding"),
    ],
    ids=["tx", "budget", "encoding"],
)
def test_configuration_not_utf8_is_an_input_error_not_a_traceback(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """A morphz.toml saved in another encoding (UTF-16 from a Windows editor starts with the
    bytes FF FE) crashes every command that reads the configuration with a UnicodeDecodeError
    traceback: config._read catches OSError and TOMLDecodeError only."""
    db = _store(tmp_path)
    (tmp_path / "t.tx").write_text(TX, encoding="utf-8")
    (tmp_path / "morphz.toml").write_bytes('model = "openai:x"\n'.encode("utf-16"))
    ran = run_cli(tmp_path, *args, "--db", str(db))
    assert "Traceback" not in ran.stderr, ran.stderr[-400:]
    assert ran.returncode == 1
    assert "morphz.toml" in ran.stderr
    assert _version(tmp_path, db) == 0  # nothing written


def test_configuration_with_a_utf8_byte_order_mark_is_read_or_named(tmp_path: Path) -> None:
    """A morphz.toml saved by an editor that writes a UTF-8 byte-order mark (Notepad) is refused
    as 'Invalid statement (at line 1, column 1)', a line that looks right; the transaction file
    and an import accept the mark. Either read it, or say that the mark is the problem."""
    db = _store(tmp_path)
    (tmp_path / "t.tx").write_text(TX, encoding="utf-8")
    (tmp_path / "morphz.toml").write_bytes(b"\xef\xbb\xbf[budget]\nlimit = 100000\n")
    ran = run_cli(tmp_path, "context", "tx", "--file", "t.tx", "--db", str(db))
    assert ran.returncode == 0 or "byte-order mark" in ran.stderr, ran.stderr


# ------------------------------------------------------------------ --busy-timeout


def test_busy_timeout_nan_is_named_as_the_option(tmp_path: Path) -> None:
    """`--busy-timeout nan` passes click's FloatRange(min=0) (NaN compares false) and reaches
    the library, whose refusal names its own parameter `busy_timeout` and exits 1; -1 or text
    are usage errors (exit 2) naming '--busy-timeout' (env var MORPHZ_BUSY_TIMEOUT)."""
    db = _store(tmp_path)
    ran = run_cli(tmp_path, "context", "list", "--db", str(db), "--busy-timeout", "nan")
    assert ran.returncode == 2, ran.stderr
    assert "--busy-timeout" in ran.stderr


def test_busy_timeout_nan_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    db = _store(tmp_path)
    env = cli_env(tmp_path / "home") | {"MORPHZ_BUSY_TIMEOUT": "nan"}
    ran = subprocess.run(
        [sys.executable, "-m", "morphz", "context", "list", "--db", str(db)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 2, ran.stderr
    assert "MORPHZ_BUSY_TIMEOUT" in ran.stderr


# ------------------------------------------------------------------ --db


def test_db_path_ending_in_a_slash_is_not_made_a_file(tmp_path: Path) -> None:
    """`--db ./stores/` (a folder meant, not yet made) creates a store FILE named `stores`; an
    existing folder is refused ('must name the store's file'). A path that ends in a separator
    names a folder: refuse it the same way, before anything is created."""
    (tmp_path / "home").mkdir()
    meant = tmp_path / "stores"
    ran = run_cli(tmp_path, "context", "create", "--db", f"{meant}/")
    assert ran.returncode == 1, ran.stdout
    assert not meant.is_file()
