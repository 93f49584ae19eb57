"""Fake chat models for tests and demos (DESIGN K4).

:class:`ScriptedModel` plays back a queue of turns; :class:`FunctionModel` computes each turn
with a function of the conversation. Both implement
:class:`~shelfhand.models.base.ChatModel`, record what they were asked, and stream text in
several small pieces so that streaming code paths are exercised::

    from shelfhand.testing import ScriptedModel, text, tool_call

    model = ScriptedModel([
        tool_call("retrieve", {"query": "退货政策"}),
        [tool_call("query_stock", {"sku": "SKU2024-011"}), tool_call("quote_price", {"sku": "SKU2024-011"})],
        text("拆封后 7 天内可退 [1]。"),
    ])

They are deliberately cheap (no copies of the conversation, no validation in the hot path) so
that agent tests built on them run in microseconds.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from shelfhand.core.errors import ScriptExhaustedError
from shelfhand.core.messages import Block, Message, TextBlock, ToolCallBlock, ToolResultBlock
from shelfhand.models.base import (
    ModelResponse,
    StreamChunk,
    StreamDone,
    StreamText,
    ToolSchema,
    Usage,
)

__all__ = [
    "FunctionModel",
    "ModelTurn",
    "ScriptedModel",
    "ScriptedText",
    "ScriptedToolCall",
    "stream_pieces",
    "text",
    "tool_call",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedText:
    """A piece of assistant text in a scripted turn (build it with :func:`text`)."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedToolCall:
    """A tool call in a scripted turn (build it with :func:`tool_call`).

    ``id`` is ``None`` when the model should number the call itself (``call_1``, ``call_2``…).
    """

    name: str
    arguments: str = "{}"
    id: str | None = None


TurnItem: TypeAlias = ScriptedText | ScriptedToolCall
ModelTurn: TypeAlias = TurnItem | Sequence[TurnItem]
"""One model reply: a text, a tool call, or a list of them (several calls in one reply)."""

FunctionResult: TypeAlias = (
    str | TurnItem | ToolCallBlock | Sequence[TurnItem | ToolCallBlock] | Message | ModelResponse
)
TurnFunction: TypeAlias = Callable[
    [list[Message], list[ToolSchema]], FunctionResult | Awaitable[FunctionResult]
]

# Splits text into words with their trailing whitespace; runs of 6+ non-space characters
# (Chinese has no spaces) are cut so streaming is observable in every language. The pieces
# always join back to the exact text.
_PIECES = re.compile(r"\S{1,6}\s*|\s+")


def text(content: str) -> ScriptedText:
    """A turn (or part of a turn) in which the model answers with ``content``."""
    return ScriptedText(text=content)


def tool_call(
    name: str, args: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> ScriptedToolCall:
    """A turn (or part of a turn) in which the model calls tool ``name``.

    Args:
        name: The tool to call.
        args: The arguments, as a mapping (encoded to JSON) or as raw JSON text (kept as is,
            so tests can send malformed arguments on purpose). ``None`` means ``{}``.
        id: A fixed call id; by default the model numbers calls ``call_1``, ``call_2``…
    """
    if args is None:
        arguments = "{}"
    elif isinstance(args, str):
        arguments = args
    else:
        arguments = json.dumps(args, ensure_ascii=False)
    return ScriptedToolCall(name=name, arguments=arguments, id=id)


def stream_pieces(content: str) -> list[str]:
    """Cut ``content`` into the pieces a fake model streams (they join back to ``content``)."""
    return _PIECES.findall(content)


def _describe(message: Message | None) -> str:
    if message is None:
        return "no messages"
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(repr(block.text[:200]))
        elif isinstance(block, ToolCallBlock):
            parts.append(f"tool call {block.name}({block.arguments[:120]})")
        elif isinstance(block, ToolResultBlock):
            flag = " [error]" if block.is_error else ""
            parts.append(f"result of {block.name}{flag}: {block.content[:200]!r}")
    return f"{message.role}: " + ("; ".join(parts) or "(empty)")


class _FakeModel:
    """What the two fake models share: call numbering, recording, streaming."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._call_count = 0
        self.requests: list[list[Message]] = []
        """Every conversation the model was asked to answer, in order."""
        self.tool_schemas: list[list[dict[str, Any]]] = []
        """The tool schemas offered with each request, in order."""

    @property
    def name(self) -> str:
        return self._name

    def _record(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> None:
        self.requests.append(list(messages))
        self.tool_schemas.append([dict(t) for t in tools])

    def _next_call_id(self) -> str:
        self._call_count += 1
        return f"call_{self._call_count}"

    def _block(self, item: TurnItem | ToolCallBlock) -> Block:
        if isinstance(item, ScriptedText):
            return TextBlock(text=item.text)
        if isinstance(item, ScriptedToolCall):
            return ToolCallBlock(
                id=item.id or self._next_call_id(), name=item.name, arguments=item.arguments
            )
        if isinstance(item, ToolCallBlock):
            return item
        raise TypeError(
            f"a model turn item must be text(...) or tool_call(...), not {type(item).__name__}"
        )

    def _response(self, turn: object) -> ModelResponse:
        if isinstance(turn, ModelResponse):
            return turn
        if isinstance(turn, Message):
            message = turn
        else:
            if isinstance(turn, str):
                blocks: tuple[Block, ...] = (TextBlock(text=turn),)
            elif isinstance(turn, (ScriptedText, ScriptedToolCall, ToolCallBlock)):
                blocks = (self._block(turn),)
            elif isinstance(turn, Sequence):
                blocks = tuple(self._block(item) for item in turn)
            else:
                raise TypeError(
                    "a model turn must be text(...), tool_call(...), a list of them, a str, "
                    f"a Message or a ModelResponse, not {type(turn).__name__}"
                )
            message = Message(role="assistant", content=blocks)
        has_calls = any(isinstance(b, ToolCallBlock) for b in message.content)
        return ModelResponse(
            message=message,
            usage=Usage(input_tokens=0, output_tokens=len(message.text) // 4 + 1),
            finish_reason="tool_calls" if has_calls else "stop",
            model_name=self._name,
        )

    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> object:
        raise NotImplementedError

    async def request(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> ModelResponse:
        """Answer with the next turn."""
        self._record(messages, tools)
        return self._response(await self._turn(messages, tools))

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> AsyncIterator[StreamChunk]:
        """Stream the next turn's text in a few pieces, then the whole reply."""
        response = await self.request(messages, tools=tools)
        for piece in _PIECES.findall(response.message.text):
            yield StreamText(text=piece)
        yield StreamDone(response=response)


class ScriptedModel(_FakeModel):
    """A chat model that plays back a script of turns, one per request.

    Args:
        script: The turns in order. Each is :func:`text`, :func:`tool_call`, or a list of
            them (a reply with several tool calls, optionally starting with text). A plain
            ``str``, a :class:`~shelfhand.core.messages.Message` or a
            :class:`~shelfhand.models.base.ModelResponse` is accepted as well.
        name: The model name reported in responses.

    Raises:
        ScriptExhaustedError: From ``request``/``stream`` when every turn has been used.
    """

    def __init__(
        self, script: Sequence[ModelTurn | str | Message | ModelResponse], *, name: str = "scripted"
    ) -> None:
        super().__init__(name)
        self._script = list(script)
        self._position = 0

    @property
    def remaining(self) -> int:
        """How many turns have not been played yet."""
        return len(self._script) - self._position

    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> object:
        if self._position >= len(self._script):
            total = len(self._script)
            raise ScriptExhaustedError(
                f"ScriptedModel ran out of turns: the script holds {total} "
                f"turn{'' if total == 1 else 's'} and request {len(self.requests)} asked for "
                f"another. Last message received: {_describe(messages[-1] if messages else None)}."
                " Add a turn to the script (text(...) or tool_call(...)) or check why the agent "
                "asked the model again."
            )
        turn = self._script[self._position]
        self._position += 1
        return turn


class FunctionModel(_FakeModel):
    """A chat model whose every turn is computed by a function.

    Args:
        fn: Called as ``fn(messages, tools)`` (sync or async). It returns a ``str`` (text
            reply), :func:`text`/:func:`tool_call` or a list of them, a
            :class:`~shelfhand.core.messages.ToolCallBlock` (or a list), a full assistant
            :class:`~shelfhand.core.messages.Message` or a
            :class:`~shelfhand.models.base.ModelResponse`.
        name: The model name; defaults to ``function:<fn name>``.
    """

    def __init__(self, fn: TurnFunction, *, name: str | None = None) -> None:
        super().__init__(name or f"function:{getattr(fn, '__name__', 'model')}")
        self._fn = fn

    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> object:
        result = self._fn(self.requests[-1], list(tools))
        if inspect.isawaitable(result):
            return await result
        return result
