"""Review 9 of `morphz exec` and `morphz chat` (the reviewers' tests, each failing on the code it
was written against, with their docstrings; then the tests of the fixes' own edges): one event
loop per chat and the model's client closed, a line that is not UTF-8, nothing created by a
refused command, the message when no model is configured, and a [budget] table applied over the
context's own budget."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import morphz
from agents import invoke as _invoke
from agents import script_spec as _script
from loopback import Request, Server, anthropic_message, keep_alive, openai_completion
from morphz.capacity import Budget
from morphz.interfaces import cli_agent
from morphz.interfaces.cli import main
from morphz.interfaces.cli_agent import build_tools, prepare
from morphz.runtime.config import Settings
from morphz.runtime.engine import Engine, RuntimeConfig
from morphz.runtime.models import retry
from morphz.runtime.models.base import ModelResponse
from morphz.runtime.models.scripted import FunctionModel
from stores import user_config


def openai_reply(text: str) -> dict[str, Any]:
    return openai_completion(text, prompt_tokens=3000, completion_tokens=5)


@contextmanager
def leaks() -> Iterator[list[str]]:
    """What is left open (unclosed transports and sockets, reported through sys.unraisablehook
    by the garbage collector) during the block and once what it made is garbage."""
    found: list[str] = []

    def hook(unraisable: Any) -> None:
        found.append(f"{unraisable.exc_type.__name__}: {unraisable.exc_value}")

    before, sys.unraisablehook = sys.unraisablehook, hook
    try:
        yield found
        gc.collect()
    finally:
        sys.unraisablehook = before


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries (if any) do not wait: a retry shows in the request count, not in the run time."""
    monkeypatch.setattr(retry.Backoff, "delay", lambda self, attempt, retry_after: 0.0)


# ---------------------------------------------------------------- one event loop, the client closed


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_second_chat_turn_reaches_a_keep_alive_server_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    loopback_only: None,
    no_backoff: None,
    provider: str,
) -> None:
    """`morphz chat` runs each turn in its own event loop (asyncio.run per line) with one SDK
    client, whose pooled keep-alive connection belongs to the first turn's (closed) loop.
    Expected: every turn is answered, each model step sends exactly one HTTP request, and the
    chat exits 0. Today the OpenAI adapter lets a bare RuntimeError('Event loop is closed')
    escape on the second turn (a traceback, exit 1, after the server received and answered the
    request), and the Anthropic adapter sends the second turn's request twice (the first copy
    is processed and billed by the server, its answer dropped, then retried after a backoff)."""
    answered: list[str] = []

    def answer(_request: Request) -> dict[str, Any]:
        answered.append(f"reply {len(answered) + 1}")
        if provider == "openai":
            return openai_reply(answered[-1])
        return anthropic_message([{"type": "text", "text": answered[-1]}])

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    with keep_alive(Server(answer)) as server:
        if provider == "openai":
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.root}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-loop")
            spec = "openai:loop-model"
        else:
            config = f'[anthropic]\nbase_url = "{server.root}"\n'
            user_config(tmp_path / "home", config)  # a base_url: the user's own file
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loop")
            spec = "anthropic:claude-loop"
        args = ["chat", "--model", spec, "--db", str(tmp_path / "m.db")]
        with leaks() as left_open:
            result = CliRunner().invoke(
                main, [*args, "--workspace", str(tmp_path / "ws")], input="hello\nagain\n/quit\n"
            )
        sent = len(server.requests)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0, result.output
    assert sent == 2, f"{sent} HTTP requests for two one-step turns"
    assert "agent> reply 1" in result.stdout and "agent> reply 2" in result.stdout
    assert not left_open, left_open  # and the client was closed at the end


def test_exec_closes_its_provider_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: None
) -> None:
    """`morphz exec` builds an SDK client (SdkAdapter has ``aclose``) and never closes it: against
    a keep-alive server its connection is left open when the event loop ends, and is only torn
    down by the garbage collector with "ResourceWarning: unclosed transport". Expected: the
    command closes the model's client before its event loop ends (``await model.aclose()``),
    so nothing is left for the collector to complain about."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    with keep_alive(Server(lambda _request: openai_reply("done"))) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.root}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loop")
        args = ["exec", "hi", "--model", "openai:loop-model", "--db", str(tmp_path / "m.db")]
        with leaks() as left_open:
            result = CliRunner().invoke(main, [*args, "--workspace", str(tmp_path / "ws")])
        assert result.exit_code == 0, result.output
    assert not left_open, left_open


# ------------------------------------------------------------------------- a line that is not UTF-8


def test_chat_line_that_is_not_utf8_keeps_the_chat_going(env: Path) -> None:
    """A typed line that is not valid UTF-8 (a Latin-1 terminal, a pasted byte) is refused with
    a message and the chat goes on: /status after it runs and /quit exits 0. Today
    click.prompt's UnicodeDecodeError escapes chat_command as a traceback (stdin decoded
    strictly, as on an en_US.UTF-8 locale); under a C locale the byte becomes a lone surrogate
    and the engine's InputError ends the whole chat with exit 1."""
    model = _script(env, [{"reply": "ok"}])
    args = ["chat", "--model", model, "--workspace", str(env / "ws"), "--db", str(env / "m.db")]
    result = _invoke(args, stdin=b"caf\xe9\n/status\n/quit\n")
    assert not isinstance(result.exception, UnicodeDecodeError), result.exception
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "version" in result.stdout  # /status still ran


# ------------------------------------------------------------- nothing created by a refused command


def test_exec_with_a_model_it_cannot_make_creates_nothing(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: exit 1 means 'Morphz refused or failed ... the store is unchanged'. exec with
    a model spec it cannot use (here: no OPENAI_API_KEY) creates CTX first (_open_context runs
    before _engine calls make_model), so a refused command leaves an empty context behind, like
    the invalid --session did before it was checked first. The same holds for a script that
    cannot be read, a bad morphz.toml and an unreadable --profile, and for chat; on a fresh
    --db path the store file itself is created."""
    db = env / "m.db"
    with morphz.open(db) as opened:
        opened.context("context-default", create=True)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = _invoke(["exec", "newctx", "hi", "--model", "openai:gpt-4o-mini", "--db", str(db)])
    assert result.exit_code == 1 and "OPENAI_API_KEY" in result.stderr, result.output
    with morphz.open(db) as opened:
        assert "newctx" not in opened.contexts()
    fresh = env / "fresh" / "m.db"
    missing = _invoke(["exec", "hi", "--model", "scripted:nope.json", "--db", str(fresh)])
    assert missing.exit_code == 1
    assert not fresh.exists(), "a refused exec created the store"


# ------------------------------------------------------------------------------ no model configured


def test_exec_without_a_model_says_none_is_configured(env: Path) -> None:
    """With no --model and no `model` in any morphz.toml, exec (and chat) say
    "model spec 'scripted:' needs a name", a spec the user never wrote (Settings.model defaults
    to "scripted:"). The message should say that no model is configured and how to give one
    (--model SPEC or model = ... in morphz.toml)."""
    result = _invoke(["exec", "hi", "--db", str(env / "m.db")])
    assert result.exit_code == 1
    assert "'scripted:'" not in result.stderr, result.stderr
    assert "--model" in result.stderr, result.stderr


# --------------------------------------------------------------- [budget] over the context's budget


def test_a_partial_budget_table_in_the_configuration_keeps_the_context_window(
    ctx: morphz.Context, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context's budget says the model window is 32,000 tokens (`morphz context budget
    --window 32000`, what `morphz context status` and `context budget` then show: hard 30,000).
    A configuration whose [budget] table names only `reserve` should change only the reserve
    (docs/cli.md: a later file "changes only the keys it names, in every table ([budget], ...)").
    Instead the runtime builds Budget(reserve=...) from the table alone, so every key it does not
    name falls back to the library default: the agent's kernel states hard 120,000 for a
    32,000-token model, its requests are never batched before the provider refuses them, and the
    kernel and `context status` disagree about the same context's limits."""
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000))
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "morphz.toml").write_text("[budget]\nreserve = 2000\n", encoding="utf-8")
    script = project / "script.json"
    script.write_text(json.dumps([{"reply": "ok"}]), encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    agent = prepare(
        str(tmp_path / "morphz.db"),
        f"scripted:{script}",
        workspace,
        interactive=False,
        profile_path=None,
    )
    engine = agent.engine(ctx)
    budget = engine.encoding().pressure.budget
    assert budget.reserve == 2_000  # the key the table names
    assert budget.window == 32_000, budget  # the context's own window, not the default
    assert budget.hard == ctx.budget().hard == 30_000, budget


# -------------------------------------------------------------------------- the fixes' own edges


class ClosingModel(FunctionModel):
    """A model with a client to close, which records that it was closed."""

    def __init__(self) -> None:
        super().__init__(lambda _request: ModelResponse("ok"), "closing")
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def _chat(env: Path, stdin: str | bytes) -> Result:
    model = _script(env, [{"reply": "ok"}, {"reply": "ok again"}])
    args = ["chat", "--model", model, "--workspace", str(env / "ws"), "--db", str(env / "m.db")]
    return _invoke(args, stdin=stdin)


def test_a_turn_refused_as_input_keeps_the_chat_and_a_store_failure_ends_it(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/decisions.md: an InputError of a turn is said and the chat goes on; any other
    MorphzError of a turn (here the store failing) ends the chat with exit 1 through the one
    error mapping. Either way the model is closed, in the chat's event loop."""
    model = ClosingModel()
    monkeypatch.setattr(cli_agent, "make_model", lambda *_args: model)
    run = Engine.run

    async def failing(self: Engine, prompt: str, **kwargs: Any) -> Any:
        if prompt == "refused":
            raise morphz.InputError("this line is refused")
        if prompt == "broken":
            raise morphz.StoreError("the disk is full")
        return await run(self, prompt, **kwargs)

    monkeypatch.setattr(Engine, "run", failing)
    kept = _chat(env, "refused\nhello\n/quit\n")
    assert kept.exit_code == 0, (kept.stdout, kept.stderr, kept.exception)
    assert "this line is refused" in kept.stderr and "agent> ok" in kept.stdout
    assert model.closed == 1
    ended = _chat(env, "broken\nhello\n/quit\n")
    assert ended.exit_code == 1, (ended.stdout, ended.stderr, ended.exception)
    assert "error (store): the disk is full" in ended.stderr
    assert "agent>" not in ended.stdout  # the chat ended there
    assert model.closed == 2


def test_a_line_read_from_a_strict_stream_is_refused_not_a_traceback(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When standard input cannot be made lenient, click.prompt's UnicodeDecodeError is said as
    an input error and the chat reads on (here: the end of input, exit 0)."""
    monkeypatch.setattr(cli_agent, "_lenient_stdio", lambda: None)
    result = _chat(env, b"caf\xe9\n/quit\n")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "error (input): the line is not valid UTF-8" in result.stderr


def test_a_line_that_is_not_utf8_records_nothing(env: Path) -> None:
    """The refused line says where it is not UTF-8 and is not recorded; the next line is a
    turn of its own."""
    result = _chat(env, b"caf\xe9\nhello\n/quit\n")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "the line is not valid UTF-8 at character 4" in result.stderr
    with morphz.open(env / "m.db") as db:
        said = [e.text for e in db.context("context-default").events() if e.kind == "user_message"]
    assert said == ["hello"]


@pytest.mark.parametrize(
    ("command", "setup", "says"),
    [
        (["exec", "hi"], lambda tmp: (tmp / "morphz.toml").write_text("model = ["), "morphz.toml"),
        (["exec", "hi", "--profile", "nope.md"], lambda tmp: None, "cannot read the profile"),
        (["chat"], lambda tmp: None, "OPENAI_API_KEY"),
        (["exec", "hi", "--session", "@x"], lambda tmp: None, "session id"),
        (["exec", "@bad", "hi"], lambda tmp: None, "context id"),
    ],
)
def test_a_refused_exec_or_chat_creates_no_store(
    env: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], setup: Any, says: str
) -> None:
    """A bad configuration file, an unreadable --profile, a model that cannot be made (chat
    too), an invalid session or context id: exit 1, and a fresh --db path stays absent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    setup(env)
    model = "openai:gpt-4o-mini" if command == ["chat"] else _script(env, [{"reply": "ok"}])
    fresh = env / "fresh" / "m.db"
    result = _invoke([*command, "--model", model, "--db", str(fresh)], stdin="/quit\n")
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert says in result.stderr
    assert not fresh.exists()


def test_budget_keys_that_make_no_budget_create_no_context(env: Path) -> None:
    """A [budget] table that makes no budget over the one a new context would get (window 9,000
    over the default output reserve of 8,000 leaves a hard limit below the reserve) is refused,
    naming the keys, before the context is created; one that makes no budget over an existing
    context's is refused before any activation starts."""
    db = env / "m.db"
    with morphz.open(db) as opened:
        opened.context("small", create=True).set_budget(Budget(window=8_000, output_reserve=0))
    model = _script(env, [{"reply": "ok"}])
    common = ["--model", model, "--workspace", str(env / "ws"), "--db", str(db)]
    (env / "morphz.toml").write_text("[budget]\nwindow = 9000\n", encoding="utf-8")
    refused = _invoke(["exec", "newctx", "hi", *common])
    assert refused.exit_code == 1 and "[budget] window = 9000" in refused.stderr
    (env / "morphz.toml").write_text("[budget]\nreserve = 9000\n", encoding="utf-8")
    existing = _invoke(["exec", "small", "hi", *common])
    assert existing.exit_code == 1 and "must exceed the maintenance reserve" in existing.stderr
    with morphz.open(db) as opened:
        assert "newctx" not in opened.contexts()
        assert opened.context("small").activations() == []


def test_a_model_spec_without_a_provider_names_the_prefixes(env: Path) -> None:
    """'gpt-4o-mini' says which provider prefixes exist and what the spec would be with one;
    an unknown prefix and a prefix without a name say what is wrong with them."""
    db = str(env / "m.db")
    bare = _invoke(["exec", "hi", "--model", "gpt-4o-mini", "--db", db])
    assert bare.exit_code == 1
    assert "openai:, anthropic:, scripted:" in bare.stderr and "openai:gpt-4o-mini" in bare.stderr
    unknown = _invoke(["exec", "hi", "--model", "gpt:4", "--db", db])
    assert unknown.exit_code == 1 and "unknown model kind 'gpt'" in unknown.stderr
    nameless = _invoke(["exec", "hi", "--model", "openai:", "--db", db])
    assert nameless.exit_code == 1 and "needs a name after the prefix: openai:NAME" in (
        nameless.stderr
    )
    assert not Path(db).exists()


def test_configured_budget_keys_follow_the_stored_budget(
    ctx: morphz.Context, workspace: Path
) -> None:
    """RuntimeConfig.budget_keys apply over the context's budget as it is when each request is
    built, so a budget changed during a chat applies to its next request; a key that is not a
    Budget field is an InputError, not a TypeError."""
    config = RuntimeConfig(workspace, budget_keys={"reserve": 2_000})
    engine = Engine(
        ctx, FunctionModel(lambda _r: ModelResponse("ok")), build_tools(Settings()), config
    )
    ctx.set_budget(Budget(window=32_000, output_reserve=2_000))
    assert engine.encoding().pressure.budget == Budget(32_000, 2_000, reserve=2_000)
    ctx.set_budget(Budget(window=50_000, output_reserve=2_000))
    assert engine.encoding().pressure.budget == Budget(50_000, 2_000, reserve=2_000)
    with pytest.raises(morphz.InputError, match="windw"):  # refused as the config is made
        RuntimeConfig(workspace, budget_keys={"windw": 1})


def test_the_configuration_keeps_only_the_budget_keys_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare() hands the engine the [budget] keys the files name (limit as `configured`), not
    a whole budget made from them; no default is filled in for the others."""
    (tmp_path / "morphz.toml").write_text("[budget]\nlimit = 20000\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, [{"reply": "ok"}])
    agent = prepare("m.db", script, tmp_path, interactive=False, profile_path=None)
    assert agent.config.budget_keys == {"configured": 20_000}
    assert agent.config.budget is None
