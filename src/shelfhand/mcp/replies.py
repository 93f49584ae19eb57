"""Replies the SDK cannot read fail their request at once, in one line.

The SDK reads each message a server sends as one of the JSON-RPC shapes. A reply that fits
none of them (``"result": 5``, ``[]``, ``"x"`` or ``null``: a result must be an object; an
``error`` that is not an object) is logged and dropped by the stdio and SSE transports, and
its request waited out its whole timeout (the handshake and ``tools/list`` included). The
streamable-HTTP transport fails the request, but with pydantic's account of the message:
kilobytes over many lines, quoting the server's payload.

:func:`readable_replies` wraps a transport's streams. Such a reply becomes a JSON-RPC error
for the request it answers (its id read from the message as parsed, kept in the validation
error), and so does the streamable-HTTP transport's own error for one. The error says which
request it answered and what was wrong; :func:`malformed_reply` reads that back, so that the
caller can name the server and the request in one line. The connection is left as it is: the
server goes on answering other requests.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import anyio
import mcp.types as types
import pydantic
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

__all__ = ["Malformed", "malformed_reply", "readable_replies"]

# The streamable-HTTP transport's errors for a reply it could not read (then pydantic's text).
_SDK_PARSE_FAILURE = re.compile(
    r"Failed to parse (?:JSON response|SSE message): \d+ validation errors? for "
)
# A location line of pydantic's text and the error type that follows it.
_TEXT_ERROR = re.compile(r"^(\w+)\.(\w+)\n[^\n]*\[type=(\w+)", re.MULTILINE)
_REMEMBERED = 1024  # request ids whose method is kept (a reply forgets its own)


@dataclass(frozen=True, slots=True)
class Malformed:
    """What :func:`readable_replies` puts in the error's ``data``: a Python object, which no
    server's JSON can be."""

    request: str
    """The method of the request it answered (``tools/call``), or ``""`` when unknown."""
    why: str
    """What was wrong (``its result is not a JSON object``)."""


def malformed_reply(exc: MCPError) -> Malformed | None:
    """The unreadable reply ``exc`` stands for, when :func:`readable_replies` made it."""
    data = exc.error.data
    return data if isinstance(data, Malformed) else None


@asynccontextmanager
async def readable_replies(
    transport: AbstractAsyncContextManager[Any],
) -> AsyncIterator[tuple[Any, Any]]:
    """``transport``'s streams, its replies that cannot be read turned into errors."""
    async with transport as (read, write):
        methods = _Sent()
        _LIVE.add(methods)
        yield _Replies(read, methods), _Requests(write, methods)


class _Sent(dict[types.RequestId, str]):
    """The method of each request a wrapped connection sent and is still waiting on (one
    connection's own: equal and hashed by identity, so that :data:`_LIVE` can hold it)."""

    __eq__ = object.__eq__  # type: ignore[assignment]
    __ne__ = object.__ne__  # type: ignore[assignment]
    __hash__ = object.__hash__  # type: ignore[assignment]


_LIVE: weakref.WeakSet[_Sent] = weakref.WeakSet()
"""The requests of every wrapped connection open in the process."""


class _ReportedHere(logging.Filter):
    """Drops the SDK's log of a reply it could not read ("Failed to parse JSONRPC message from
    server", then pydantic's lines, at ERROR) when it answers a request of a connection
    :func:`readable_replies` wraps: that request fails in one line naming the server instead.
    Any other such log (a server's own request or notification, another client's reply) is
    kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, pydantic.ValidationError):
            return True
        reply = _reply_in(exc)
        return reply is None or not any(reply["id"] in sent for sent in list(_LIVE))


for _transport in ("mcp.client.stdio", "mcp.client.sse"):
    logging.getLogger(_transport).addFilter(_ReportedHere())


class _Stream:
    """One of the transport's streams, wrapped: closing and the context are the inner one's."""

    def __init__(self, inner: Any, methods: dict[types.RequestId, str]) -> None:
        self._inner = inner
        self._methods = methods

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(kind, exc, tb)  # type: ignore[no-any-return]


class _Requests(_Stream):
    """The write stream, remembering the method of each request sent."""

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self._methods[message.id] = message.method
            if len(self._methods) > _REMEMBERED:  # requests never answered: forget the oldest
                del self._methods[next(iter(self._methods))]
        await self._inner.send(item)


class _Replies(_Stream):
    """The read stream, a reply that cannot be read turned into an error for its request."""

    @property
    def last_context(self) -> Any:
        # (the SDK runs a server's request in the context its transport sent it from)
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item: SessionMessage | Exception = await self._inner.receive()
        if isinstance(item, pydantic.ValidationError):
            return self._from_validation(item) or item
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                request = "" if message.id is None else self._methods.pop(message.id, "")
                if isinstance(message, types.JSONRPCError):
                    return self._from_sdk_error(message, request) or item
        return item

    def _from_validation(self, exc: pydantic.ValidationError) -> SessionMessage | None:
        """An error for the request ``exc``'s message answered, if it is a reply with an id."""
        reply = _reply_in(exc)
        if reply is None:
            return None
        found = [(e["loc"][:2], e["type"]) for e in exc.errors() if len(e["loc"]) >= 2]
        request = self._methods.pop(reply["id"], "")
        return _error_for(reply["id"], request, _why(found))

    def _from_sdk_error(self, message: types.JSONRPCError, request: str) -> SessionMessage | None:
        text = message.error.message
        if message.id is None or message.error.code != types.PARSE_ERROR:
            return None
        if not _SDK_PARSE_FAILURE.match(text):
            return None
        found = [((a, b), kind) for a, b, kind in _TEXT_ERROR.findall(text)]
        return _error_for(message.id, request, _why(found))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


def _reply_in(exc: pydantic.ValidationError) -> dict[str, Any] | None:
    """The message ``exc`` could not read, when it is a reply with an id (not a request or
    notification of the server's own)."""
    message = next((e["input"] for e in exc.errors() if isinstance(e["input"], dict)), None)
    if message is None or "method" in message or not message.keys() & {"result", "error"}:
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return message


def _why(found: list[tuple[tuple[Any, ...], str]]) -> str:
    """What was wrong, from pydantic's (location, type) pairs for the JSON-RPC union."""
    if (("JSONRPCResponse", "result"), "dict_type") in found:
        return "its result is not a JSON object"
    if (("JSONRPCError", "error"), "model_type") in found:
        return "its error is not a JSON object"
    return "it is not a JSON-RPC reply"


def _error_for(request_id: types.RequestId, request: str, why: str) -> SessionMessage:
    to = f" to {request}" if request else ""
    error = types.ErrorData(
        code=types.PARSE_ERROR,
        message=f"malformed reply{to}: {why}",
        data=Malformed(request=request, why=why),
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
