"""What the command line prints on standard output: JSON as the terminal can take it, and text
exact to a pipe or a file but shown safe at a terminal (:func:`out`, the one place output is
written, which maps standard output refusing it to :class:`unwritten.OutputNotWritten`)."""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from morphz.interfaces import tables, unwritten
from morphz.txlang.sexpr import unicode_problem


def as_json(data: Any) -> str:
    """JSON as the terminal can take it: UTF-8 text as it is, \\u escapes (still the same
    JSON) when standard output has another encoding (a Latin-1 locale), and at a terminal for
    the control and format characters JSON leaves as they are (DEL, C1 controls such as CSI,
    bidi overrides), so that :func:`out` finds nothing to show otherwise."""
    text = json.dumps(data, indent=2, ensure_ascii=not _utf8_out())
    if unicode_problem(text) is not None:  # a lone surrogate (an argument not in UTF-8)
        text = json.dumps(data, indent=2, ensure_ascii=True)  # \udcff: still valid JSON
    if _at_a_terminal() and not text.isprintable():  # outside strings, JSON has only \n
        text = "".join(c if tables.visible(c) == c else _json_escape(c) for c in text)
    return text


def _json_escape(c: str) -> str:
    """``c`` as a JSON string escape (a surrogate pair beyond the BMP): the same JSON value."""
    return json.dumps(c, ensure_ascii=True)[1:-1]


def _at_a_terminal() -> bool:
    """Whether standard output is a terminal (not a pipe, a file, or closed)."""
    stream = sys.stdout
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a stream without isatty, or closed
        return False


def _out_encoding() -> str:
    return str(getattr(sys.stdout, "encoding", None) or "utf-8")


def _utf8_out(*, bom: bool = True) -> bool:
    """Whether standard output encodes UTF-8 (``bom``: counting utf-8-sig, whose stream writes
    a byte-order mark first, which a pipe or a file must not receive)."""
    name = _out_encoding().lower().replace("-", "").replace("_", "")
    return name == "utf8" or (bom and name == "utf8sig")


def out(text: str) -> None:
    """Print ``text`` as it is to a pipe or a file. (``click.echo`` alone strips ANSI escape
    sequences when stdout is not a terminal; stored text, such as a tool result with colour
    codes, must come out as it was stored and as a model is sent it.) At a terminal, control
    characters but line breaks (a line feed, and a carriage return right before one) and tabs,
    and format characters, are shown as ``\\xNN`` / ``\\uXXXX`` (:func:`tables.visible`):
    exact content (a reply, an encoding, a recall read) is remote text a model or a file chose,
    and an escape sequence in it would drive the terminal (OSC 52 sets the clipboard, CSI
    clears the screen or forges a prompt). On a terminal whose encoding cannot hold a character
    (a Latin-1 locale), that character is shown as a backslash escape instead of failing; to a
    pipe or a file the text is written as UTF-8 whatever standard output's encoding.
    Standard output refusing it (a full disk) is :class:`unwritten.OutputNotWritten`; a broken
    pipe stays click's (exit status 1, nothing printed)."""
    written = _as_written(text)
    try:
        if isinstance(written, bytes):  # to the byte stream itself: click.echo would let a
            sys.stdout.flush()  # utf-8-sig text stream put its byte-order mark first
            _binary_out().write(written + b"\n")
            _binary_out().flush()
        else:
            click.echo(written, color=True)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
        raise unwritten.OutputNotWritten(exc) from None


def _as_written(text: str) -> str | bytes:
    """``text`` as :func:`out` writes it: shown safe at a terminal (in the terminal's encoding,
    a character it cannot hold as a backslash escape), else the text itself, as UTF-8 bytes
    when standard output has another encoding (cp1252 on Windows, a Latin-1 locale), so what
    a pipe or a file receives is the stored text's bytes whatever the locale."""
    if _at_a_terminal():
        text = tables.visible(text, keep="\n\t", crlf=True)
        if not _utf8_out():
            encoding = _out_encoding()
            text = text.encode(encoding, "backslashreplace").decode(encoding)
        return text
    if _utf8_out(bom=False) or _binary_out() is None:
        return text
    return text.encode("utf-8", "backslashreplace")  # a lone surrogate: cannot be in stored text


def _binary_out() -> Any:
    """The byte stream under standard output, or None (a text stream without one)."""
    return getattr(sys.stdout, "buffer", None)


def emit(fmt: str, data: Any, text: Callable[[], str]) -> None:
    """Print ``data`` as JSON, or the text ``text()`` renders."""
    out(as_json(data) if fmt == "json" else text())
