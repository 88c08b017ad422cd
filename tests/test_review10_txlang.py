"""Review 10, the transaction language and its application (txlang, mind, Context.commit).

Each test fails on the code it was written against and states the expected behaviour.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from morphz.mind.lifecycle import kept_tokens
from morphz.mind.state import Frame
from morphz.results import FrameView
from morphz.txlang import parse_tx, read, read_tx

ROOT = Path(__file__).resolve().parents[1]


def _commit(ctx: morphz.Context, ops: str) -> morphz.Receipt:
    return ctx.commit(f'(context-tx (base-version {ctx.version}) (reason "r") {ops})')


# ------------------------------------------------------------------ the reader


def test_unterminated_string_with_escaped_quotes_is_refused_in_linear_time() -> None:
    """A transaction whose string is never closed and holds many escaped quotes (a model
    pasting JSON into a body and losing the closing quote) must be refused with a ParseError
    at once, however long it is. The tokenizer (sexpr._TOKEN with findall) retries the string
    pattern from every escaped quote to the end of the text: quadratic, about 16 s for 64 KB
    and minutes for 200 KB, during which the runtime's context_tx call (or `context tx
    --file`) hangs. Run in a child process with a generous deadline (linear code needs well
    under a second); the child is killed if it overruns."""
    script = (
        "from morphz.errors import ParseError\n"
        "from morphz.txlang import parse_tx\n"
        "text = '(context-tx (base-version 0) (create a \"' + '\\\\\"' * 100_000 + '))'\n"
        "try:\n"
        "    parse_tx(text)\n"
        "except ParseError as exc:\n"
        "    print(exc.code, exc.line, exc.column)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=20,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("parsing a 200 KB unterminated string did not finish in 20 s (quadratic)")
    assert done.stdout.split() == ["parse", "1", "40"], done.stderr


@pytest.mark.parametrize("value", [b"(context-tx (base-version 0) (create a x))", None, 42])
def test_parse_tx_refuses_non_text_with_a_parse_error(value: object) -> None:
    """parse_tx's docstring says it "Raises only ParseError" (read_tx adds ValidationError),
    and it even checks isinstance(text, str) before looking for lone surrogates; but bytes,
    None or a number reach a str regex and raise a bare TypeError ("cannot use a string
    pattern on a bytes-like object"). Expected: a ParseError saying a transaction is text
    (decode bytes as UTF-8 first), as Context.commit already says with an InputError."""
    with pytest.raises(morphz.MorphzError):
        parse_tx(value)  # type: ignore[arg-type]
    with pytest.raises(morphz.MorphzError):
        read_tx(value)  # type: ignore[arg-type]


def test_reader_refuses_bytes_with_a_morphz_error() -> None:
    """The public S-expression reader (morphz.txlang.read) given bytes raises a TypeError
    ("a bytes-like object is required, not 'str'") from inside its tokenizer; expected a
    ParseError (or InputError) that says the reader takes text."""
    with pytest.raises(morphz.MorphzError):
        read(b"(a b)")  # type: ignore[arg-type]


# ------------------------------------------------------------------ receipts


def _tokens(view: FrameView) -> int:
    """What the frame counts in view, with its marks while it retires (kept_tokens)."""
    copy = Frame(view.id, view.body, tuple(view.sources), 1, view.lifecycle, False, 0.0)
    return kept_tokens(copy.with_life(view.lifecycle, 0, view.reason))


def test_fast_path_on_an_already_retiring_frame_takes_back_its_eventual_relief(
    ctx: morphz.Context,
) -> None:
    """Receipts state the change of pending retirements as the eventual effect (review 9f:
    restore, protect and revise of a retiring frame state -T). A frame retired in an earlier
    transaction (pending relief T, announced by that receipt) and then superseded by the fast
    path is retired at once: the receipt's immediate effect is +T, and the relief that was
    pending is gone, so eventual must be -T. Today the rewritten "already retiring" entry says
    immediate T, eventual 0, so the two receipts together promise the same tokens twice."""
    _commit(ctx, '(create old "' + "o" * 100 + '")')
    first = _commit(ctx, "(retire old)")
    tokens = _tokens(ctx.mind().frame("old"))  # type: ignore[arg-type]
    assert first.tokens_eventual == tokens
    receipt = _commit(ctx, '(retire old) (derive new (from old) "n") (relate new supersedes old)')
    assert ctx.mind().frame("old").lifecycle == "retired"  # type: ignore[union-attr]
    old = [e for e in receipt.effects if e.target == "old"]
    assert sum(e.immediate for e in old) == tokens, receipt.effects
    assert sum(e.eventual for e in old) == -tokens, receipt.effects  # today 0


def test_retiring_a_previewed_observation_states_what_the_encoding_frees(
    ctx: morphz.Context,
) -> None:
    """An observation longer than the preview threshold (default 16,000 characters) is shown
    as a head and tail of a few thousand characters. Retiring it frees what the encoding
    showed, not its full length; the receipt (which the agent reads to judge maintenance)
    states its full length instead: 95,006 tokens freed for an encoding that shrinks by about
    800, and restoring it claims to add 95,006. Expected: the receipt's figure is within a
    factor of two of the change of the encoding's own token estimate, both ways."""
    ctx.observe("user_message", "small")
    big = ctx.observe("tool_result", "line of log output\n" * 20_000)
    before = ctx.encode().tokens
    retire = _commit(ctx, f"(retire {big.ref})")
    after = ctx.encode().tokens
    freed = before - after
    assert freed > 0
    assert retire.tokens_immediate <= 2 * freed, (retire.tokens_immediate, freed)
    restore = _commit(ctx, f"(restore {big.ref})")
    added = ctx.encode().tokens - after
    assert -restore.tokens_immediate <= 2 * added, (restore.tokens_immediate, added)


# ------------------------------------------------------------------ refusals


def test_conflict_refusal_names_the_offending_operation(ctx: morphz.Context) -> None:
    """DESIGN §5: a refused tx returns a typed error "with the offending operation", and the
    protocol tells the model a refusal names "the operation, line and column". A conflict
    names only the boundaries: op, op_index, line and column are all None, so an agent with a
    ten-operation transaction must map `content:b` back to its operations itself. Expected:
    the first operation that reads or writes a changed boundary, with its index and position
    (here the revise of b, operation 1, line 3)."""
    _commit(ctx, '(create a "x") (create b "y")')
    base = ctx.version
    _commit(ctx, '(revise b "z")')  # another activation
    with pytest.raises(morphz.ConflictError) as info:
        ctx.commit(f'(context-tx (base-version {base})\n (create c "q")\n (revise b "w"))')
    err = info.value
    assert err.boundaries == ["content:b"]
    assert (err.op, err.op_index, err.line, err.column) == ("revise", 1, 3, 2)


_NEXT_STEP = re.compile(r"[:;] \S")  # "<what is wrong>: <what to do>", as the other refusals


@pytest.mark.parametrize(
    "ops",
    [
        "(retire-session default)",  # the committing session
        "(unrelate b r a)",  # no such edge
        "(rollback nope)",  # no such checkpoint
        "(drop-checkpoint nope)",
        "(restore a)",  # already active
        "(protect p)",  # already protected
        "(unprotect a)",  # not protected
        "(relate a r b)",  # edge already there
        "(restore-session other)",  # already active
    ],
)
def test_every_refusal_says_what_to_do_next(ctx: morphz.Context, ops: str) -> None:
    """DESIGN §13: "Every refusal is a typed error with a message that says what to do next".
    Most refusals of the mind layer do ("frame 'x' does not exist: check the id in the mind
    region, or create it"; "... is protected: unprotect it first"), but these only state the
    fact: "session 'default' is the current session" (it does not even say that this is why
    the retire is refused, nor that another session must retire it), "edge (b r a) does not
    exist", "checkpoint 'nope' does not exist" (the names are in the mind region),
    "frame 'a' is already active", "... is not protected", "edge (a r b) already exists".
    Expected: each adds what to do (e.g. "; drop this operation", "see the relations in the
    mind region", "retire it from another session")."""
    ctx.create_session("other")
    _commit(ctx, '(create a "x") (create b "y") (create p "z") (protect p) (relate a r b)')
    with pytest.raises(morphz.TxError) as info:
        _commit(ctx, ops)
    assert _NEXT_STEP.search(info.value.message), info.value.message


# ------------------------------------------------------------------ documentation


def test_decisions_describe_when_a_rolled_back_overdue_retirement_finalizes(
    ctx: morphz.Context,
) -> None:
    """docs/decisions.md (Rollback) says "A retiring frame restored with a deadline already
    passed is finalized at the next clock tick", but the rollback itself brings it back
    retired (apply._finalized_if_due), and the replay agrees. The behaviour is the sensible
    one; the sentence should say it ("comes back retired at once")."""
    ctx.set_window(1)
    _commit(ctx, '(create a "x")')
    _commit(ctx, "(retire a) (checkpoint cp)")
    ctx.observe("user_message", "tick")  # a's window ends
    _commit(ctx, "(restore a)")
    _commit(ctx, "(rollback cp)")
    assert ctx.mind().frame("a").lifecycle == "retired"  # type: ignore[union-attr]
    decisions = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
    assert "finalized at the\n  next clock tick" not in decisions
    assert "finalized at the next clock tick" not in " ".join(decisions.split())
