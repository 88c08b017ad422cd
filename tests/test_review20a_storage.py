"""Review 20a (storage faults): what a user meets when the SQLite store fails under Morphz — a
full file system mid-run, a store file deleted or replaced while a process has it open, a file
size limit. Each test failed against the code as reviewed and states the behaviour expected."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from morphz.errors import StoreError
from stores import SRC, isolated_env, run_morphz
from stores import backup as backup_to

# --------------------------------------------------------------------- helpers


def _private_mount_prefix() -> list[str]:
    """A command prefix running a shell in a private mount namespace where it may mount a small
    tmpfs (root: ``unshare -m``; otherwise a user namespace), or skip. Nothing is mounted in
    the test's own namespace: the tmpfs goes when the shell ends."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare to mount a small file system")
    prefix = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    probe = subprocess.run(
        [*prefix, "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=1m none $d && umount $d"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a private namespace here")
    return prefix


def _events(path: Path, context: str = "c") -> list[str | None]:
    with morphz.open(path) as db:
        return [e.text for e in db.context(context).events()]


# ------------------------------------- 1. the agent's own command fills the disk mid-run (exec)

# Runs in a private mount namespace: a 2 MiB tmpfs holds the store and the workspace; the
# scripted agent's one exec call fills it (as a build writing artifacts would), then replies.
# After `morphz exec` ends, the space is freed and the store's state is written to $OUT.
_FULL_RUN = r"""
set -u
OUT=$1
DISK=$OUT/disk
mkdir -p "$DISK"
mount -t tmpfs -o size=2m none "$DISK"
mkdir -p "$DISK/ws"
M="$PY -m morphz"
$M context create c --db "$DISK/s.db" > /dev/null
(cd "$DISK/ws" && $M exec c "build the release" --model "scripted:$OUT/script.json" \
    --db "$DISK/s.db" --workspace "$DISK/ws" > "$OUT/exec.out" 2> "$OUT/exec.err")
echo $? > "$OUT/exec.rc"
rm -f "$DISK/ws/fill"
$M context status c --db "$DISK/s.db" --format json > "$OUT/status.json"
$M context events c --db "$DISK/s.db" --format json > "$OUT/events.json"
"""


def test_exec_whose_store_fills_mid_run_does_not_say_nothing_was_changed(tmp_path: Path) -> None:
    """The agent's exec call fills the file system that holds the store (the most common way
    an agent's store runs out of room: a build, a download, a log). `morphz exec` then exits 1
    with "error (store): write to ... failed: database or disk is full: ...: nothing was
    changed; free some space on it ... and run the command again". But the prompt, the
    activation's start and the model's reply were recorded, and the activation is left
    'running' (its end could not be written either) — the message names neither, and docs/
    cli.md's exit status 1 promises "the store is unchanged". Run again as told, the prompt is
    recorded (and its commands run) a second time. The full-disk advice
    (store/sqlite_files.py:97-105, "nothing was changed") is true of one write, not of an
    agent run; runtime/ending.py:78-88 says what was left running only for a busy store.
    Expected: an error that does not claim the store is unchanged, and that names the running
    activation and `morphz context recover` (as the busy case does) when its end was not
    recorded."""
    prefix = _private_mount_prefix()
    home = tmp_path / "home"
    (home / ".morphz").mkdir(parents=True)
    (home / ".morphz" / "morphz.toml").write_text('[policies]\nexec = "allow"\n')
    fill = "head -c 8000000 /dev/zero > fill; echo built"
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": {"command": fill}}]},
        {"reply": "the release is built"},
    ]
    (tmp_path / "script.json").write_text(json.dumps(steps))
    env = isolated_env(tmp_path, PY=sys.executable)
    done = subprocess.run(
        [*prefix, "bash", "-c", _FULL_RUN, "full-run", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert (tmp_path / "exec.rc").exists(), done.stderr
    rc = int((tmp_path / "exec.rc").read_text())
    err = (tmp_path / "exec.err").read_text()
    status = json.loads((tmp_path / "status.json").read_text())
    events = json.loads((tmp_path / "events.json").read_text())
    assert rc == 1, err
    assert "full" in err, err  # the setup did fill the disk mid-run
    recorded = [e["kind"] for e in events]
    assert "user_message" in recorded, recorded  # the run did change the store
    assert "nothing was changed" not in err, (
        f"exec recorded {recorded} and says the store is unchanged: {err.strip()}"
    )
    if status["running_activations"]:
        assert "recover" in err, f"the activation was left running, unsaid: {err.strip()}"


# ----------------------------------------- 2. the store file deleted or replaced while open


def test_a_write_after_the_store_file_was_deleted_is_refused_not_acknowledged(
    tmp_path: Path,
) -> None:
    """A store file deleted while a process has it open (`rm ~/.morphz/morphz.db` to start
    afresh while a chat runs in another terminal, a cleanup, a sync tool): the process's next
    observe returns an event (@e2) and a commit would return a receipt, but both go to the
    unlinked file and vanish when the process ends (reopened, the path holds a new empty
    store). The writer checks before every write that its -wal is still the file at the path
    (store/sqlite_wal.py, store/sqlite.py:484-495), not the store file itself, whose identity
    it records already (sqlite.py:136, ``self._file``). Expected: the write is refused with a
    StoreError saying the store file was deleted while open, nothing acknowledged."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "one")
        path.unlink()  # its -wal and -shm stay
        with pytest.raises(StoreError):
            ctx.observe("user_message", "acknowledged, then lost")


def test_a_store_replaced_by_a_backup_while_open_is_not_corrupted_by_the_next_write(
    tmp_path: Path,
) -> None:
    """The user restores a backup of the store (as Morphz's own damage messages advise) while
    an agent process still has it open: `mv backup.db morphz.db`. The process's next write is
    acknowledged; it writes its pages to the -wal, which belongs to the old file, and when the
    store is opened again SQLite applies those pages to the restored file: "database disk
    image is malformed" — the backup the user just restored is destroyed. Cause as above: no
    check that the store file at the path is still the one the writer opened (store/sqlite.py
    :484-495). Expected: the write is refused (StoreError), and the restored file stays as
    restored."""
    path = tmp_path / "s.db"
    backup = tmp_path / "backup.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        for i in range(5):
            ctx.observe("user_message", f"before the backup {i} " + "a" * 3000)
        backup_to(path, backup)
        for i in range(20):
            ctx.observe("user_message", f"after the backup {i} " + "b" * 3000)
        os.replace(backup, path)  # the restore
        with pytest.raises(StoreError):
            ctx.observe("user_message", "written after the restore")
    with morphz.open(path) as db:
        assert db.store.check_file() == []
        texts = [e.text or "" for e in db.context("c").events()]
    assert [t[:19] for t in texts] == [f"before the backup {i}" for i in range(5)]


def test_the_lost_wal_refusal_does_not_say_it_kept_writes_in_a_deleted_store(
    tmp_path: Path,
) -> None:
    """`rm morphz.db*` while a process has the store open: its next write is refused (the -wal
    check), saying "what this process wrote before was copied into .../s.db" — but the
    checkpoint copied it into the unlinked file, and when the process ends nothing is at that
    path (store/sqlite_wal.py:56-60 reads only the checkpoint's counts). Expected: the
    message does not tell the user their writes were kept in a file that no longer exists."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        ctx = db.context("c", create=True)
        ctx.observe("user_message", "one")
        for name in ("s.db", "s.db-wal", "s.db-shm"):
            (tmp_path / name).unlink()
        with pytest.raises(StoreError) as refused:
            ctx.observe("user_message", "two")
    said = refused.value.message
    assert not ("copied into" in said and not path.exists()), said


# ------------------------------------------------------------- 3. a file size limit (ulimit -f)


def test_a_write_past_a_file_size_limit_says_what_stopped_it(tmp_path: Path) -> None:
    """Under a file size limit (`ulimit -f`, systemd's LimitFSIZE, a sandbox; a disk quota
    fails the same way, EDQUOT) a write that grows the store fails with EFBIG, which SQLite
    reports as SQLITE_IOERR_WRITE: `morphz context import` says only "error (store): write to
    .../s.db failed: disk I/O error" — which reads as failing hardware or a damaged store —
    because store/sqlite_files.py:44 counts an I/O error as a full disk only when under 1 MiB
    is free, and otherwise adds nothing. Expected: the message says what to check (the disk's
    room, a quota or a file size limit) and that nothing was changed."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        db.context("c", create=True).observe("user_message", "hello")
    lines = [
        json.dumps({"kind": "external_event", "text": f"log {i} " + "a" * 100_000})
        for i in range(5)
    ]
    (tmp_path / "h.jsonl").write_text("\n".join(lines) + "\n")
    args = ("context", "import", "c", "h.jsonl", "--db", str(path))
    done = run_morphz(tmp_path, *args, file_size_limit=600 * 1024)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    said = done.stderr.lower()
    assert "disk i/o error" in said, done.stderr  # the limit was hit
    assert "limit" in said or "quota" in said, f"no hint of what failed: {done.stderr.strip()}"
    assert _events(path) == ["hello"]


def test_opening_under_a_file_size_limit_is_not_blamed_on_a_deleted_wal(tmp_path: Path) -> None:
    """Opening a store makes its 32 KiB -shm file; under a file size limit below that,
    `morphz context status` fails with "cannot open the store at ...: disk I/O error: when
    another process has the store open and its -wal file was deleted meanwhile, that
    process's next write copies what it wrote ..." (store/sqlite_files.py:46-47: every I/O
    error while opening, with room on the disk, is taken for a deleted -wal). Nothing was
    deleted; the user is sent looking for another process. Expected: the advice names the
    file size limit or quota as a cause, or at least does not assert a lost -wal."""
    path = tmp_path / "s.db"
    with morphz.open(path) as db:
        db.context("c", create=True)
    assert not Path(f"{path}-shm").exists()
    env = dict(isolated_env(tmp_path), PYTHONPATH=str(SRC))
    args = ("context", "status", "c", "--db", str(path))
    done = run_morphz(tmp_path, *args, env=env, file_size_limit=16 * 1024)
    assert done.returncode == 1, done.stderr
    said = done.stderr.lower()
    assert "disk i/o error" in said, done.stderr  # the limit was hit
    assert "limit" in said or "quota" in said, f"misleading advice: {done.stderr.strip()}"
