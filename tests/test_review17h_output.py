"""Review 17h, a new user's first hour (the findings about output and advice): through the
command line only, as README.md and docs/cli.md tell it: a fresh home, no API key, no network,
the scripted model, chat's slash commands, exec's tools, and output at a terminal (a
pseudo-terminal) against a pipe. Each test failed against the code as reviewed and states the
behaviour expected of it. Real subprocesses (the CLI as a user runs it), real stores, temporary
folders. (The review's findings about configuration and the profile are in other files.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from processes import morphz_on_a_terminal
from stores import isolated_env, run_morphz


def _script(tmp_path: Path, steps: list[dict[str, Any]], name: str = "steps.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(steps), encoding="utf-8")
    return f"scripted:{path}"


def _at_a_terminal(tmp_path: Path, *args: str) -> bytes:
    """What ``morphz ARGS`` (in ``tmp_path``, its own home) writes to standard output when that
    is a terminal; it must succeed."""
    status, shown = morphz_on_a_terminal(*args, env=isolated_env(tmp_path), cwd=tmp_path)
    assert status == 0, shown
    return shown


# --- 1. chat's /recall advises a command that searches the wrong context -----------------------


def test_chat_recall_time_range_advice_searches_the_chats_context(tmp_path: Path) -> None:
    """`/recall the` (only very common words) is refused with the command that searches a time
    range instead: `morphz context recall search --db DB --since T --until T -- CTX`
    (interfaces/cli_agent.py:586). With one positional argument, recall search takes it as the
    QUERY in context-default (docs/cli.md, "Positional arguments"), so the advised command
    searches the default context for the word "ops" and finds nothing (exit 0), however much
    the chat's context holds. It should give the context and an empty query: `-- CTX ''`."""
    model = _script(tmp_path, [{"reply": "noted"}])
    db = str(tmp_path / "s.db")
    chat = run_morphz(
        tmp_path,
        *("chat", "ops", "--model", model, "--db", db),
        stdin="deploy the checkout service\n/recall the\n/quit\n",
    )
    assert chat.returncode == 0, chat.stderr
    said = re.search(r"`(morphz context recall search [^`]*)` searches a time range", chat.stderr)
    assert said, chat.stderr
    argv = shlex.split(said.group(1))[1:]
    times = iter(["2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"])
    argv = [next(times) if a == "T" else a for a in argv]
    search = run_morphz(tmp_path, *argv)
    assert search.returncode == 0, search.stderr
    assert "deploy the checkout service" in search.stdout, (argv, search.stdout)


# --- 4. at a terminal, a Windows line end shows as \x0d ----------------------------------------


def test_a_crlf_line_break_at_a_terminal_is_a_line_break(tmp_path: Path) -> None:
    """docs/cli.md: at a terminal "any control character but a line break and a tab shows as
    \\xNN". A CR LF pair is a line break (a file with Windows line ends that read_file
    recorded as it is, an imported log), yet `out` keeps only "\\n" and "\\t"
    (interfaces/output.py:67, tables.visible(text, keep="\\n\\t")), so `context recall read`
    shows every line of it ending in a literal `\\x0d`. A lone CR (which can overwrite a line)
    should stay escaped; a CR before LF is no threat and should print as the line break it is."""
    db = str(tmp_path / "s.db")
    assert run_morphz(tmp_path, "context", "create", "--db", db).returncode == 0
    observed = run_morphz(
        tmp_path,
        *("context", "observe", "--kind", "tool_result", "--db", db),
        *("--text", "region: cn-shanghai\r\nreplicas: 3\r\n"),
    )
    assert observed.returncode == 0, observed.stderr
    shown = _at_a_terminal(tmp_path, "context", "recall", "read", "@e1", "--db", db)
    assert b"region: cn-shanghai" in shown
    assert b"\\x0d" not in shown, shown


# --- 5. chat shows a tool call's Unicode arguments as \uXXXX ------------------------------------


def test_chat_shows_a_tool_calls_unicode_arguments_as_written(tmp_path: Path) -> None:
    """chat's live view prints each call as `@e3 calls search_files({"query": "\\u65e5..."})`:
    activity_line (interfaces/render.py:203-206) previews the stored arguments text as it is,
    and the scripted model stores them with json.dumps' ASCII escapes
    (runtime/models/scripted.py:114; an OpenAI-compatible model's own text is kept as it came,
    often escaped the same way). A person following the run reads `Zo\\u00eb` for Zoë and
    nothing legible for Japanese, Hebrew or emoji. Show the arguments as text (parse and dump
    with ensure_ascii=False, then `visible`)."""
    steps = [
        {"tool_calls": [{"name": "search_files", "arguments": {"query": "日本語 Zoë"}}]},
        {"reply": "searched"},
    ]
    model = _script(tmp_path, steps)
    proc = run_morphz(
        tmp_path, "chat", "--model", model, "--db", str(tmp_path / "s.db"), stdin="find it\n"
    )
    assert proc.returncode == 0, proc.stderr
    calls = [line for line in proc.stderr.splitlines() if " calls search_files(" in line]
    assert calls, proc.stderr
    assert "日本語 Zoë" in calls[0], calls[0]


# --- 6. exec denies "ask" tools without a word ---------------------------------------------------


def test_exec_says_on_stderr_which_calls_ask_default_denied(tmp_path: Path) -> None:
    """`morphz exec` answers an "ask" tool with ask_default (deny by default) and prints only
    the reply, exit status 0: a user who asked for a file to be written sees the agent's answer
    and no file, and nothing says a call was denied or which setting allows it (the denial is
    only in the events, `approval_result` "write_file: denied"). exec should say on stderr (JSON
    stays on stdout) which calls were denied and how to allow them (`[policies] write_file =
    "allow"` or `ask_default = "allow"` in ~/.morphz/morphz.toml, or `morphz chat`)."""
    steps = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "n.txt", "content": "x\n"}}]},
        {"reply": "Wrote n.txt."},
    ]
    model = _script(tmp_path, steps)
    proc = run_morphz(tmp_path, "exec", "write n.txt", "--model", model, "--db", "s.db")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "n.txt").exists()
    assert "write_file" in proc.stderr, proc.stderr
    assert "ask_default" in proc.stderr or "[policies]" in proc.stderr, proc.stderr


# --- 7. right-to-left text at a terminal --------------------------------------------------------


def test_directional_marks_in_right_to_left_text_are_kept_at_a_terminal(tmp_path: Path) -> None:
    """At a terminal `out` shows every format character but the zero-width (non-)joiner as
    \\uXXXX (interfaces/tables.py:36-37). That is right for the bidi embeddings, overrides and
    isolates (U+202A-202E, U+2066-2069) that reorder what is shown, but the right-to-left and
    left-to-right marks (U+200F, U+200E, U+061C) are ordinary punctuation of Hebrew and Arabic
    text (a number or Latin word inside a sentence): they reorder nothing strong and hide
    nothing, yet a Hebrew reply shows `\\u200f` in its words. The soft hyphen (U+00AD, common in
    text copied from the web) is the same. Keep the marks; escape what can reorder or hide."""
    reply = "שלום\u200f 123\u200f עולם, Donau\u00addampf"
    model = _script(tmp_path, [{"reply": reply}])
    shown = _at_a_terminal(
        tmp_path, "exec", "hi", "--model", model, "--db", str(tmp_path / "s.db")
    ).decode()
    assert "\\u200f" not in shown and "\\u00ad" not in shown, shown
    assert reply in shown


# --- 8. output not written: the advice names another context ------------------------------------


def test_output_not_written_advice_names_the_context_and_the_store(tmp_path: Path) -> None:
    """`morphz exec ops PROMPT --db DB > /dev/full` (a full disk) did its work: exit 3 and "do
    not run it again for the output: `morphz context events` and `morphz context show` show the
    store as it is now" (interfaces/unwritten.py:76-80). Those commands, as written, show
    context-default of ~/.morphz/morphz.db: another context in another store ("no store at
    ..."). The advice should carry the command's CTX and --db."""
    model = _script(tmp_path, [{"reply": "done"}])
    db = str(tmp_path / "elsewhere.db")
    with open("/dev/full", "w", encoding="utf-8") as full:
        proc = run_morphz(tmp_path, "exec", "ops", "go", "--model", model, "--db", db, stdout=full)
    assert proc.returncode == 3, proc.stderr
    advice = re.findall(r"`(morphz context (?:events|show)[^`]*)`", proc.stderr)
    assert advice, proc.stderr
    for command in advice:
        argv = shlex.split(command)
        assert "ops" in argv and db in argv, command


# --- the fixes' edges, as unit checks -------------------------------------------------------------


def test_visible_keeps_word_marks_but_escapes_what_reorders_hides_or_overwrites() -> None:
    """What the fixes above keep at a terminal, and what stays escaped: a lone carriage return
    (it can overwrite a line), bidi embeddings, overrides and isolates, a zero-width space."""
    from morphz.interfaces.tables import visible

    assert visible("a\r\nb\r\n", keep="\n\t", crlf=True) == "a\r\nb\r\n"
    assert visible("a\rb\r\r\n", keep="\n\t", crlf=True) == "a\\x0db\\x0d\r\n"
    assert visible("a\r\nb") == "a\\x0d\nb"  # a table cell: no CR is kept
    kept = "\u200e\u200f\u061c\u00ad\u200c\u200d"
    assert visible(f"x{kept}y") == f"x{kept}y"
    for hidden in ("\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\U000e0041"):
        assert hidden not in visible(f"x{hidden}y"), hidden


def test_activity_line_shows_unparseable_arguments_as_stored_and_approvals_as_written() -> None:
    from morphz.events import Event
    from morphz.interfaces.render import activity_line

    def event(kind: str, payload: dict[str, Any]) -> Event:
        return Event(
            context_id="ctx",
            seq=2,
            kind=kind,
            session_id="default",
            time="t",
            recorded_at="t",
            text=None,
            meta={},
            payload=payload,
            version=0,
            clock=0,
            head="h",
        )

    broken = {"tool_calls": [{"name": "read_file", "arguments": '{"path": "Zo\\u00eb'}]}
    assert '{"path": "Zo\\u00eb' in activity_line(event("model_reply", broken))
    asked = {"tool": "write_file", "arguments": {"path": "日本.txt"}, "call": "c1"}
    assert "日本.txt" in activity_line(event("approval_request", asked))
