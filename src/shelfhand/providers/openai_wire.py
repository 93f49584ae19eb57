"""The chat-completions wire format: our messages out, replies and stream chunks in.

Shared by :class:`~shelfhand.providers.openai_chat.OpenAIChatModel` and the tool modes in
:mod:`shelfhand.providers.tool_modes`. Parsing is tolerant: ``content`` as a string or a list of
parts, tool calls with or without ids and indexes, arguments as JSON text or as an object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from shelfhand.core.errors import ModelProviderError
from shelfhand.core.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from shelfhand.core.names import valid_text
from shelfhand.models.base import ToolSchema, Usage

__all__ = [
    "PartialCall",
    "StreamReply",
    "as_dict",
    "content_text",
    "messages_to_openai",
    "usage_of",
]


def messages_to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages as chat-completions message dicts.

    Tool results become one ``role: "tool"`` message per
    :class:`~shelfhand.core.messages.ToolResultBlock`; citation blocks are not sent.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        # An assistant turn with nothing to say (say, citations only) is not sent; text in a
        # tool message without results has no call id to answer, so it goes as user text.
        if text or calls or (not results and message.role != "assistant"):
            role = "user" if message.role == "tool" else message.role
            entry: dict[str, Any] = {"role": role, "content": text}
            if calls:
                # The spec allows null content next to tool calls; "" confuses some servers.
                entry["content"] = text or None
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _json_arguments(c)},
                    }
                    for c in calls
                ]
            if message.name:
                entry["name"] = message.name
            out.append(entry)
        out.extend(
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results
        )
    return out


def _json_arguments(call: ToolCallBlock) -> str:
    """A call's arguments as JSON text. Arguments the model wrote that are not JSON (refused by
    the toolkit, whose error result follows) go as a JSON string: llama.cpp parses the
    arguments of every call in the history and answers HTTP 500 to the whole request when one
    does not parse (measured, Qwen2.5-Coder-0.5B: ``[1] BrightBeam Projector FAQ …``)."""
    arguments = call.arguments or "{}"
    try:
        json.loads(arguments)
    except (ValueError, RecursionError):
        return json.dumps(arguments, ensure_ascii=False)
    return arguments


def content_text(content: Any) -> str:
    """Text from ``content`` given as a string, a list of parts, or nothing; half of a
    surrogate pair alone (a JSON ``\\ud800`` escape, valid JSON but no text) as U+FFFD, so
    the reply can be stored and sent on (see :func:`~shelfhand.core.names.valid_text`)."""
    if content is None or isinstance(content, str):
        return valid_text(content) if content else ""
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in ("text", "output_text"):
                value = part.get("text")
                if isinstance(value, Mapping):  # {"text": {"value": ...}} in some gateways
                    value = value.get("value")
                if isinstance(value, str):
                    parts.append(value)
        return valid_text("".join(parts))
    return valid_text(str(content))


def new_call_id() -> str:  # for servers that send calls without an id
    return f"call_{uuid.uuid4().hex[:24]}"


def usage_of(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or raw.get("output_tokens") or 0),
    )


def as_dict(obj: Any) -> dict[str, Any]:
    """A response object of the SDK as the plain JSON it was built from."""
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        data = to_dict(warnings=False)
        if isinstance(data, dict):
            return data
    raise ModelProviderError(
        f"the model server answered with something that is not a chat completion: {str(obj)[:200]!r}."
        " Check that OPENAI_BASE_URL points at an OpenAI-compatible API (usually ending in /v1)."
    )


class PartialCall:
    """A tool call being assembled from stream deltas."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Mapping[str, Any]) -> PartialCall:
        if isinstance(delta.get("id"), str) and delta["id"]:
            self.id = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and name != self.name:
            # Most servers send the name once; a few split it, none repeat a different one.
            self.name += name
        piece = function.get("arguments")
        if piece:  # a few servers send an object instead of JSON text
            self.arguments.append(
                piece if isinstance(piece, str) else json.dumps(piece, ensure_ascii=False)
            )
        return self

    def block(self) -> ToolCallBlock:
        arguments = valid_text("".join(self.arguments)) or "{}"
        return ToolCallBlock(
            id=valid_text(self.id) or new_call_id(), name=valid_text(self.name), arguments=arguments
        )


class StreamReply:
    """A reply being assembled from stream chunks."""

    __slots__ = ("calls", "finish_reason", "model_name", "parts", "usage")

    def __init__(self, model_name: str) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, PartialCall] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.model_name = model_name

    def feed(self, data: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds ("" when none)."""
        self.usage = usage_of(data.get("usage")) or self.usage
        self.model_name = str(data.get("model") or self.model_name)
        piece = ""
        for choice in data.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            piece += content_text(delta.get("content"))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    self._add_call_delta(call)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        if piece:
            self.parts.append(piece)
        return piece

    def _add_call_delta(self, delta: Mapping[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            # Servers that omit the index: a new id starts a new call, anything else continues.
            new_id, last = delta.get("id"), max(self.calls, default=None)
            same = last is not None and (not new_id or new_id == self.calls[last].id)
            index = last if same and last is not None else len(self.calls)
        self.calls.setdefault(index, PartialCall()).add(delta)

    def tool_calls(self) -> list[ToolCallBlock]:
        return [self.calls[i].block() for i in sorted(self.calls)]


def tool_names(tools: Sequence[ToolSchema]) -> set[str]:
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names
