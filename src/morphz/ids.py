"""Identifier syntax shared by every layer: frame, checkpoint, session and context ids, and
event refs.

- An *id* (frame, checkpoint, session, context, relation name) is 1-256 characters of letters
  (with their combining marks), digits and ``_ - . : /``. It may not be digits only (that
  would read as a number) and cannot start with ``@`` (refs own that prefix). ``/``
  namespaces are allowed: ``deployment/current``. An id with combining marks must be in
  composed form (NFC), so that a decomposed ``café`` is not a second id beside the composed
  one; ids without marks are taken as they are (stores made before marks were allowed hold
  them, whatever their form). A new context's id may not begin with ``-`` either
  (``checks.check_new_context_id``: a command line would read it as an option); contexts made
  before keep theirs.
- What a letter or a mark is comes from the running Python's Unicode database (3.11 has Unicode
  14.0, 3.12 15.0, 3.13 15.1). :func:`is_id` is that rule, for ids a caller gives; an id read
  back from a store (a stored transaction replayed, a context opened, a frame looked up) is
  checked with :func:`is_stored_id`, which also takes code points this Python does not assign
  where a letter or a mark may stand, so a store a newer Python wrote reads (and audits) the
  same here. A *new* id (a frame, checkpoint or relation a transaction creates, a new context)
  must also be in composed form whatever it holds (:func:`is_new_id`): an ``Å`` spelled with
  the angstrom sign would print like the letter it stands for.
- An *event ref* is ``@e<seq>`` with seq >= 1 and no leading zeros: ``@e42``.
"""

from __future__ import annotations

import re
import unicodedata

MAX_ID_LENGTH = 256

_ID_RE = re.compile(r"(?!\d+\Z)[\w.:/-]{1,256}")
_MARKS = frozenset({"Mn", "Mc", "Me"})  # combining marks: part of the letter before them
_CHAR_RE = re.compile(r"[\w.:/-]")  # one character an id may hold (besides marks)
# the grapheme joiner and the Mongolian free variation selectors (variation selectors: ranges)
_IGNORABLE_MARKS = frozenset({0x034F, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F})
_REF_RE = re.compile(r"@e([1-9][0-9]{0,17})")


def is_id(text: str) -> bool:
    """True when ``text`` is a valid frame/checkpoint/session/context id."""
    # an id without marks is one as before (the stores hold such ids, whatever their form)
    return _ID_RE.fullmatch(text) is not None or _marked_id(text)


def is_stored_id(text: str) -> bool:
    """True when ``text`` is an id as a store may hold it: :func:`is_id`, or would be one if
    each code point this Python's Unicode database does not assign (category Cn, save the
    noncharacters, which no Unicode version assigns) were a letter; a newer Python may have
    written it (a CJK Extension H ideograph, a Kawi letter or mark) with its newer tables."""
    if is_id(text):
        return True
    if text.isascii():
        return False
    stand_in = "".join(_STAND_IN if _unassigned(c) else c for c in text)
    return stand_in != text and is_id(stand_in)


# a letter in every Unicode version (Lo, no decomposition, ccc 0, in no composition): NFC treats
# it as it treats an unassigned code point, so an id's composed form is the same with it
_STAND_IN = "一"


def _unassigned(char: str) -> bool:
    """Whether ``char`` is a code point this Python's Unicode database does not assign (and no
    noncharacter): a later version may make it a letter or a mark."""
    if unicodedata.category(char) != "Cn":
        return False
    code = ord(char)
    return not (0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE)


def is_new_id(text: str) -> bool:
    """True when ``text`` may name something new: an id by this Python's rules (:func:`is_id`)
    in composed form (NFC), so that two spellings of one text (``Å`` as U+00C5 or as the
    angstrom sign U+212B, an ohm sign, a CJK compatibility ideograph, Hangul in jamo) are never
    two ids that print alike."""
    return is_id(text) and (text.isascii() or unicodedata.is_normalized("NFC", text))


def _marked_id(text: str) -> bool:
    """An id whose letters carry combining marks (Hindi ``भाषा2``, Thai, ``ṩ``): the word class
    of ``re`` leaves marks out, so they are allowed here after the first character; the id must
    be in composed form (NFC), so that two spellings of one text are never two ids, and marks
    that draw nothing (variation selectors, the grapheme joiner) are not allowed."""
    if not 1 < len(text) <= MAX_ID_LENGTH or _CHAR_RE.fullmatch(text[0]) is None:
        return False
    if not unicodedata.is_normalized("NFC", text):
        return False
    if not any(unicodedata.category(c) in _MARKS for c in text):  # then _ID_RE's rules hold
        return False
    return all(
        _CHAR_RE.fullmatch(c) is not None
        or (unicodedata.category(c) in _MARKS and not _invisible(c))
        for c in text[1:]
    )


def _invisible(mark: str) -> bool:
    """A default-ignorable mark: it draws nothing, so an id holding it looks like one without."""
    code = ord(mark)
    return code in _IGNORABLE_MARKS or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


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


def describe_id_rules(text: object = None) -> str:
    """The id rules, for an error; ``text``, the refused id, adds its composed (NFC) spelling
    when that is what it lacks, or the code point this Python does not know."""
    rules = (
        "ids are 1-256 characters of letters (with their combining marks, in composed form, "
        "NFC), digits and _ - . : / (not digits only, not starting with @), e.g. "
        "deployment/current; event refs look like @e42"
    )
    if isinstance(text, str) and not text.isascii():
        composed = unicodedata.normalize("NFC", text)
        unknown = next((c for c in text if _unassigned(c)), None)
        if composed != text and is_id(composed):
            rules += f"; this one is not in composed form: write it as {composed!r}"
        elif unknown is not None:
            rules += (
                f"; this one holds U+{ord(unknown):04X}, which this Python's Unicode database "
                f"({unicodedata.unidata_version}) does not know: a new id may hold only "
                "characters it knows (a newer Python's ids are read as they are)"
            )
    return rules
