"""The chat model contract (docs/design.md K4).

A :class:`ChatModel` turns a list of messages (plus tool schemas in the OpenAI function
format) into one assistant :class:`~shelfhand.core.messages.Message`. ``request`` returns the
whole reply; ``stream`` yields :class:`StreamText` chunks as text arrives and ends with exactly
one :class:`StreamDone` carrying the assembled reply (tool calls complete).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from shelfhand.core.messages import Message
from shelfhand.core.results import Usage

__all__ = [
    "FINISH_REPETITION",
    "ChatModel",
    "ModelResponse",
    "StreamChunk",
    "StreamDone",
    "StreamText",
    "ToolSchema",
    "Usage",
]

ToolSchema: TypeAlias = Mapping[str, Any]
"""One tool in the OpenAI ``{"type": "function", "function": {...}}`` format."""


FINISH_REPETITION = "repetition"
"""The finish reason of a reply its adapter stopped because it was caught in a loop (see
:mod:`shelfhand.providers.repetition`): its text is kept up to where the loop began, so a
streamed reply's deltas held more than its message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    message: Message
    """The assistant message (text and/or tool calls)."""
    usage: Usage | None = None
    finish_reason: str | None = None
    model_name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamText:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamDone:
    response: ModelResponse
    type: Literal["done"] = "done"


StreamChunk: TypeAlias = StreamText | StreamDone


@runtime_checkable
class ChatModel(Protocol):
    """Anything that can answer a conversation, optionally calling tools."""

    @property
    def name(self) -> str: ...

    async def request(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> ModelResponse: ...

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> AsyncIterator[StreamChunk]: ...
