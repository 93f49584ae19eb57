"""Calling an MCP server's tools and reading its resources (docs/design.md M1).

A request the server never received (the connection was refused, or the server answered
*that request* with a 404: it no longer knows the session) is sent again once, on a reopened
connection. Whether a request was received is decided from its own response only (see
:mod:`shelfhand.mcp.statuses`): a call answered with an error, or one that was never answered,
is never sent twice, whatever happened to other calls meanwhile.

An error the server sent is the server's, whatever its code: the SDK's own codes for a closed
connection (``CONNECTION_CLOSED``) and a read timeout (``REQUEST_TIMEOUT``) count as such only
when the SDK raised them itself, that is when the connection's receive loop has ended or its
write failed, and when ``max_duration`` has elapsed. A server that answers ``-32000 quota
exceeded`` is not restarted, its other calls go on, and the model reads the server's message.

A call's ``timeout`` counts the seconds without an answer *or progress*: each
``notifications/progress`` restarts it (up to ``max_duration`` in all) and is reported as a
:class:`~shelfhand.core.events.ToolProgress` to ``on_progress`` and to the caller's
:data:`~shelfhand.core.events.progress_sink`, if set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pydantic
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from shelfhand.core.errors import ToolError, ToolTimeoutError
from shelfhand.core.events import ToolProgress, progress_sink
from shelfhand.core.tracing import current_span, enter, leave, start_span
from shelfhand.mcp.connection import McpConnection, receive_loop_ended
from shelfhand.mcp.replies import malformed_reply
from shelfhand.mcp.tool import resource_output, to_output
from shelfhand.tools.tool import ToolOutput

__all__ = ["McpCalls"]

logger = logging.getLogger(__name__)

# What the SDK says of an error response without a JSON-RPC body: its status says more.
_BARE_ERROR = "Server returned an error response"


class _NotDelivered(Exception):
    """The request never reached the server (connection refused, unknown session)."""


class McpCalls(McpConnection):
    """Tool calls and resource reads on the server's connection."""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None = None,
        tool_name: str | None = None,
    ) -> ToolOutput:
        """Call ``name`` (the server's own name) on the server.

        Args:
            timeout: Seconds without an answer or progress (default: the server's).
            tool_name: The model-facing name, for progress events (default ``prefix + name``).

        Raises:
            ToolTimeoutError: no answer or progress within ``timeout``, or no answer within
                ``max_duration``.
            ToolError: the server is not available or refused the request (model-facing).
        """
        limit = timeout or self.timeout
        shown = tool_name or self.prefix + name
        if current_span() is None:
            return await self._call_tool(name, arguments, limit, shown)
        # an ``mcp`` span under the tool call's: which server, which tool, how many sends
        span = start_span(
            f"mcp tools/call {name}",
            "mcp",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "mcp.server.name": self.name,
                "mcp.method.name": "tools/call",
            },
        )
        token = enter(span)
        try:
            output = await self._call_tool(name, arguments, limit, shown)
        except BaseException as exc:
            if span is not None:
                span.fail(type(exc).__name__)
            leave(span, token)
            raise
        if span is not None and output.is_error:
            span.fail("tool_error")
        leave(span, token)
        return output

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], limit: float, shown: str
    ) -> ToolOutput:
        for attempt in (1, 2):
            client = await self._live_client()
            try:
                result = await self._call(client, name, arguments, limit, shown)
            except _NotDelivered as exc:
                self._lost(str(exc))
                if attempt == 1:
                    continue  # the server never saw it: reconnect and send it once more
                raise ToolError(f"MCP server {self.name} is not available ({exc})") from None
            return to_output(result, limit=self.output_limit, source=f"MCP server {self.name}")
        raise AssertionError("unreachable")

    async def _call(
        self, client: Client, name: str, arguments: dict[str, Any], limit: float, shown: str
    ) -> types.CallToolResult:
        scope = anyio.CancelScope(deadline=anyio.current_time() + limit)
        # Read here, in the caller's context: the SDK runs the callback in its own task.
        sinks = [f for f in (self.on_progress, progress_sink.get()) if f is not None]

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            scope.deadline = anyio.current_time() + limit  # progress restarts the clock
            event = ToolProgress(name=shown, progress=progress, total=total, message=message or "")
            for sink in sinks:
                try:
                    sink(event)
                except Exception:
                    logger.exception("MCP server %s: a progress callback failed", self.name)

        timed_out = ToolTimeoutError(
            f"MCP server {self.name}: no answer or progress within {limit:g} s"
        )
        started = anyio.current_time()
        with self._statuses.track() as request:
            try:
                with scope:
                    result = await client.call_tool(
                        name,
                        arguments,
                        read_timeout_seconds=self.max_duration,
                        progress_callback=progress,
                        meta=request.meta,
                    )
            except MCPError as exc:
                if scope.cancel_called:
                    raise timed_out from None
                malformed = malformed_reply(exc)
                if malformed is not None:
                    raise self._malformed(f"tools/call {name}", malformed.why) from None
                elapsed = anyio.current_time() - started
                raise self._call_error(exc, request.status, client, elapsed) from None
            except pydantic.ValidationError as exc:
                raise self._unreadable(exc, f"tools/call {name}") from None
            except httpx2.ConnectError as exc:
                raise _NotDelivered(self._describe(exc, request.status)) from None
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.HTTPError) as exc:
                self._lost(self._describe(exc, request.status))
                raise ToolError(
                    f"MCP server {self.name} is not available ({self._failure})"
                ) from None
        if scope.cancelled_caught:
            raise timed_out
        return result

    def _call_error(self, exc: MCPError, status: str, client: Client, elapsed: float) -> Exception:
        """What a call answered with ``exc`` after ``elapsed`` seconds raises; ``status``: its
        own response's, if an HTTP error (``HTTP 404 Not Found``)."""
        if exc.code == types.REQUEST_TIMEOUT and elapsed >= self.max_duration:
            # (the SDK's read timeout, max_duration: a server's -32001 comes back sooner)
            return ToolTimeoutError(
                f"MCP server {self.name} did not answer within {self.max_duration:g} s"
            )
        if exc.code == types.CONNECTION_CLOSED and _closed_here(exc, client):
            self._lost("the connection was closed (the server exited or went away)")
            return ToolError(f"MCP server {self.name}: {self._failure}")
        if exc.code == types.INVALID_REQUEST and status.startswith("HTTP 404"):
            # A streamable-HTTP server that restarted or expired the session answers 404,
            # before running anything; over stdio there is no status, whatever the message.
            return _NotDelivered("the server no longer knows this session")
        if status and exc.error.message == _BARE_ERROR:
            return ToolError(f"MCP server {self.name}: {status}")
        if status and status not in str(exc):
            return ToolError(f"MCP server {self.name}: {exc} ({status})")
        return ToolError(f"MCP server {self.name}: {exc}")

    async def read_resource(self, uri: str) -> ToolOutput:
        """The resource ``uri`` as a tool result (text as is, binary described, capped)."""
        client = await self._live_client()
        with self._asking("resources/read"):
            result = await client.read_resource(uri)
        return resource_output(result, limit=self.output_limit, source=f"MCP server {self.name}")

    @contextmanager
    def _asking(self, request: str) -> Iterator[None]:
        """A request other than a tool call, within the server's ``timeout``; its failure
        in one line naming the server (a ``ToolError``; ``ToolTimeoutError`` for no answer)."""
        try:
            with anyio.fail_after(self.timeout):
                yield
        except TimeoutError:
            raise ToolTimeoutError(
                f"MCP server {self.name} did not answer within {self.timeout:g} s"
            ) from None
        except MCPError as exc:
            malformed = malformed_reply(exc)
            if malformed is not None:
                raise self._malformed(request, malformed.why) from None
            raise ToolError(f"MCP server {self.name}: {exc}") from None
        except pydantic.ValidationError as exc:
            raise self._unreadable(exc, request) from None

    def _unreadable(self, exc: pydantic.ValidationError, request: str) -> ToolError:
        """A reply to ``request`` the SDK could not read: the server named, in one short line
        (pydantic's own account runs to kilobytes of every union member's complaints)."""
        count = exc.error_count()
        logger.debug("MCP server %s: malformed reply to %s: %s", self.name, request, exc)
        return self._malformed(request, f"{count} validation error{'s' if count != 1 else ''}")

    def _malformed(self, request: str, why: str) -> ToolError:
        """A malformed reply to ``request``, in one line naming the server."""
        return ToolError(f"MCP server {self.name} sent a malformed reply to {request} ({why})")


def _closed_here(exc: MCPError, client: Client) -> bool:
    """``exc`` (``CONNECTION_CLOSED``) was raised by the SDK itself: the request could not be
    written (the transport is gone), or the receive loop has ended (or cannot be read: then
    the code is trusted, as before). A server that sends the code keeps its loop running."""
    if isinstance(exc.__context__, anyio.BrokenResourceError | anyio.ClosedResourceError):
        return True
    return receive_loop_ended(client) is not False
