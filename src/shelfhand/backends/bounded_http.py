"""HTTP clients whose replies are bounded: the model, embeddings, remote-agent and MCP
endpoints are read through them, so a server that sends more than a reply can be (a broken
proxy, a server that never ends its body, a compressed bomb) costs at most
``max_reply_bytes`` of memory, not all of it.

A reply is counted **after** decompression: a compressed body is decoded here, in pieces
of at most :data:`_PIECE` bytes, and handed on as plain bytes (its ``Content-Encoding``
removed), so a few kilobytes of gzip that would inflate to gigabytes stop at the bound.
Requests ask for ``gzip, deflate`` only (what is decoded here); a reply in another encoding
is a decoding error. Over the bound, reading raises :class:`ReplyTooLarge`; a declared
``Content-Length`` over it is refused before a byte of the body is read. Both are raised
when the body is read, as ``httpx``'s own errors of a body are (``send`` returns the
response of a streamed request).

The clients are mixins over a concrete ``httpx`` (or ``httpx2``, which the ``openai`` SDK
uses) client class; the bound covers every way a reply is read (``aread``, ``aiter_bytes``,
``aiter_lines``, the SDK's event streams), since it sits in the response's byte stream::

    class BoundedOpenAIClient(BoundedAsyncSend, openai.DefaultAsyncHttpxClient): ...

    http = BoundedOpenAIClient(max_reply_bytes=64 * 1024**2, timeout=60.0)
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import httpx2

from shelfhand.core.errors import cause_chain

__all__ = ["BoundedAsyncSend", "BoundedSend", "ReplyTooLarge", "reply_too_large"]

_ASKED = "gzip, deflate"
"""The encodings a bounded client accepts (decoded here, bounded)."""

_PIECE = 1024**2
"""The most bytes one decompression step makes (so a bomb never inflates at once)."""


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
"""The blank lines that end an event of an event stream."""


class ReplyTooLarge(httpx2.StreamError):
    """A reply longer than its client's ``max_reply_bytes``.

    An ``httpx2.StreamError`` (a body that cannot be read), so that an SDK that handles one
    fails only the request whose reply it was (the MCP SDK answers that request with an
    error; the session goes on).

    Attributes:
        limit: The bound, in bytes.
        host: The server that sent it.
    """

    def __init__(self, limit: int, host: str) -> None:
        self.limit = limit
        self.host = host
        super().__init__(f"a reply longer than {_size(limit)}")


def _size(limit: int) -> str:
    if limit >= 1024**2 and limit % 1024**2 == 0:
        return f"{limit // 1024**2} MiB"
    return f"{limit} bytes"


def reply_too_large(exc: BaseException) -> ReplyTooLarge | None:
    """The :class:`ReplyTooLarge` in ``exc``'s cause chain (an SDK wraps what its HTTP
    client raised), or ``None``."""
    return next((e for e in cause_chain(exc) if isinstance(e, ReplyTooLarge)), None)


class _Meter:
    """Counts (and decodes) a reply's bytes, raising once they pass the bound."""

    __slots__ = (
        "_decoder",
        "_tail",
        "decoding",
        "deflate",
        "events",
        "host",
        "left",
        "limit",
        "refused",
        "report",
    )

    def __init__(
        self,
        limit: int,
        host: str,
        encoding: str,
        *,
        events: bool = False,
        report: Callable[[ReplyTooLarge], None] | None = None,
    ) -> None:
        self.limit = limit
        self.report = report
        self.left = limit
        self.host = host
        self.events = events
        """Bound each event of an event stream (the bytes since the last blank line), not
        the whole stream (one that stays open for a session's life)."""
        self._tail = b""
        self._decoder: Any = None
        self.deflate = encoding == "deflate"
        """``deflate``: its decoder is chosen by the body's first bytes."""
        self.refused: Exception | None = None
        """Why the body is refused before any of it is read (raised at the first read)."""
        if encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding not in ("", "identity", "deflate"):
            self.refused = httpx2.DecodingError(
                f"{host} answered in the content encoding {encoding!r}, not one asked for "
                f"({_ASKED})"
            )
        self.decoding = self._decoder is not None or self.deflate

    def _count(self, piece: bytes) -> bytes:
        if self.events:
            self._count_events(piece)
        else:
            self.left -= len(piece)
        self.check()
        return piece

    def _count_events(self, piece: bytes) -> None:
        """Count ``piece`` into the event it continues; each event that ends in it is held
        to the bound on its own (``left``: what the unfinished event may still take)."""
        joined = self._tail + piece  # (a blank line may straddle two pieces)
        counted = len(self._tail)  # the bytes of ``joined`` counted already
        run = self.limit - self.left  # the unfinished event's bytes so far
        for mark in _EVENT_END.finditer(joined):
            end = mark.end()
            if end <= counted:  # (a blank line within the tail: seen with its own piece)
                continue
            if run + end - counted > self.limit:
                self.left = -1  # an event over the bound
                return
            run, counted = 0, end
        self.left = self.limit - (run + len(joined) - counted)
        self._tail = joined[-3:]

    def check(self) -> None:
        """Raise :class:`ReplyTooLarge` if the reply is past the bound (or why the body is
        refused)."""
        if self.refused is not None:
            raise self.refused
        if self.left < 0:
            exc = ReplyTooLarge(self.limit, self.host)
            if self.report is not None:
                self.report(exc)
            raise exc

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The plain bytes of ``data`` (a piece of the body as sent), in bounded pieces."""
        if not data:
            return
        if self.deflate and self._decoder is None:
            # sent zlib-wrapped (as the standard says) or raw (as some servers do): the
            # first two bytes tell which
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        decoder = self._decoder
        if decoder is None:
            yield self._count(data)
            return
        try:
            while True:
                piece = decoder.decompress(data, _PIECE)
                data = decoder.unconsumed_tail
                if piece:
                    yield self._count(piece)
                if not data and len(piece) < _PIECE:  # (a full piece may leave output)
                    break
        except zlib.error as exc:
            raise httpx2.DecodingError(
                f"{self.host} sent a body that does not decode: {exc}"
            ) from None

    def end(self) -> Iterator[bytes]:
        """What the decoder still holds at the end of the body."""
        if self._decoder is None:
            return
        try:
            rest = self._decoder.flush()
        except zlib.error as exc:
            raise httpx2.DecodingError(
                f"{self.host} sent a body that does not decode: {exc}"
            ) from None
        if rest:
            yield self._count(rest)


class _BoundedStream(
    httpx.AsyncByteStream, httpx.SyncByteStream, httpx2.AsyncByteStream, httpx2.SyncByteStream
):
    """A response's byte stream, decoded and counted (a byte stream of both ``httpx`` and
    ``httpx2``, so the same class serves the clients of either)."""

    def __init__(self, inner: Any, meter: _Meter) -> None:
        self._inner = inner
        self._meter = meter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        meter = self._meter
        meter.check()
        async for data in self._inner:
            for piece in meter.feed(data):
                yield piece
        for piece in meter.end():
            yield piece

    def __iter__(self) -> Iterator[bytes]:
        meter = self._meter
        meter.check()
        for data in self._inner:
            yield from meter.feed(data)
        yield from meter.end()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


def _bound(response: Any, client: _Bound) -> None:
    """Put ``response``'s body behind a meter of the ``client``'s bound (before any of it is
    read); an event stream's each event, with ``client.bound_events``."""
    limit = client.max_reply_bytes
    request = response.request
    host = request.url.host or str(request.url)
    hook = client.on_too_large
    report = None if hook is None else functools.partial(hook, request)
    declared = response.headers.get("content-length", "")
    encoding = response.headers.get("content-encoding", "").strip().lower()
    events = client.bound_events and "text/event-stream" in response.headers.get("content-type", "")
    meter = _Meter(limit, host, encoding, events=events, report=report)
    if not encoding and declared.isdigit() and int(declared) > limit:
        meter.left = -1  # refused at the first read, before a byte of the body is read
    if meter.decoding:
        # decoded here: the response must not decode it again
        del response.headers["content-encoding"]
        response.headers.pop("content-length", None)
    response.stream = _BoundedStream(response.stream, meter)


class _Bound:
    """What the two mixins share: the bound and how it applies."""

    max_reply_bytes: int
    bound_events = False
    on_too_large: Callable[[Any, ReplyTooLarge], None] | None = None

    def __init__(self, *args: Any, max_reply_bytes: int, **kwargs: Any) -> None:
        if max_reply_bytes < 1:
            raise ValueError("max_reply_bytes must be at least 1")
        self.max_reply_bytes = max_reply_bytes
        super().__init__(*args, **kwargs)


class BoundedAsyncSend(_Bound):
    """A mixin for an async ``httpx``/``httpx2`` client: every reply read through it is
    bounded by ``max_reply_bytes`` (see the module's docstring).

    With :attr:`bound_events` set (a client of a protocol whose event streams stay open,
    MCP), an event stream's bound applies to each event instead: the bytes since its last
    blank line. :attr:`on_too_large`, when set, is told of each reply cut, with its request
    (before the error is raised: an SDK that wraps or swallows it cannot hide why)."""

    async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        request.headers["Accept-Encoding"] = _ASKED
        response = await super().send(request, stream=True, **kwargs)  # type: ignore[misc]
        try:
            _bound(response, self)
            if not stream:
                await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response


class BoundedSend(_Bound):
    """:class:`BoundedAsyncSend` for a blocking ``httpx``/``httpx2`` client."""

    def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        request.headers["Accept-Encoding"] = _ASKED
        response = super().send(request, stream=True, **kwargs)  # type: ignore[misc]
        try:
            _bound(response, self)
            if not stream:
                response.read()
        except BaseException:
            response.close()
            raise
        return response
