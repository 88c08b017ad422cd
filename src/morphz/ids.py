"""Identifier syntax shared by every layer: frame, checkpoint, session and context ids, and
event refs.

- An *id* (frame, checkpoint, session, context, relation name) is 1-256 characters of letters
  (with their combining marks), digits and ``_ - . : /``. It may not be digits only (that
  would read as a number) and cannot start with ``@`` (refs own that prefix). ``/``
  namespaces are allowed: ``deployment/current``.
- An *event ref* is ``@e<seq>`` with seq >= 1 and no leading zeros: ``@e42``.
"""

from __future__ import annotations

import re
import unicodedata

MAX_ID_LENGTH = 256

_ID_RE = re.compile(r"(?!\d+\Z)[\w.:/-]{1,256}")
_MARKS = frozenset({"Mn", "Mc", "Me"})  # combining marks: part of the letter before them
_REF_RE = re.compile(r"@e([1-9][0-9]{0,17})")


def is_id(text: str) -> bool:
    """True when ``text`` is a valid frame/checkpoint/session/context id."""
    return _ID_RE.fullmatch(text) is not None or _marked_id(text)


def _marked_id(text: str) -> bool:
    """An id whose letters carry combining marks (Hindi ``भाषा``, Thai, a decomposed ``é``):
    the word class of ``re`` leaves marks out, so they are allowed here after the first
    character."""
    if not 1 < len(text) <= MAX_ID_LENGTH or _ID_RE.fullmatch(text[0]) is None:
        return False
    return all(
        _ID_RE.fullmatch(c) is not None or unicodedata.category(c) in _MARKS for c in text[1:]
    )


def is_ref(text: str) -> bool:
    """True when ``text`` is an event ref such as ``@e42``."""
    return _REF_RE.fullmatch(text) is not None


def ref_seq(ref: str) -> int:
    """The sequence number of ``@e<seq>``; raises ``ValueError`` for anything else."""
    match = _REF_RE.fullmatch(ref)
    if match is None:
        raise ValueError(f"not an event ref: {ref!r}")
    return int(match.group(1))


def make_ref(seq: int) -> str:
    """The short ref of event ``seq``: ``make_ref(42) == "@e42"``."""
    return f"@e{seq}"


def describe_id_rules() -> str:
    return (
        "ids are 1-256 characters of letters, digits and _ - . : / (not digits only, "
        "not starting with @), e.g. deployment/current; event refs look like @e42"
    )
