"""One request through a provider adapter, its client closed after it (adapter tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from morphz.runtime.models.anthropic_messages import AnthropicMessagesModel
from morphz.runtime.models.base import ModelRequest
from morphz.runtime.models.openai_compat import OpenAIChatModel


def request_once(model: OpenAIChatModel | AnthropicMessagesModel) -> Any:
    """The response to one minimal request (or its error), the model's client then closed."""

    async def go() -> Any:
        try:
            return await model.request(ModelRequest("(context-encoding)", ()))
        finally:
            await model.aclose()

    return asyncio.run(go())
