"""An MCP server's connection: opening, holding, losing, reopening and closing it (docs/design.md M1).

Each server object owns one connection, held open by a background task of its own, so that
any task may mount, call or close it, and a transport that dies takes down only that task:
calls then come back to the model as tool errors, the run goes on.

A lost connection (a stdio server that exited, an HTTP server that restarted) is reopened on
the next call. Failed reopenings back off (0.5 s doubling to 30 s), and calls meanwhile fail
fast with the reason: a server-level health check, separate from the per-tool circuit
breakers of the toolkit.

:class:`McpConnection` is the bottom of the server class: how it calls is
:mod:`shelfhand.mcp.calls`, what it lists and mounts :mod:`shelfhand.mcp.client`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Self, Unpack

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError, ToolError
from shelfhand.core.secrets import redact_text
from shelfhand.mcp.options import (
    DEFAULT_OUTPUT_LIMIT,
    ServerOptions,
    ToolSettings,
    check_prefix,
    tool_filter,
    tool_settings,
)
from shelfhand.mcp.replies import Malformed, malformed_reply, readable_replies
from shelfhand.mcp.statuses import HttpStatuses

__all__ = ["DEFAULT_TIMEOUT", "McpConnection", "close_on_exit", "receive_loop_ended"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
"""Seconds one tool call may go without an answer or progress (and connecting may take)."""

_CLOSE_TIMEOUT = 15.0  # stdio shutdown is bounded by the SDK (~6 s); this only stops a hang
_BACKOFF_FIRST, _BACKOFF_MAX = 0.5, 30.0


class McpConnection(ABC):
    """The connection of an MCP server; the options are those of
    :class:`~shelfhand.mcp.client.McpServer`, which documents them.

    Transports provide :meth:`_transport`; :class:`~shelfhand.mcp.client.McpServer` fills
    the hooks :meth:`_on_open`, :meth:`_watchers`, :meth:`_on_message` and :meth:`_on_reopen`
    (listing the tools, following their changes).
    """

    transport = "unknown"

    def __init__(
        self,
        *,
        name: str,
        timeout: float = DEFAULT_TIMEOUT,
        protocol: str = "auto",
        **options: Unpack[ServerOptions],
    ) -> None:
        if timeout <= 0:
            raise InvalidArgumentError(
                f"MCP server {name}: timeout must be positive, got {timeout}"
            )
        if protocol not in ("auto", "legacy"):
            raise InvalidArgumentError(
                f"MCP server {name}: protocol must be auto or legacy, not {protocol!r}"
            )
        self.name = name
        self.timeout = timeout
        self.protocol = protocol
        self.prefix = check_prefix(options.get("prefix", ""), name)
        self.tool_filter = tool_filter(options.get("tools"), name)
        self.defaults = ToolSettings(
            confirm=options.get("confirm", False),
            permission=options.get("permission", "user"),
            cache_ttl=options.get("cache_ttl"),
        )
        self.tool_settings = tool_settings(options.get("tool_settings"), name)
        self.output_limit = options.get("output_limit", DEFAULT_OUTPUT_LIMIT)
        if self.output_limit < 256:
            raise InvalidArgumentError(
                f"MCP server {name}: output_limit must be at least 256 bytes"
            )
        max_duration = options.get("max_duration")
        self.max_duration = 10 * timeout if max_duration is None else max_duration
        if self.max_duration < timeout:
            raise InvalidArgumentError(
                f"MCP server {name}: max_duration must be at least the timeout"
            )
        self.reconnect = options.get("reconnect", True)
        self.on_progress = options.get("on_progress")
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._failure: str | None = None
        self._close_error: BaseException | None = None
        self._closing = False
        self._reconnecting = asyncio.Lock()
        self._opened = False  # connected once and not closed since: reconnecting is wanted
        self._failed_reconnects = 0
        self._retry_at = 0.0
        self._statuses = HttpStatuses()  # filled by HTTP transports' response hooks
        self.connections = 0
        """How many times a connection was opened (1 + reconnections)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # --- what subclasses provide ------------------------------------------------------------
    @abstractmethod
    def _transport(self) -> AbstractAsyncContextManager[Any]:
        """Provided by each transport."""

    @abstractmethod
    async def _on_open(self, client: Client) -> None:
        """Runs in the connection's task before the connection counts as open."""

    @abstractmethod
    def _watchers(self, client: Client) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """Background work for as long as the connection is open."""

    async def _on_message(self, message: Any) -> None:
        """Each message the server sends outside a response (runs in the receive loop)."""
        if isinstance(message, Exception):
            logger.debug("MCP server %s transport message: %r", self.name, message)
        await anyio.lowlevel.checkpoint()

    @abstractmethod
    def _on_reopen(self) -> None:
        """Runs after a lost connection was opened again."""

    # --- state --------------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        """An open connection whose peer has not gone away (as far as is known)."""
        client = self._client
        return client is not None and self._failure is None and not _peer_gone(client)

    @property
    def status(self) -> str:
        """``connected``, ``not connected``, ``closed`` or ``failed: <reason>``."""
        if self._failure is not None:
            return f"failed: {self._failure}"
        if self._client is not None:
            return "connected"
        return "closed" if self._closing else "not connected"

    # --- lifecycle ----------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the connection and list the tools (nothing happens if already connected).

        Raises:
            ConfigurationError: the server cannot be started or reached, did not answer
                within ``timeout``, or sent a reply that cannot be read (see
                :mod:`shelfhand.mcp.replies`); the message names the server (and an HTTP
                status).
        """
        if self._task is not None:
            if self._failure is not None and self._client is None:
                raise ConfigurationError(f"MCP server {self.name} failed: {self._failure}")
            return
        self._closing = False
        self._failure = None
        self._stop = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A task of its own, not the caller's: the SDK's transports hold task groups and
        # cancel scopes that must be left by the task that entered them, and a transport
        # failure must not cancel the caller's run.
        self._task = asyncio.get_running_loop().create_task(
            self._hold(ready), name=f"mcp-server-{self.name}"
        )
        try:
            with anyio.fail_after(self.timeout):
                await asyncio.shield(ready)
        except BaseException as exc:
            await self._discard_task()
            if isinstance(exc, TimeoutError):
                # (why, when known: the SSE transport's reader may have failed silently)
                note = self._statuses.connection
                raise ConfigurationError(
                    f"MCP server {self.name} did not answer within {self.timeout:g} s"
                    + (f" ({note})" if note else "")
                ) from None
            if isinstance(exc, ConfigurationError | asyncio.CancelledError):
                raise
            malformed = _malformed(exc)
            if malformed is not None:
                to = f" to {malformed.request}" if malformed.request else ""
                raise ConfigurationError(
                    f"cannot connect to MCP server {self.name} ({self.transport}): "
                    f"it sent a malformed reply{to} ({malformed.why})"
                ) from None
            raise ConfigurationError(
                f"cannot connect to MCP server {self.name} ({self.transport}): "
                f"{self._describe(exc)}"
            ) from exc
        self.connections += 1
        self._opened = True

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        assert self._stop is not None
        try:
            client = Client(
                readable_replies(self._transport()),  # (a reply it cannot read: an error)
                mode=self.protocol,
                message_handler=self._on_message,
                cache=None,  # our own cache: the mounted tools, refreshed on list_changed
                client_info=types.Implementation(name="shelfhand", version=_version()),
                read_timeout_seconds=self.timeout,
            )
            async with client:
                await self._on_open(client)
                self._client = client
                async with anyio.create_task_group() as tg:
                    for watch in self._watchers(client):
                        tg.start_soon(watch)
                    ready.set_result(None)
                    await self._stop.wait()
                    self._closing = True
                    tg.cancel_scope.cancel()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif self._closing:
                self._close_error = exc
            else:
                self._failure = self._describe(exc)
                logger.warning("MCP server %s failed: %s", self.name, self._failure)
        finally:
            self._client = None

    async def aclose(self) -> None:
        """Close the connection (ending a stdio server's process).

        Raises:
            Exception: what went wrong while closing (after everything was released).
        """
        self._closing = True
        self._opened = False
        task = self._task
        if task is None:
            return
        assert self._stop is not None
        self._stop.set()
        # Shielded: a cancelled caller must not leave a child process behind.
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await asyncio.wait({task})
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})
        self._task = None
        self._failure = None  # closed is closed, whatever happened before
        error, self._close_error = self._close_error, None
        if error is not None:
            raise error

    async def _discard_task(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await close_on_exit(self.aclose, exc_info, f"MCP server {self.name}")

    # --- reconnecting -------------------------------------------------------------------------
    async def _live_client(self) -> Client:
        """The open connection, reopened first if it was lost (with backoff)."""
        client = self._client
        if client is not None and self._failure is None and _peer_gone(client):
            self._lost("the connection was closed (the server exited or went away)")
        if client is not None and self._failure is None:
            return client
        if not self._opened or not self.reconnect:
            reason = self._failure or self.status
            raise ToolError(f"MCP server {self.name} is not available ({reason})")
        async with self._reconnecting:
            client = self._client
            if client is not None and self._failure is None:
                return client  # another call reconnected meanwhile
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise ToolError(
                    f"MCP server {self.name} is not available ({self._failure}); "
                    f"next reconnection attempt in {wait:.1f} s"
                )
            lost = self._failure
            await self._discard_task()
            try:
                await self.connect()
            except ConfigurationError as exc:
                self._failed_reconnects += 1
                delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (self._failed_reconnects - 1))
                self._retry_at = time.monotonic() + delay
                self._failure = redact_text(str(exc))
                raise ToolError(f"{self._failure} (reconnecting again in {delay:g} s)") from None
            self._failed_reconnects = 0
            self._retry_at = 0.0
            logger.info("MCP server %s: reconnected after: %s", self.name, lost)
            self._on_reopen()
            assert self._client is not None
            return self._client

    def _lost(self, reason: str) -> None:
        if self._failure is None:
            self._failure = reason
            logger.warning("MCP server %s: %s", self.name, reason)

    def _describe(self, exc: BaseException, status: str | None = None) -> str:
        """``exc`` in words, with the HTTP ``status`` of the request that failed (default:
        that of the connection's own latest request) when the words lack it."""
        text = _describe(exc)
        note = self._statuses.connection if status is None else status
        return f"{text} ({note})" if note and note not in text else text


def _peer_gone(client: Client) -> bool:
    """The connection's receive loop has ended (a stdio server exited): nothing sent now can
    arrive. Reads an SDK internal, guarded: should it move, the loss is still noticed, one
    call later, through ``CONNECTION_CLOSED``."""
    return receive_loop_ended(client) is True


def receive_loop_ended(client: Client) -> bool | None:
    """Whether the connection's receive loop has ended (``None``: cannot tell).

    The SDK's dispatcher marks itself closed before it fails its waiting requests with
    ``CONNECTION_CLOSED``, so this tells a connection that really closed from a server that
    answered with that code. An SDK internal, read guarded.
    """
    try:
        dispatcher = getattr(client.session, "_dispatcher", None)
    except Exception:
        return None
    closed = getattr(dispatcher, "_closed", None)
    return closed if isinstance(closed, bool) else None


def _malformed(exc: BaseException) -> Malformed | None:
    """The unreadable reply ``exc`` (or the one exception of its group) stands for."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return malformed_reply(exc) if isinstance(exc, MCPError) else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = redact_text(str(exc))  # an HTTP error names the server's URL, a token included
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    from shelfhand.core.version import __version__

    return __version__


async def close_on_exit(
    aclose: Callable[[], Awaitable[None]], exc_info: tuple[object, ...], what: str
) -> None:
    """Close on leaving a ``with`` block; while an error is already on its way out, a close
    failure is logged instead of raised, so it never masks the original exception."""
    if exc_info[0] is None:
        await aclose()
        return
    try:
        await aclose()
    except Exception:
        logger.exception("closing %s failed", what)
