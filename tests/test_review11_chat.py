"""Review 11, `morphz chat` and `morphz exec` as an interactive terminal user meets them: a long
line typed at a real terminal, the failure when the budget cannot hold the protocol, refused
prompts and keys that still write to the store, what EOF at an approval prompt records, and the
prompt lines a person reads.

Each test fails on the code it was written against; its docstring says what should happen.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

import morphz
from agents import invoke, script_spec
from morphz.errors import InputError
from morphz.interfaces import cli_agent
from morphz.runtime.config import Settings, make_model

SRC = Path(__file__).resolve().parents[1] / "src"
ASK_EXEC = [
    {"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]},
    {"reply": "ok"},
]


def _args(env: Path, steps: list[dict[str, object]], *extra: str) -> list[str]:
    return [*extra, "--model", script_spec(env, steps), "--workspace", str(env / "ws"),
            "--db", str(env / "m.db")]  # fmt: skip


def _finished_reasons(db_path: Path) -> list[str | None]:
    with morphz.open(db_path) as db:
        ctx = db.context("context-default")
        reasons = []
        for row in ctx.activations():
            assert row.finished_seq is not None, "an activation was left running"
            reasons.append((ctx.event(row.finished_seq).payload or {}).get("reason"))
        return reasons


# ------------------------------------------------------------- a long line at a real terminal


class _Terminal:
    """A process whose standard streams are a pseudo-terminal (a person at a terminal, with the
    kernel's default canonical line discipline)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True
        )
        os.close(slave)
        self.seen = b""

    def drain(self, wait: float = 0.0) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], wait)
            if not ready:
                return
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            self.seen += chunk
            wait = 0.0

    def read_until(self, marker: bytes, deadline: float = 60.0) -> None:
        """Read until ``marker`` has been printed (``deadline``: a safety net, not a timing)."""
        start = len(self.seen)
        while marker not in self.seen[start:] and self.proc.poll() is None:
            before = len(self.seen)
            self.drain(deadline)
            if len(self.seen) == before:
                break
        assert marker in self.seen[start:], self.seen[-2000:]
        self.after = len(self.seen)

    def type(self, data: bytes) -> None:
        for at in range(0, len(data), 256):  # as a paste arrives: in pieces, echo read between
            os.write(self.master, data[at : at + 256])
            self.drain()

    def close(self) -> None:
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")
def test_a_line_longer_than_4095_bytes_typed_at_a_terminal_reaches_the_agent_whole(
    env: Path,
) -> None:
    """At a real terminal `morphz chat` reads lines with plain input() (click.prompt) and no
    readline, so the kernel's canonical line discipline limits a line to 4095 bytes: a pasted
    6,004-character prompt (a log, a diff) is echoed whole on the screen but the user message
    recorded and sent to the agent is its first 4,095 characters, with nothing said. (Arrow keys
    and history do not work either: they arrive as escape sequences in the line.) Expected: the
    line the person typed reaches the agent whole (e.g. import readline when standard input is a
    terminal, which reads in non-canonical mode and adds line editing)."""
    (env / "home").mkdir()
    line = "word " * 1200 + "END"
    args = [sys.executable, "-m", "morphz", "chat", *_args(env, [{"reply": "ok"}])]
    child_env = {**os.environ, "PYTHONPATH": str(SRC), "HOME": str(env / "home")}
    child_env.pop("MORPHZ_DB", None)
    term = _Terminal(args, env, child_env)
    try:
        term.read_until(b"you> ")
        term.type(line.encode() + b"\r")
        term.read_until(b"agent> ok")
        term.type(b"/quit\r")
    finally:
        term.close()
    with morphz.open(env / "m.db") as db:
        events = db.context("context-default").events()
        (message,) = [e for e in events if e.kind == "user_message"]
    assert message.text is not None
    assert len(message.text) == len(line), f"recorded {len(message.text)} of {len(line)} chars"
    assert message.text.endswith("END")


# ------------------------------------------------------- a budget too small for the protocol


def test_a_budget_from_the_configuration_too_small_for_the_protocol_names_the_configuration(
    env: Path,
) -> None:
    """With `[budget] limit = 1000` in ./morphz.toml, the protocol alone does not fit, and every
    exec (and every chat line) fails with "raise the budget (`morphz context budget --limit N`
    or `--window N`), or unprotect observations (`unprotect`) or retire some from another session
    first". Following that advice changes nothing: the configuration's [budget] keys are applied
    over the context's own budget for every request (checked: `context budget --limit 100000`,
    then the same failure, "needs 2903 tokens of 1000"), and nothing is protected or in another
    session. Expected: the reason names the knob that set the limit, the configuration's
    [budget] table (morphz.toml), when the limit comes from it; ideally such a budget is refused
    when exec/chat start, as [budget] keys that make no budget already are."""
    (env / "morphz.toml").write_text("[budget]\nlimit = 1000\nreserve = 10\n", encoding="utf-8")
    first = invoke(["exec", "hi", *_args(env, [{"reply": "ok"}])])
    assert first.exit_code == 1, first.output
    # the advice as given, followed
    assert (
        invoke(["context", "budget", "--limit", "100000", "--db", str(env / "m.db")]).exit_code == 0
    )
    second = invoke(["exec", "hi", *_args(env, [{"reply": "ok"}])])
    assert second.exit_code == 1, second.output  # the same failure: the advice did not help
    reason = second.stdout
    assert "[budget]" in reason or "morphz.toml" in reason, reason


# ------------------------------------------------------ refused prompts and keys write nothing


def test_exec_with_a_prompt_that_is_not_utf8_creates_no_store(env: Path) -> None:
    """`morphz exec newctx $'bad\\xff'` (a prompt in a Latin-1 terminal) is refused (exit 1,
    "observation text: a lone surrogate U+DCFF ...") only after the store and the context
    `newctx` were created: the prompt is checked by begin_activation, after open_context.
    docs/cli.md, Running an agent: "Everything is checked before the store is opened: a refused
    command (exit 1) creates no store and no context." Expected: refused before anything is
    created (as `context tx --file` with bytes that are not UTF-8 is a usage error)."""
    result = invoke(["exec", "newctx", "bad\udcff", *_args(env, [{"reply": "ok"}])])
    assert result.exit_code != 0
    assert not (env / "m.db").exists(), "the refused exec created the store"


def test_exec_with_an_empty_prompt_runs_no_activation(env: Path) -> None:
    """`morphz exec ""` (say `morphz exec "$PROMPT"` with PROMPT unset) records an empty user
    message, runs the agent on it (a paid model request) and exits 0, where chat skips an empty
    or blank line. Expected: an empty or blank PROMPT is a usage error, before the store is
    created and before any model request."""
    result = invoke(["exec", "  ", *_args(env, [{"reply": "ok"}])])
    assert result.exit_code != 0, result.output
    assert not (env / "m.db").exists(), "the empty prompt created a store and ran an activation"


def test_an_empty_anthropic_api_key_is_a_missing_key() -> None:
    """make_model treats OPENAI_API_KEY="" as missing ("set OPENAI_API_KEY ...") but accepts
    ANTHROPIC_API_KEY="" (the check is `key is None`): the adapter sends the placeholder key
    "none" and the user meets an HTTP 401 from Anthropic only after the store, the context and
    the user message were written (an empty variable is what CI gives for an unset secret).
    Expected: an empty key is refused like a missing one, with the same InputError."""
    with pytest.raises(InputError, match="ANTHROPIC_API_KEY"):
        make_model("anthropic:claude-sonnet-4-5", Settings(), {"ANTHROPIC_API_KEY": ""})


def test_chat_with_an_empty_anthropic_key_creates_no_store(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through `morphz chat --model anthropic:NAME` with ANTHROPIC_API_KEY="": the chat
    starts (banner, store and context created, exit 0 at end of input) instead of the error that
    an unset key gives. Expected: exit 1, "set ANTHROPIC_API_KEY", no store (docs/cli.md: a
    refused command creates no store)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    args = ["chat", "--model", "anthropic:claude-sonnet-4-5", "--workspace", str(env / "ws"),
            "--db", str(env / "m.db")]  # fmt: skip
    result = invoke(args, stdin="")
    assert result.exit_code == 1, result.output
    assert "ANTHROPIC_API_KEY" in result.stderr
    assert not (env / "m.db").exists()


# ------------------------------------------------------------- end of input, approval prompt


def test_end_of_input_at_an_approval_prompt_is_not_recorded_as_an_unexpected_error(
    env: Path,
) -> None:
    """End of input (Ctrl-D) at "allow exec(command='echo hi')? [y/N]" ends the turn and the
    chat with exit 0, as docs/decisions.md says; but the approver's click.Abort (a RuntimeError)
    reaches Engine.run's `except Exception`, so the activation's recorded reason is "an
    unexpected error stopped the activation: Abort: ", which `context events`, recover and a
    later reader take for a bug. Expected: the activation is interrupted with a reason that says
    what happened (input ended at the approval prompt / the person stopped it), not an
    unexpected error."""
    result = invoke(["chat", *_args(env, ASK_EXEC)], stdin="run it\n")
    assert result.exit_code == 0, result.output
    (reason,) = _finished_reasons(env / "m.db")
    assert reason is not None
    assert "unexpected error" not in reason and "Abort" not in reason, reason


# --------------------------------------------------------------- what a person reads at the prompt


def test_the_activity_lines_of_a_call_come_before_its_approval_prompt(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The activity of a turn is printed by a poll every FOLLOW_INTERVAL, while the approval
    prompt is printed as soon as the engine asks: at a terminal the person sees
    `allow exec(command='echo hi')? [y/N]: @e2 activation_started ...`, then `@e3 calls exec(...)`
    and `@e4 approval_request: ...` written after the prompt, the cursor on a line with no
    prompt (reproduced in a pty). Expected: the lines of what happened before the question (the
    call, the approval request) are printed before the question is asked. (The interval is made
    long here so the order does not depend on the machine's speed.)"""
    monkeypatch.setattr(cli_agent, "FOLLOW_INTERVAL", 3600.0)
    result = invoke(["chat", *_args(env, ASK_EXEC)], stdin="run it\ny\n/quit\n")
    assert result.exit_code == 0, result.output
    shown = result.output  # stdout and stderr as the terminal shows them, in order
    assert "calls exec(" in shown and "allow exec(" in shown, shown
    assert shown.index("calls exec(") < shown.index("allow exec("), shown


def test_a_line_starting_with_a_slash_that_is_no_command_says_it_was_not_sent(env: Path) -> None:
    """`/etc/nginx.conf fails to parse, why?` (a path, or a typo such as /stauts) is taken as a
    command; the chat prints only the command list, the same output as /help, and the agent is
    never asked. Nothing says the line was not sent, and there is no way to send a message that
    starts with '/' (leading spaces are stripped too). Expected: an unknown command is named as
    unknown and the person is told it was not sent to the agent (and, ideally, how to send such
    a line, e.g. '//' for a literal '/')."""
    stdin = "/etc/nginx.conf fails to parse, why?\n/quit\n"
    result = invoke(["chat", *_args(env, [{"reply": "ok"}])], stdin=stdin)
    assert result.exit_code == 0, result.output
    said = result.output.split("why?\n", 1)[1]  # what follows the echoed line
    assert "unknown" in said.lower() and "/etc/nginx.conf" in said, result.output


def test_end_of_input_at_the_prompt_ends_the_line(env: Path) -> None:
    """Ctrl-D at `you> ` ends the chat (exit 0) with nothing printed after the prompt, so the
    shell's prompt appears glued to it (`you> $ `), unlike python, sqlite3 or bash, which end
    the line first. Expected: the chat's output ends with a newline at end of input."""
    result = invoke(["chat", *_args(env, [{"reply": "ok"}])], stdin="")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n"), repr(result.stdout[-40:])


def test_the_reason_for_a_budget_that_holds_no_request_does_not_suggest_unprotecting(
    env: Path,
) -> None:
    """A context whose own budget is too small for the protocol (`context budget --limit 1000`)
    and holds nothing but the request: exec fails with "... or unprotect observations
    (`unprotect`) or retire some from another session first", though nothing is protected and
    there is no other session; the protocol, kernel and tool schemas are what do not fit
    (2,903 tokens with an empty inbox). Expected: when the fixed part of the request alone
    exceeds the limit the reason says so and names only the remedy that can help (a larger
    budget)."""
    db = str(env / "m.db")
    assert invoke(["context", "create", "--db", db]).exit_code == 0
    assert (
        invoke(["context", "budget", "--limit", "1000", "--reserve", "10", "--db", db]).exit_code
        == 0
    )
    result = invoke(["exec", "hi", *_args(env, [{"reply": "ok"}])])
    assert result.exit_code == 1, result.output
    assert "unprotect" not in result.stdout and "another session" not in result.stdout, (
        result.stdout
    )
