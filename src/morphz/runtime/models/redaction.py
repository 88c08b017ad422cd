"""The API key kept out of what an adapter says: a provider's error text may quote it (a proxy
echoing the request's headers, a server naming the key it refused), and that text goes into
errors, an activation's recorded reason and the store.

Text is redacted whole before it is cut to a length (a cut through the key would leave most of
it where the whole key is no longer found), and a start of the key at least
:data:`SHORTEST_REDACTED` characters long that ends a cut text (cut here, or by the server
before it reached us) is hidden too.
"""

from __future__ import annotations

SHORTEST_REDACTED = 8  # a shorter key is redacted only after "Bearer " (not every "none" or "x")
HIDDEN = "***"
_CUT_MARKS = "….' \""  # what may follow a cut key's start at the end of a text


def hidden(text: str, key: str) -> str:
    """``text`` with ``key`` (and ``Bearer KEY``) replaced by ``***``, and a start of the key
    that ends the text (before any closing quote or ellipsis) hidden too."""
    if not key:
        return text
    text = text.replace(f"Bearer {key}", f"Bearer {HIDDEN}")
    if len(key) < SHORTEST_REDACTED:
        return text
    return _cut_start_hidden(text.replace(key, HIDDEN), key)


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
