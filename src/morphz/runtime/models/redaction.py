"""The API key kept out of what an adapter says: a provider's error text may quote it (a proxy
echoing the request's headers, a server naming the key it refused), and that text goes into
errors, an activation's recorded reason and the store.

Text is redacted whole before it is cut to a length (a cut through the key would leave most of
it where the whole key is no longer found), and a start of the key at least
:data:`SHORTEST_REDACTED` characters long that ends a cut text (cut here, or by the server
before it reached us) is hidden too. So is the key as Python or JSON writes it escaped (a key
holding a line break or a character outside ASCII: ``repr`` of the header bytes an HTTP client
refused, a JSON body quoting it), which the plain search would not find.
"""

from __future__ import annotations

import json

SHORTEST_REDACTED = 8  # a shorter key is redacted only after "Bearer " (not every "none" or "x")
HIDDEN = "***"
_CUT_MARKS = "….' \""  # what may follow a cut key's start at the end of a text


def hidden(text: str, key: str) -> str:
    """``text`` with ``key`` (and ``Bearer KEY``) replaced by ``***``, and a start of the key
    that ends the text (before any closing quote or ellipsis) hidden too."""
    if not key:
        return text
    for form in _written_forms(key):
        text = text.replace(f"Bearer {form}", f"Bearer {HIDDEN}")
    if len(key) < SHORTEST_REDACTED:
        return text
    for form in _written_forms(key):
        text = text.replace(form, HIDDEN)
    return _cut_start_hidden(text, key)


def _written_forms(key: str) -> list[str]:
    """``key`` as it is, and as ``repr`` of it or of its UTF-8 bytes and JSON write it (each
    between its quotes), longest first: a key with a character they escape is shown escaped."""
    forms = {
        key,
        repr(key)[1:-1],
        repr(key.encode("utf-8", "backslashreplace"))[2:-1],
        json.dumps(key)[1:-1],
    }
    return sorted(forms, key=len, reverse=True)


def cut(text: str, limit: int, key: str) -> str:
    """``text`` with ``key`` hidden, then cut to ``limit`` characters and an ellipsis."""
    text = hidden(text, key)
    if len(text) <= limit:
        return text
    return hidden(text[:limit], key) + "…"


def _cut_start_hidden(text: str, key: str) -> str:
    end = len(text.rstrip(_CUT_MARKS))
    head = text[:end]
    for size in range(min(len(key) - 1, end), SHORTEST_REDACTED - 1, -1):
        if head.endswith(key[:size]):
            return head[: end - size] + HIDDEN + text[end:]
    return text
