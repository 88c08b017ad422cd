"""Review 21a: byte-determinism and portability of what Morphz writes and shows.

"Same state, same bytes" (issue 4) and a store that audits clean wherever it is read: the same
store read by another CPython (3.11 ships Unicode 14.0, 3.12 Unicode 15.0, 3.13 Unicode 15.1),
under another output encoding, and the text rules that decide what the bytes are (ids, previews,
ties). Each test fails on the code it was written against and states the expected behaviour.

The cross-interpreter tests run a second CPython in a real subprocess (the interpreter a user on
another machine, or after an upgrade, would have); they are skipped when it is not installed or
when this interpreter's Unicode database already knows the characters they use.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
import snowballstemmer  # type: ignore[import-untyped]

import morphz
from morphz import graphemes

SRC = Path(__file__).resolve().parents[1] / "src"
PY312 = os.environ.get("MORPHZ_TEST_PY312", "/root/.pyenv/versions/3.12.1/bin/python3.12")
LOCAL_TIME = "2026-08-04T09:00:00+00:00"
# CJK Unified Ideographs Extension H (Unicode 15.0): a letter (Lo) to Python 3.12, unassigned to
# Python 3.11; Kawi letter A (Unicode 15.0) likewise
EXT_H = "\U00032350"
KAWI_A = "\U00011f04"


def _clock() -> datetime:
    return datetime(2026, 8, 4, 9, 0, 0, tzinfo=UTC)


def _unicode_before_15() -> bool:
    return tuple(int(p) for p in unicodedata.unidata_version.split(".")) < (15, 0, 0)


def _newer_python() -> str:
    """The path of a CPython whose Unicode database is 15.0 or later, or skip."""
    if not _unicode_before_15():
        pytest.skip("this interpreter already has Unicode 15: nothing to compare")
    if not os.access(PY312, os.X_OK):
        pytest.skip(f"no Python 3.12 at {PY312} (set MORPHZ_TEST_PY312)")
    return PY312


def _run_newer(script: str, *args: str) -> str:
    """Run ``script`` under the newer CPython with this worktree's sources (and the click and
    snowballstemmer this interpreter uses, both pure Python) on its path."""
    paths = [str(SRC), str(Path(click.__file__).parents[1])]
    paths.append(str(Path(snowballstemmer.__file__).parents[1]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [_newer_python(), "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m morphz ARGS`` in a real process of this interpreter (stdout a pipe)."""
    base = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        capture_output=True,
        env={**base, **(env or {})},
        timeout=120,
        check=False,
    )


_WRITE_FRAME = """
import sys
from datetime import UTC, datetime
import morphz
db = morphz.open(sys.argv[1], now=lambda: datetime(2026, 8, 4, 9, tzinfo=UTC))
ctx = db.context("c", create=True)
ctx.observe("user_message", "plan the rollout")
ctx.commit("(context-tx (base-version 0) (derive plan/" + sys.argv[2] + ' (from @e1) "x"))')
db.close()
"""


def test_a_store_a_newer_python_wrote_audits_clean_under_this_one(tmp_path: Path) -> None:
    """A frame id is "letters, digits and _ - . : /", and what a letter is comes from the
    running interpreter's Unicode database (``re``'s ``\\w`` in ids._ID_RE). Python 3.12
    commits ``plan/<an Extension H ideograph>``; Python 3.11 replays that stored transaction
    with today's parser (audit.py, txlang.read_tx) and refuses the id, so the audit of a sound
    store fails: "the committed tx no longer applies on replay: parse in create ... is not a
    valid id", a diverging head, and every row of the frame reported as a difference (exit 1
    from `morphz context audit`). Expected: a store audits clean on every supported Python
    whatever Python wrote it (ids must not depend on the interpreter's Unicode version, or the
    replay must accept what was committed)."""
    path = tmp_path / "m.db"
    _run_newer(_WRITE_FRAME, str(path), EXT_H)
    db = morphz.open(path, create=False)
    try:
        report = db.context("c").audit()
    finally:
        db.close()
    assert report.ok, report.differences


def test_context_list_reads_a_store_with_a_context_a_newer_python_named(
    tmp_path: Path,
) -> None:
    """Python 3.12 creates the context ``proj-<Kawi letter A>`` (a letter since Unicode 15.0).
    Under Python 3.11, `morphz context list` on that store exits 1 with "context id
    'proj-\\U00011f04' is not a valid id" and lists nothing, not even the other contexts; status,
    audit and every command naming the context refuse it the same way, so its owner cannot even
    audit or export it there. Expected: the listing names every context the store holds (a
    context that cannot be read at most marked, as listing.py does for a damaged one)."""
    path = tmp_path / "m.db"
    script = (
        "import sys, morphz\n"
        "db = morphz.open(sys.argv[1])\n"
        "db.context('other', create=True)\n"
        "db.context(sys.argv[2], create=True)\n"
        "db.close()\n"
    )
    _run_newer(script, str(path), f"proj-{KAWI_A}")
    done = _cli("context", "list", "--db", str(path), "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.dumps(json.loads(done.stdout), ensure_ascii=False)
    assert f"proj-{KAWI_A}" in listed and "other" in listed


def test_a_word_a_newer_python_indexed_is_found_by_this_one(tmp_path: Path) -> None:
    """(Review 21a, the fix.) Python 3.12 indexes a message holding a Kawi word (letters since
    Unicode 15.0); this Python, to which they are unassigned code points, takes them as letters
    too, so a search for the word finds the message."""
    path = tmp_path / "m.db"
    word = KAWI_A * 3
    script = (
        "import sys, morphz\n"
        "db = morphz.open(sys.argv[1])\n"
        "db.context('c', create=True).observe('user_message', 'the word ' + sys.argv[2])\n"
        "db.close()\n"
    )
    _run_newer(script, str(path), word)
    db = morphz.open(path, create=False)
    try:
        hits = db.context("c").recall.search(word).hits
    finally:
        db.close()
    assert [h.ref for h in hits] == ["@e1"]


def test_a_new_id_holds_only_characters_this_python_knows(tmp_path: Path) -> None:
    """(Review 21a, the fix.) A stored id may hold code points this Python does not assign (a
    newer Python wrote it); a new one may not, and the refusal says why."""
    if not _unicode_before_15():
        pytest.skip("this interpreter already knows the Kawi letters")
    db = morphz.open(tmp_path / "m.db", now=_clock)
    try:
        ctx = db.context("c", create=True)
        with pytest.raises(morphz.MorphzError, match="does not know"):
            ctx.commit(f'(context-tx (base-version 0) (create plan/{KAWI_A} "x"))')
        with pytest.raises(morphz.MorphzError, match="does not know"):
            db.context(f"proj-{KAWI_A}", create=True)
    finally:
        db.close()
    assert morphz.ids.is_stored_id(f"plan/{KAWI_A}") and not morphz.ids.is_id(f"plan/{KAWI_A}")


def test_a_preview_does_not_split_a_halfwidth_katakana_voiced_sound_mark(
    tmp_path: Path,
) -> None:
    """Half-width katakana write ガ as ｶ followed by the half-width voiced sound mark U+FF9E
    (ﾊﾟ: U+FF9F), one character to a reader (Grapheme_Extend, though their category is Lm,
    not a mark), common in text from legacy Japanese systems (logs, bank and shipping records).
    graphemes._joins checks only categories M*, ZWJ, variation selectors, modifiers, tags and
    flags, so the preview's head ends with a bare ｶ and its tail starts with a lone ﾞ, which
    the module promises never to do ("without splitting what a reader sees as one character").
    Expected: the cut moves to keep ｶﾞ whole."""
    db = morphz.open(tmp_path / "m.db", now=_clock)
    try:
        ctx = db.context("c", create=True)
        ctx.update_view({"preview_threshold": 100})  # head: 50 characters, tail: 25
        text = "ｱ" * 49 + "ｶﾞ" + "ｲ" * 50 + "ﾊﾟ" + "ｳ" * 24
        ctx.observe("user_message", text)
        inbox = ctx.encode(local_time=LOCAL_TIME).region("inbox")
    finally:
        db.close()
    head = re.search(r'\(head "([^"]*)"\)', inbox)
    tail = re.search(r'\(tail "([^"]*)"\)', inbox)
    assert head is not None and tail is not None, inbox
    assert not head.group(1).endswith("ｶ"), head.group(1)[-3:]
    assert not tail.group(1).startswith("ﾟ"), tail.group(1)[:3]


def test_exact_output_to_a_pipe_is_the_stored_text_whatever_the_output_encoding(
    tmp_path: Path,
) -> None:
    """docs/cli.md: an encoding and a recall read print stored text as it is, and "to a pipe or
    a file their bytes are exact". output.out re-encodes any output whose stream is not UTF-8
    with ``backslashreplace`` (output.py:73-75), at a terminal or not; its docstring speaks of
    a terminal only. So where standard output is not UTF-8 (Windows redirects in the ANSI code
    page, cp1252, unless PYTHONUTF8 is set; a Latin-1 locale), `morphz context recall read
    @e1 > page.txt` writes 'caf\\xe9' in cp1252 and 'İ' as the six characters '\\u0130': neither
    the stored text nor UTF-8, and a text that holds a literal backslash-u can no longer be
    told apart. Expected: to a pipe or a file, the UTF-8 bytes of the text."""
    path = tmp_path / "m.db"
    text = "İstanbul café ☕ 👩🏽‍💻"
    db = morphz.open(path, now=_clock)
    try:
        db.context("c", create=True).observe("user_message", text)
    finally:
        db.close()
    done = _cli(
        "context", "recall", "read", "c", "@e1", "--db", str(path),
        env={"PYTHONIOENCODING": "cp1252"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(text.encode() + b"\n"), done.stdout[:80]


def test_a_new_frame_id_that_nfc_changes_is_refused_like_a_decomposed_one(
    tmp_path: Path,
) -> None:
    """ids.py refuses a decomposed ``café`` so that "two spellings of one text are never two
    frames that print alike" (decisions.md, twelfth session), but takes any id without marks as
    it is, NFC or not: ``unit/Å`` with U+212B ANGSTROM SIGN and ``unit/Å`` with U+00C5 become two
    frames that the mind region prints identically (so do the ohm sign and omega, a CJK
    compatibility ideograph and its unified one), while recall folds both to one word. A model
    reading the encoding cannot tell which id to write, and writing the one it sees (NFC)
    addresses the other frame or none. The reason given (stores hold such ids and the audit
    replays them) covers stored transactions only: Context.commit already checks new ones
    apart (``check_new(read_tx(text))``). Expected: a new transaction naming an id that NFC
    changes is refused with the composed spelling to use, as a decomposed one is; stored
    transactions still replay."""
    db = morphz.open(tmp_path / "m.db", now=_clock)
    try:
        ctx = db.context("c", create=True)
        ctx.commit('(context-tx (base-version 0) (create unit/\u00c5 "A ring"))')
        with pytest.raises(morphz.MorphzError, match="composed"):
            ctx.commit('(context-tx (base-version 1) (create unit/\u212b "angstrom sign"))')
    finally:
        db.close()


def test_the_view_json_states_the_same_view_in_the_same_bytes(tmp_path: Path) -> None:
    """`morphz context view --format json` (and the encoding JSON's ``view``) shows the
    default window as ``"session_hours": 24.0``; after ``ctx.update_view({"session_hours":
    24})`` the same view is ``"session_hours": 24``: View keeps the int it was given
    (encoding/view.py) and stores it so, so two stores with one view print different JSON
    and a script diffing `context view` output sees a change that is none. Expected: the
    hours are stored and shown as one type (a float, as the default and the CLI's
    --session-hours give it)."""
    path = tmp_path / "m.db"
    db = morphz.open(path, now=_clock)
    try:
        ctx = db.context("c", create=True)
        before = ctx.view().to_dict()
        ctx.update_view({"session_hours": 24})
        after = ctx.view().to_dict()
    finally:
        db.close()
    assert json.dumps(after) == json.dumps(before)


@pytest.mark.parametrize("sign", ["\u0600", "\u06dd", "\u070f", "\u08e2", "\U000110bd"])
def test_a_cut_keeps_a_prepended_sign_with_what_follows(sign: str) -> None:
    """(Review 21a, the fix.) A prepended concatenation mark (the Arabic number sign U+0600,
    the end of ayah U+06DD, ...) belongs to the characters after it (Grapheme_Cluster_Break
    Prepend): a head does not end with it, a tail does not start right after it."""
    text = "x" * 9 + sign + "123" + "y" * 10
    assert graphemes.boundary(text, 10, -1) == 9
    assert graphemes.boundary(text, 10, 1) == 11


def test_a_context_this_build_refuses_to_open_is_marked_and_the_others_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Review 21a, the fix.) Should a stored name still be refused (a rule a later build
    changes), `context list` marks that context with why and lists the others."""
    from morphz import database
    from morphz.interfaces import listing

    db = morphz.open(tmp_path / "m.db", now=_clock)
    try:
        db.context("other", create=True)
        db.context("odd", create=True)

        def refuse_odd(value: str, what: str) -> str:
            if value == "odd":
                raise morphz.InputError(f"{what} {value!r} is not a valid id")
            return value

        monkeypatch.setattr(database, "check_stored_id", refuse_odd)
        listed = listing.contexts_json(listing.contexts(db))
        text = listing.contexts_text(listing.contexts(db))
    finally:
        db.close()
    assert [item["context"] for item in listed] == ["odd", "other"]
    assert listed[0]["error"]["code"] == "input" and "version" in listed[1]
    assert "context odd: its status cannot be read" in text
