"""Chat models: the :class:`ChatModel` contract and what it exchanges (docs/design.md K4).

Fakes for tests live in :mod:`shelfhand.testing`; the OpenAI-compatible adapter in
:mod:`shelfhand.providers.openai_chat`; recovery of tool calls written as text in
:mod:`shelfhand.models.textcalls`.
"""

from shelfhand.models.base import (
    ChatModel,
    ModelResponse,
    StreamChunk,
    StreamDone,
    StreamText,
    ToolSchema,
    Usage,
)

__all__ = [
    "ChatModel",
    "ModelResponse",
    "StreamChunk",
    "StreamDone",
    "StreamText",
    "ToolSchema",
    "Usage",
]
