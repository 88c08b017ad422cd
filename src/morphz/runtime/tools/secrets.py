"""The provider secrets no process Morphz starts inherits (the exec tool's commands, the regex
search's child): the API keys, and ``OPENAI_BASE_URL``, which may hold credentials
(https://user:password@host)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

HIDDEN_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")


def without_secrets(
    extra: Mapping[str, str] | None = None, hidden: Iterable[str] = HIDDEN_ENV
) -> dict[str, str]:
    """This process's environment without ``hidden`` (the secrets), with ``extra`` over it:
    the environment of a child Morphz starts."""
    drop = set(hidden)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env
