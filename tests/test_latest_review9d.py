"""Review 9d: the fixes committed after 643cde3 (review 9c's fixes): the parser's "prose around a
transaction" refusal (txlang/parse.py _around/_form_end), the too-long refusal recorded with the
next reply (runtime/engine.py), and `context recover --activation` (interfaces/cli.py). Each test
fails on the code it was written against; its docstring states the expected behaviour."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

import morphz
from morphz import events as ev
from morphz import owners
from morphz.errors import ParseError
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools
from morphz.owners import Owner
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models.base import ContextTooLongError, ModelRequest, ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from morphz.txlang import read_tx

CONTEXT = "context-default"


# --- 1. txlang: the "send only that form" refusal must point at the real fault -----------------


def test_a_fault_inside_the_form_is_not_reported_as_stray_text_after_it() -> None:
    """docs/decisions.md ("Prose around a transaction"): the "send only the form" refusal is for
    text that does not start with (context-tx, or whose fault "lies after a whole first form".
    _around only asks whether _form_end finds a closing parenthesis and something follows it; it
    never compares that end with where the reader failed. So a transaction with its own fault
    (an unknown escape \\q inside a string, line 1 column 41) followed by one word of prose is
    refused at line 2, column 1 ("Done.") as "stray text after the (context-tx ...) form",
    the real fault only quoted in parentheses: the position a model or a person fixes is the
    wrong one, and removing "Done." still leaves a refused transaction. Expected: when the
    reader's fault lies inside the first form, the refusal is the reader's own, at its place
    (line 1, column 41)."""
    text = '(context-tx (base-version 0) (create a "\\q"))\nDone.'
    with pytest.raises(ParseError) as refused:
        read_tx(text)
    where = (refused.value.to_dict()["line"], refused.value.to_dict()["column"])
    assert where == (1, 41), f"refused at {where}: {refused.value}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # a leading comment is accepted when nothing follows the form
            ';; my transaction\n(context-tx (base-version 0) (create a "x")) :)',
            "stray text after",
        ),
        (  # "( context-tx" is read as the transaction when nothing follows it
            '( context-tx (base-version 0) (create a "x")) :)',
            "stray text after",
        ),
        (  # not a transaction at all: its head is context-txx
            '(context-txx (base-version 0) (create a "x")) :)',
            "expected (context-tx",
        ),
    ],
    ids=["leading-comment", "space-after-paren", "wrong-head"],
)
def test_the_refusal_for_text_around_the_form_names_what_is_wrong(text: str, expected: str) -> None:
    """_around decides "prose before the form" with text.startswith("(context-tx") after the
    leading blanks, which disagrees with the reader: (1) a leading ';' comment and (2) a blank
    after the '(' are both accepted by the reader when nothing follows the form, yet with a
    stray ':)' after it the refusal says "expected (context-tx ...) and nothing around it" at
    line 1, column 1 — blaming the part that is fine; (3) "(context-txx" passes the prefix
    test, so a form with the wrong head plus trailing text is told only that there is "stray
    text after the (context-tx ...) form", as if the form itself were right. Expected: the
    refusal names what is wrong — the stray text after a form the reader accepts, or the wrong
    head — as the same text without the trailing ':)' is refused (or accepted)."""
    with pytest.raises(ParseError) as refused:
        read_tx(text)
    assert expected in refused.value.message, refused.value.message


# --- 2. engine: a too-long refusal's words go into the next reply's payload unchecked -----------


def test_a_too_long_refusal_with_invalid_unicode_does_not_stop_the_activation(
    ctx: morphz.Context, workspace: Path
) -> None:
    """Since aa0b15e the words of a provider's too-long refusal are recorded in the next
    model_reply's request payload ("said"), taken as they came (exc.message[:1000]). A provider's
    error body is decoded JSON and may hold a lone surrogate ("\\ud800"), which the rest of the
    engine makes valid text (valid_text) before recording; here it is not, so ctx.record of the
    reply raises InputError ("meta: a lone surrogate U+D800 ... is not valid Unicode text"): the
    activation that the provider would have served after the refusal is stopped as interrupted,
    and engine.run raises an InputError — which `morphz chat` reports as if the user's line had
    been refused. Expected: the reply is recorded (the refusal's words made valid text) and the
    activation delivers the model's answer."""
    calls: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        calls.append(request)
        if len(calls) == 1:
            # a ceiling above the smallest request (the protocol and the tool schemas alone
            # take about 4,500 tokens): the refusal's words, not its number, are the point here
            raise ContextTooLongError("prompt is too long: \ud800 at most 8000 tokens")
        return ModelResponse("done", ())

    engine = Engine(ctx, FunctionModel(model), build_tools(Settings()), RuntimeConfig(workspace))
    result = asyncio.run(engine.run("hi"))
    assert (result.state, result.reply) == ("delivered", "done")
    replies = [e for e in ctx.events() if e.kind == ev.MODEL_REPLY]
    assert replies and replies[-1].payload is not None
    assert replies[-1].payload["request"]["refused"] == 1


# --- 3. recover --activation: refused commands that wrote anyway -------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "morphz.db"
    with morphz.open(path) as db:
        db.create_context(CONTEXT)
    return path


def _remote(ctx: morphz.Context, monkeypatch: pytest.MonkeyPatch) -> str:
    """An activation started by a process on another host (never provably gone)."""
    with monkeypatch.context() as m:
        m.setattr(owners, "current_owner", lambda: Owner("elsewhere", 4242, None))
        return ctx.start_activation("remote")


def test_recover_refused_for_one_named_activation_marks_none(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: exit 1 means "Morphz refused or failed ... the store is unchanged", and
    `--activation ID` is "refused (exit 1, input) when it is not running or its owner is alive
    on this host". recover_command marks the named activations one by one, so with
    `--activation REMOTE --activation MINE` (MINE run by this live process) REMOTE is marked
    interrupted and its activation_finished written before MINE is refused: exit 1, the error
    printed, and the store changed — the person reads "refused" and does not know REMOTE was
    ended. Expected: every named activation is checked before any is marked; a refusal leaves
    REMOTE running."""
    with morphz.open(store) as db:
        ctx = db.context(CONTEXT)
        remote = _remote(ctx, monkeypatch)
        mine = ctx.start_activation("here")  # owned by this live process
    args = ["context", "recover", CONTEXT, "--activation", remote, "--activation", mine]
    result = CliRunner().invoke(main, [*args, "--db", str(store)])
    assert result.exit_code == 1 and "alive on this host" in result.stderr
    with morphz.open(store) as db:
        states = {a.activation_id: a.state for a in db.context(CONTEXT).activations()}
    assert states[remote] == "running", "a refused recover ended another activation"


def test_recover_with_the_same_activation_named_twice_succeeds(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--activation` is repeatable. The list comprehension in recover_command tests
    `a not in marked` against the list as it was before the comprehension, so an id named twice
    (a shell history edit, a script that gathers ids from two listings) is marked by the first
    occurrence and then refused by the second ("no running activation"): exit 1 after the
    activation was in fact marked. Expected: a repeated id is marked once and the command
    succeeds (exit 0, the id listed once as interrupted)."""
    with morphz.open(store) as db:
        remote = _remote(db.context(CONTEXT), monkeypatch)
    args = ["context", "recover", CONTEXT, "--activation", remote, "--activation", remote]
    result = CliRunner().invoke(main, [*args, "--db", str(store), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count(remote) == 1, result.stdout
