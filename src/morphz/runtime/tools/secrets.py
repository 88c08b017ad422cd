"""The provider secrets no process Morphz starts inherits (the exec tool's commands, the regex
search's child): the API keys, and ``OPENAI_BASE_URL``, which may hold credentials
(https://user:password@host)."""

from __future__ import annotations

HIDDEN_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")
