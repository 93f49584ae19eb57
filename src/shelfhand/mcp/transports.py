"""The three transports: a child process over stdio, SSE, streamable HTTP (docs/design.md M1)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TextIO, Unpack

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from shelfhand.backends.bounded_http import BoundedAsyncSend
from shelfhand.mcp.client import DEFAULT_TIMEOUT, McpServer
from shelfhand.mcp.options import ServerOptions
from shelfhand.mcp.stdio_lines import use_whole_lines

__all__ = ["MAX_MESSAGE_BYTES", "SseServer", "StdioServer", "StreamableHttpServer"]

MAX_MESSAGE_BYTES = 64 * 1024**2
"""The default bound of one message from an MCP server over HTTP: a JSON reply, or one event
of an event stream (the stream itself stays open as long as the session)."""


class _BoundedHttp(BoundedAsyncSend, httpx2.AsyncClient):
    """An ``httpx2`` client whose replies are bounded, each event of an event stream on its
    own (see ``bounded_http``)."""

    bound_events = True


class StdioServer(McpServer):
    """An MCP server run as a child process, spoken to over its stdin/stdout.

    Args:
        command: The executable.
        args: Its arguments.
        env: Extra environment variables (merged over a minimal safe environment).
        name: The server's name; defaults to the command's file name.
        cwd: Working directory of the process.
        timeout: Seconds per tool call and for starting.
        errlog: Where the server's stderr goes (a real file; default ``sys.stderr``).
        protocol: ``auto`` or ``legacy`` (see :class:`McpServer`).
        **options: Prefix, tool filter, settings, ...: see :class:`ServerOptions`.

    A server process that exits is started again on the next call (``reconnect=False`` to
    turn that off).
    """

    transport = "stdio"

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        cwd: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        errlog: TextIO | None = None,
        protocol: str = "auto",
        **options: Unpack[ServerOptions],
    ) -> None:
        default_name = command.replace("\\", "/").rsplit("/", 1)[-1]
        super().__init__(name=name or default_name, timeout=timeout, protocol=protocol, **options)
        self.command = command
        self.args = list(args)
        self.env = dict(env or {})
        self.cwd = cwd
        self.errlog = errlog

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        use_whole_lines()  # (linear and bounded: see shelfhand.mcp.stdio_lines)
        params = StdioServerParameters(
            command=self.command, args=self.args, env=self.env or None, cwd=self.cwd
        )
        return stdio_client(params, errlog=self.errlog or sys.stderr)


class _HttpServer(McpServer):
    """What the two HTTP transports share: a URL, headers sent with every request, and the
    bound of one message (``max_message_bytes``, after decompression: a JSON reply, or one
    event of a stream; a longer one is not read further, and the call fails)."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        protocol: str = "auto",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        **options: Unpack[ServerOptions],
    ) -> None:
        super().__init__(name=name or _host(url), timeout=timeout, protocol=protocol, **options)
        self.url = url
        self.headers = dict(headers or {})
        self.max_message_bytes = max_message_bytes

    def _http_client(self, timeout: httpx2.Timeout) -> httpx2.AsyncClient:
        # One client per connection: each response's status is filed for its own request
        # (shelfhand.mcp.statuses), so that errors can say "HTTP 401 Unauthorized".
        self._statuses.new_connection()
        client = _BoundedHttp(
            headers=self.headers,
            timeout=timeout,
            event_hooks={"response": [self._statuses.record]},
            max_reply_bytes=self.max_message_bytes,
        )
        client.on_too_large = self._statuses.too_large
        return client


class SseServer(_HttpServer):
    """An MCP server over the (older) HTTP + Server-Sent Events transport.

    Args:
        url: The SSE endpoint, e.g. ``http://127.0.0.1:8000/sse``.
        headers: HTTP headers sent with every request (e.g. ``Authorization``).
        name: The server's name; defaults to the URL's host.
        timeout: Seconds per tool call and for connecting.
        protocol: ``auto`` or ``legacy`` (see :class:`McpServer`).
        max_message_bytes: The most bytes of one message (a JSON reply, or one event of
            the stream), after decompression; a longer one fails its call, not read further.
    """

    transport = "sse"

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            client = self._http_client(timeout or httpx2.Timeout(self.timeout, read=300.0))
            if auth is not None:
                client.auth = auth
            return client

        return sse_client(self.url, timeout=self.timeout, httpx_client_factory=factory)


class StreamableHttpServer(_HttpServer):
    """An MCP server over streamable HTTP.

    Args:
        url: The MCP endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: HTTP headers sent with every request (e.g. ``Authorization``).
        name: The server's name; defaults to the URL's host.
        timeout: Seconds per tool call and for connecting.
        protocol: ``auto`` or ``legacy`` (see :class:`McpServer`).
        max_message_bytes: The most bytes of one message (a JSON reply, or one event of
            a stream), after decompression; a longer one fails its call, not read further.
    """

    transport = "http"

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        return self._streams()

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[Any]:
        # Long read timeout: the server may hold a response stream open between events.
        timeout = httpx2.Timeout(self.timeout, read=300.0)
        async with (
            self._http_client(timeout) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


def _host(url: str) -> str:
    try:
        return httpx2.URL(url).host or url
    except Exception:
        return url
