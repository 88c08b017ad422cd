"""Review 16b: the context transaction language and its commit path under arbitrary input.

Hypothesis generated random text and structurally plausible transactions (every operation, refs,
unicode, deep nesting, huge numbers) and committed them to a real SQLite store; the failing
examples it found are pinned here as explicit inputs. Each test fails on the code it was
written against and states the expected behaviour.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from morphz.errors import ParseError, ValidationError
from morphz.txlang import read_tx

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ invisible characters


@pytest.mark.parametrize(
    ("text", "code"),
    [
        # "unknown operation 'create'; known operations: create, ..."
        ("(context-tx (base-version 0) (create\u200b a (x)))", "U+200B"),
        # "derive needs (from SRC...) right after the frame id" while it is there
        ("(context-tx (base-version 0) (derive a (from\u200b @e1) (x)))", "U+200B"),
        # "base-version must be a non-negative integer" for what reads as 0
        ("(context-tx (base-version 0\u200b) (create a (x)))", "U+200B"),
        # "expected (place ID first|last|...)" for what reads as first
        ("(context-tx (base-version 0) (place a first\u200b))", "U+200B"),
        # "... and nothing around it: send only that form, without code fences or other text"
        # for a file saved with a byte-order mark (Notepad) and read with encoding="utf-8"
        ("\ufeff(context-tx (base-version 0) (create a (x)))", "U+FEFF"),
    ],
    ids=["operation-name", "from", "base-version", "place-where", "byte-order-mark"],
)
def test_a_refusal_caused_by_an_invisible_character_names_it(text: str, code: str) -> None:
    """A zero-width space (copy-pasted text, some model outputs) or a byte-order mark inside an
    atom makes the parser refuse the transaction with a message about what the user sees,
    which is right: an unknown operation 'create' beside the list of known operations that
    holds create, a base-version that "must be a non-negative integer" and reads 0, a
    (from ...) that "must come right after the frame id" and does. Nothing says there is an
    invisible character or where, so neither a person nor the agent (whose context_tx result
    carries the same message) can fix it. The refusal should name the character, as the lone
    surrogate refusal already does (``U+XXXX``)."""
    with pytest.raises(ParseError) as caught:
        read_tx(text)
    assert code in caught.value.message, caught.value.message


# ------------------------------------------------------------------ the CLI


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(cwd)}
    env.pop("MORPHZ_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "morphz", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )


def test_context_tx_commits_the_carriage_returns_of_its_file_as_written(tmp_path: Path) -> None:
    """`context tx --file F` opens F in text mode, so Python's universal newlines turn every
    "\\r\\n" and every lone "\\r" into "\\n" before the text is parsed: a string literal that
    holds them (a Windows-edited file, a pasted HTTP header or CSV line) commits a different
    body than the file says, and than the same text gives through Context.commit or the
    agent's context_tx. Nothing is refused and the docs say the file is read "as UTF-8".
    The committed text should be the file's (newline="" when opening it)."""
    db = tmp_path / "s.db"
    assert _cli("context", "create", "c", "--db", str(db), cwd=tmp_path).returncode == 0
    text = '(context-tx (base-version 0) (create a "x\r\ny" "p\rq"))'
    (tmp_path / "f.tx").write_bytes(text.encode())
    done = _cli("context", "tx", "c", "--file", "f.tx", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with morphz.open(db) as store:
        body = store.context("c").mind().frames[0].body
    assert body == '"x\r\ny" "p\rq"'


# ------------------------------------------------------------------ around the fixes


def test_the_invisible_character_clause_names_its_position_and_keeps_the_error() -> None:
    text = "(context-tx (base-version 0)\n  (create\u200b a (x)))"
    with pytest.raises(ParseError) as caught:
        read_tx(text)
    error = caught.value
    assert error.code == "parse"
    assert (error.op, error.line, error.column) == ("create\u200b", 2, 3)  # the error's own place
    assert error.message.startswith("unknown operation 'create\u200b'")
    assert error.message.endswith(
        "the text holds an invisible character U+200B (ZERO WIDTH SPACE) at line 2, column 10: "
        "remove it"
    )


def test_a_control_character_without_a_name_is_named_by_its_code() -> None:
    with pytest.raises(ParseError) as caught:
        read_tx("(context-tx (base-version 0) (create a\x00 (x)))")
    assert "invisible character U+0000 (a control character) at line 1" in caught.value.message


def test_invisible_characters_in_strings_and_comments_are_not_named() -> None:
    """Inside a string literal (or a comment) an invisible character changes no word of the
    language, so a refusal there is about something else."""
    text = '(context-tx (base-version 0) ; \u200b\n (create a "\u200b") (bad))'
    with pytest.raises(ParseError) as caught:
        read_tx(text)
    assert "invisible" not in caught.value.message
    accepted = read_tx('(context-tx (base-version 0) (create a "\u200b\x00" (x\u200b)))')
    assert accepted.ops[0].body_text == '"\u200b\x00" (x\u200b)'


@pytest.mark.parametrize("canonical", [True, False], ids=["fast-path", "general-path"])
@pytest.mark.parametrize(
    "reason", ["\u200b", "\x00", " \u200b\ufeff ", "\ufe0f", "\u3164", "\u2800 \u115f"]
)
def test_a_reason_of_only_invisible_characters_is_refused_like_an_empty_one(
    reason: str, canonical: bool, tmp_path: Path
) -> None:
    # refused for new commits; read_tx still takes it, as the audit replays what earlier builds
    # stored with it (review 16d)
    spacing = " " if canonical else "  "
    text = f'(context-tx (base-version 0) (reason "{reason}"){spacing}(create a (x)))'
    assert read_tx(text).reason == reason
    with morphz.open(tmp_path / "m.db") as db:
        ctx = db.context("c", create=True)
        with pytest.raises(ValidationError) as caught:
            ctx.commit(text)
        assert ctx.version == 0
    assert caught.value.message.startswith('reason must be a non-empty string: (reason "why")')
    assert "only invisible characters" in caught.value.message
    assert (caught.value.line, caught.value.column) == (1, 30)


def test_context_tx_reads_standard_input_as_written_too(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert _cli("context", "create", "c", "--db", str(db), cwd=tmp_path).returncode == 0
    text = '\ufeff(context-tx (base-version 0) (create a "x\r\ny" "p\rq"))\r\n'
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "morphz", "context", "tx", "c", "--file", "-", "--db", str(db)],
        input=text.encode(),
        capture_output=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with morphz.open(db) as store:
        assert store.context("c").mind().frames[0].body == '"x\r\ny" "p\rq"'


def test_context_tx_names_the_first_bad_byte_of_the_file(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert _cli("context", "create", "c", "--db", str(db), cwd=tmp_path).returncode == 0
    (tmp_path / "f.tx").write_bytes(b'\xef\xbb\xbf(context-tx (base-version 0) (create a "\xff"))')
    done = _cli("context", "tx", "c", "--file", "f.tx", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 2
    assert "f.tx is not valid UTF-8 (byte 44): save it as UTF-8" in done.stderr
