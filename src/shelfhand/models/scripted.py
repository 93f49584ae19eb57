"""Fake chat models for tests and demos (docs/design.md K4).

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
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from shelfhand.core.errors import (
    ConfigurationError,
    InvalidArgumentError,
    ModelError,
    ModelProviderError,
    ModelTimeoutError,
    ScriptExhaustedError,
)
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
    "CyclingScriptModel",
    "FunctionModel",
    "ModelTurn",
    "ScriptedFailure",
    "ScriptedModel",
    "ScriptedText",
    "ScriptedToolCall",
    "failure",
    "load_scripted_model",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedFailure:
    """A turn in which the model provider fails (build it with :func:`failure`)."""

    kind: str = "provider"
    """``timeout`` raises :class:`ModelTimeoutError`; ``provider`` :class:`ModelProviderError`."""
    message: str = ""
    status_code: int | None = None

    def error(self) -> ModelError:
        if self.kind == "timeout":
            return ModelTimeoutError(self.message or "scripted model timed out")
        return ModelProviderError(
            self.message or "scripted model provider failed", status_code=self.status_code
        )


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


def failure(
    kind: str = "provider", message: str = "", *, status_code: int | None = None
) -> ScriptedFailure:
    """A turn in which the model fails: ``kind`` is ``timeout`` or ``provider``."""
    if kind not in ("timeout", "provider"):
        raise InvalidArgumentError(f"failure kind must be 'timeout' or 'provider', not {kind!r}")
    return ScriptedFailure(kind=kind, message=message, status_code=status_code)


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


class _FakeModel(ABC):
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

    @abstractmethod
    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> object:
        """Provided by each subclass."""

    async def request(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> ModelResponse:
        """Answer with the next turn (a scripted failure raises its model error)."""
        self._record(messages, tools)
        turn = await self._turn(messages, tools)
        if isinstance(turn, ScriptedFailure):
            raise turn.error()
        return self._response(turn)

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


class CyclingScriptModel(_FakeModel):
    """A chat model that replays one script for every user message.

    The i-th request after the latest user message gets ``script[i % len(script)]``, so any
    number of conversations — concurrently, in any order — each see the same deterministic
    sequence per turn (load tests, demos of a running service).

    Args:
        script: The turns of one user turn, as for :class:`ScriptedModel`.
        name: The model name reported in responses.

    Only the most recent requests are kept in ``requests`` (between :attr:`KEEP_REQUESTS` and
    twice that), so a process serving it for hours does not grow.
    """

    KEEP_REQUESTS = 100

    def __init__(
        self, script: Sequence[ModelTurn | str | ScriptedFailure], *, name: str = "scripted-cycle"
    ) -> None:
        if not script:
            raise InvalidArgumentError("a cycling script needs at least one turn")
        super().__init__(name)
        self._script = list(script)

    def _record(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> None:
        # it serves long-running processes (a service under load): keep only recent requests
        if len(self.requests) >= 2 * self.KEEP_REQUESTS:
            del self.requests[: self.KEEP_REQUESTS]
            del self.tool_schemas[: self.KEEP_REQUESTS]
        super()._record(messages, tools)

    async def _turn(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> object:
        since_user = 0
        for message in reversed(messages):
            if message.role == "user":
                break
            if message.role == "assistant":
                since_user += 1
        return self._script[since_user % len(self._script)]


def _turn_item(raw: Any, where: str) -> TurnItem | ScriptedFailure:
    if isinstance(raw, str):
        return text(raw)
    if isinstance(raw, Mapping):
        if "text" in raw:
            return text(str(raw["text"]))
        if "tool_call" in raw:
            args = raw.get("arguments")
            if args is not None and not isinstance(args, (Mapping, str)):
                raise ConfigurationError(f"{where}: tool_call arguments must be an object")
            return tool_call(str(raw["tool_call"]), args, id=raw.get("id"))
        if "error" in raw:
            kind = str(raw["error"])
            if kind not in ("timeout", "provider"):
                raise ConfigurationError(f"{where}: error must be 'timeout' or 'provider'")
            status = raw.get("status")
            return failure(
                kind,
                str(raw.get("message", "")),
                status_code=int(status) if status is not None else None,
            )
    raise ConfigurationError(
        f'{where}: a turn is a string, {{"text": ...}}, {{"tool_call": name, "arguments": {{...}}}}'
        ', {"error": "timeout"|"provider"} or a list of them'
    )


def load_scripted_model(path: str | Path) -> ScriptedModel | CyclingScriptModel:
    """Build a fake model from a JSON script file (``SHELFHAND_MODEL=scripted:<path>``).

    The file holds a list of turns, or an object ``{"turns": [...], "cycle": false,
    "name": "..."}``. A turn is a string (text reply), ``{"text": ...}``,
    ``{"tool_call": "name", "arguments": {...}}``, ``{"error": "timeout"}`` /
    ``{"error": "provider", "status": 503}``, or a list of them (several calls in one reply).
    With ``"cycle": true`` the script is replayed for every user message
    (:class:`CyclingScriptModel`); otherwise turns are used once each, in order
    (:class:`ScriptedModel`), across every conversation of the process.

    Raises:
        ConfigurationError: The file is missing or not a valid script.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read model script {file}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"model script {file} is not valid JSON: {exc.msg}") from None
    if isinstance(data, list):
        data = {"turns": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("turns"), list):
        raise ConfigurationError(
            f'model script {file} must be a list of turns or {{"turns": [...]}}'
        )
    turns: list[Any] = []
    for i, raw in enumerate(data["turns"]):
        where = f"{file} turn {i + 1}"
        if isinstance(raw, list):
            turns.append([_turn_item(item, where) for item in raw])
        else:
            turns.append(_turn_item(raw, where))
    name = str(data.get("name") or "scripted")
    if data.get("cycle"):
        if not turns:
            raise ConfigurationError(f"model script {file}: a cycling script needs turns")
        return CyclingScriptModel(turns, name=name)
    return ScriptedModel(turns, name=name)
