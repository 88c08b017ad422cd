"""Opaque, tamper-evident continuation tokens.

A cursor is ``base64url(zlib(json payload)) "." base64url(hmac-sha256(key, payload)[:16])``,
signed with the store's own secret key. The payload names the query it belongs to (a digest of
the parameters), so a cursor from one search cannot continue another; any edit breaks the MAC.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import zlib
from typing import Any

from morphz.errors import CursorError

_MAC_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def fingerprint(params: dict[str, Any]) -> str:
    """A short digest of the parameters a cursor is bound to."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def encode(key: bytes, payload: dict[str, Any]) -> str:
    raw = zlib.compress(json.dumps(payload, separators=(",", ":")).encode(), 6)
    mac = hmac.new(key, raw, hashlib.sha256).digest()[:_MAC_BYTES]
    return f"{_b64(raw)}.{_b64(mac)}"


def decode(key: bytes, token: str, expected_fingerprint: str) -> dict[str, Any]:
    """The payload of ``token``; CursorError when it was altered or belongs to another query."""
    hint = "pass back the next_cursor of the same query unchanged, or search again without it"
    if not isinstance(token, str):
        raise CursorError(f"a cursor is text, not {type(token).__name__}: {hint}")
    try:
        body, mac = token.split(".")
        raw, given = _unb64(body), _unb64(mac)
    except (ValueError, binascii.Error, AttributeError) as exc:
        raise CursorError(f"this cursor is malformed: {hint}") from exc
    if _b64(raw) != body or _b64(given) != mac:  # only the exact issued spelling is accepted
        raise CursorError(f"this cursor was altered: {hint}")
    expected = hmac.new(key, raw, hashlib.sha256).digest()[:_MAC_BYTES]
    if not hmac.compare_digest(given, expected):
        raise CursorError(f"this cursor was altered or comes from another store: {hint}")
    payload: dict[str, Any] = json.loads(zlib.decompress(raw))
    if payload.get("q") != expected_fingerprint:
        raise CursorError(f"this cursor belongs to a different query: {hint}")
    return payload


def pack_ids(ids: list[int]) -> list[int]:
    """Sorted ids as deltas (small numbers compress well)."""
    out: list[int] = []
    last = 0
    for value in sorted(ids):
        out.append(value - last)
        last = value
    return out


def unpack_ids(deltas: list[int]) -> set[int]:
    out: set[int] = set()
    total = 0
    for delta in deltas:
        total += delta
        out.add(total)
    return out
