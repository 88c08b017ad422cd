"""An earlier Morphz's code, to write stores with as users' older releases did (upgrade tests):
its ``src/morphz`` extracted from this repository's history with ``git archive``, and Python
code run on it in a subprocess."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def old_morphz(commit: str, into: Path) -> Path:
    """``src`` of ``commit`` extracted under ``into`` (the test is skipped when git cannot give
    it: no git, or a shallow clone without the commit)."""
    if shutil.which("git") is None:
        pytest.skip("git is not available: cannot extract an older Morphz")
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone (shallow?): cannot write its store")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src/morphz"],
        capture_output=True,
        check=True,
    ).stdout
    target = into / f"morphz-{commit}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def run_on(src: Path, code: str, *args: str) -> str:
    """The output of ``code`` (``python -c``, with ``args``) run on the Morphz under ``src``;
    it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
