"""MCP servers as tools: connect over stdio, SSE or streamable HTTP (DESIGN M1).

Each server object owns one connection, held open by a background task of its own, so that
any task may mount, call or close it, and a transport that dies takes down only that task:
calls then come back to the model as tool errors, the run goes on. ::

    servers = McpServerGroup([
        StdioServer(command="uvx", args=["mcp-server-time"], name="time", prefix="time_"),
        StreamableHttpServer(url="http://127.0.0.1:8000/mcp", name="orders"),
    ])
    async with servers:
        await toolkit.add_mcp(servers)      # time_get_current_time, ..., orders' own names
        result = await agent.run("...")
    # closed in reverse order of opening; child processes are gone

Which tools are mounted, under which names and with which governance settings is set per
server (see :mod:`shelfhand.mcp.options`). Tools a server marks as needing task mode
(``execution.taskSupport == "required"``) are not offered: this client does not run tasks.

The tool list is fetched once when mounting and again only when the server announces
``notifications/tools/list_changed`` (on 2026-era connections after opting in through
``subscriptions/listen``); tools that appear or go are added to or removed from every toolkit
the server is mounted on.

A lost connection (a stdio server that exited, an HTTP server that restarted) is reopened on
the next call; a request the server never received is sent again once. Failed reopenings back
off (0.5 s doubling to 30 s), and calls meanwhile fail fast with the reason: a server-level
health check, separate from the per-tool circuit breakers of the toolkit.

A call's ``timeout`` counts the seconds without an answer *or progress*: each
``notifications/progress`` restarts it (up to ``max_duration`` in all) and is reported as a
:class:`~shelfhand.core.events.ToolProgress` to ``on_progress`` and to the caller's
:data:`~shelfhand.core.events.progress_sink`, if set.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Unpack

import anyio
import anyio.lowlevel
import httpx2
import mcp.types as types
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from shelfhand.core.errors import ConfigurationError, ToolError, ToolTimeoutError
from shelfhand.core.events import ToolProgress, progress_sink
from shelfhand.mcp.options import (
    DEFAULT_OUTPUT_LIMIT,
    ServerOptions,
    ToolSettings,
    check_prefix,
    tool_filter,
    tool_settings,
)
from shelfhand.mcp.tool import McpTool, ResourceTool, resource_output, to_output
from shelfhand.tools.tool import Tool, ToolOutput
from shelfhand.tools.toolkit import Toolkit

__all__ = ["DEFAULT_TIMEOUT", "McpServer", "close_on_exit"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
"""Seconds one tool call may go without an answer or progress (and connecting may take)."""

_CLOSE_TIMEOUT = 15.0  # stdio shutdown is bounded by the SDK (~6 s); this only stops a hang
_LIST_PAGE_CAP = 100
_RESOURCES_SHOWN = 20  # resources named in the read tool's description
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MODERN = "2026-07-28"
_BACKOFF_FIRST, _BACKOFF_MAX = 0.5, 30.0
# How a streamable-HTTP server (restarted, or expired the session) says it never ran a request.
_UNKNOWN_SESSION = frozenset({"Session terminated", "Session not found"})


class _NotDelivered(Exception):
    """The request never reached the server (connection refused, unknown session)."""


class McpServer(ABC):
    """A connection to one MCP server; use :class:`StdioServer`, :class:`SseServer` or
    :class:`StreamableHttpServer`.

    Args:
        name: The server's name in messages and errors.
        timeout: Seconds a call may go without an answer or progress; also for connecting.
        protocol: ``auto`` (the newest version both sides speak) or ``legacy`` (force the
            pre-2026 ``initialize`` handshake, for servers that mishandle discovery).
        **options: Prefix, tool filter, governance settings, output cap, reconnecting and
            progress reporting: see :class:`~shelfhand.mcp.options.ServerOptions`.
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
            raise ValueError(f"MCP server {name}: timeout must be positive, got {timeout}")
        if protocol not in ("auto", "legacy"):
            raise ValueError(
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
            raise ValueError(f"MCP server {name}: output_limit must be at least 256 bytes")
        max_duration = options.get("max_duration")
        self.max_duration = 10 * timeout if max_duration is None else max_duration
        if self.max_duration < timeout:
            raise ValueError(f"MCP server {name}: max_duration must be at least the timeout")
        self.reconnect = options.get("reconnect", True)
        self.on_progress = options.get("on_progress")
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._refresh_wanted: asyncio.Event | None = None
        self._failure: str | None = None
        self._close_error: BaseException | None = None
        self._closing = False
        self._listed: list[types.Tool] = []
        self._resources: list[types.Resource] | None = None
        self._mounted: list[tuple[Toolkit, dict[str, McpTool], list[Tool[..., Any]]]] = []
        self._reconnecting = asyncio.Lock()
        self._opened = False  # connected once and not closed since: reconnecting is wanted
        self._failed_reconnects = 0
        self._retry_at = 0.0
        self.list_fetches = 0
        """How many times the tool list was fetched from the server (mounts + refreshes)."""
        self.connections = 0
        """How many times a connection was opened (1 + reconnections)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # --- what subclasses provide ------------------------------------------------------------
    @abstractmethod
    def _transport(self) -> AbstractAsyncContextManager[Any]:
        """Provided by each subclass."""

    def _http_note(self) -> str:
        """What the last failed HTTP response said (``HTTP 401 Unauthorized``), if any."""
        return ""

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

    @property
    def listed_tools(self) -> list[types.Tool]:
        """The server's tools as last listed (cached; refreshed on ``list_changed``)."""
        return list(self._listed)

    @property
    def offered_tools(self) -> list[str]:
        """The model-facing names mounting would register now (prefixed, filtered, without
        task-only tools; ``read_resource`` not included)."""
        return [t.name for t in self._make_tools(self._listed).values()]

    # --- lifecycle ----------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the connection and list the tools (nothing happens if already connected).

        Raises:
            ConfigurationError: the server cannot be started or reached, or did not answer
                within ``timeout``; the message names the server (and an HTTP status).
        """
        if self._task is not None:
            if self._failure is not None and self._client is None:
                raise ConfigurationError(f"MCP server {self.name} failed: {self._failure}")
            return
        self._closing = False
        self._failure = None
        self._stop = asyncio.Event()
        self._refresh_wanted = asyncio.Event()
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
                raise ConfigurationError(
                    f"MCP server {self.name} did not answer within {self.timeout:g} s"
                ) from None
            if isinstance(exc, ConfigurationError | asyncio.CancelledError):
                raise
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
                self._transport(),
                mode=self.protocol,
                message_handler=self._on_message,
                cache=None,  # our own cache: the mounted tools, refreshed on list_changed
                client_info=types.Implementation(name="shelfhand", version=_version()),
                read_timeout_seconds=self.timeout,
            )
            async with client:
                self._listed = await self._fetch_tools(client)
                self._resources = None  # listed again on demand
                self._client = client
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._refresher, client)
                    if client.protocol_version == _MODERN and _announces_changes(client):
                        tg.start_soon(self._listener, client)
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
        """Close the connection (ending a stdio server's process) and unmount its tools.

        Raises:
            Exception: what went wrong while closing (after everything was released).
        """
        self._unmount_all()
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

    async def __aenter__(self) -> McpServer:
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
                self._failure = str(exc)
                raise ToolError(f"{exc} (reconnecting again in {delay:g} s)") from None
            self._failed_reconnects = 0
            self._retry_at = 0.0
            logger.info("MCP server %s: reconnected after: %s", self.name, lost)
            self._apply(self._listed)
            assert self._client is not None
            return self._client

    def _lost(self, reason: str) -> None:
        if self._failure is None:
            self._failure = reason
            logger.warning("MCP server %s: %s", self.name, reason)

    # --- tools --------------------------------------------------------------------------------
    async def mount(self, toolkit: Toolkit) -> list[Tool[..., Any]]:
        """Connect if needed and register the server's tools in ``toolkit``.

        Tools are named ``prefix + name`` and filtered by ``tools``; names that are not valid
        model-facing names and tools that need task mode are skipped with a log line. A
        server that offers resources adds ``<prefix>read_resource``.

        Raises:
            ConfigurationError: the server cannot be reached, or one of its tool names is
                already taken in ``toolkit`` (the message names both owners); nothing is
                registered then.
        """
        opened_here = self._task is None
        await self.connect()
        try:
            tools = self._make_tools(self._listed)
            extras: list[Tool[..., Any]] = []
            if await self._offers_resources():
                extras.append(ResourceTool(self, await self.list_resources()))
            for item in [*tools.values(), *extras]:
                _check_free(toolkit, item, self.name)
        except BaseException:
            if opened_here:
                await self.aclose()
            raise
        for item in [*tools.values(), *extras]:
            toolkit.add(item)
        self._mounted.append((toolkit, tools, extras))
        return [*tools.values(), *extras]

    def settings_for(self, name: str) -> ToolSettings:
        """The governance settings of the server's tool ``name`` (its own name)."""
        own = self.tool_settings.get(name)
        return self.defaults if own is None else own.over(self.defaults)

    def _make_tools(self, listed: Iterable[types.Tool]) -> dict[str, McpTool]:
        tools: dict[str, McpTool] = {}
        for entry in listed:
            if not self.tool_filter(entry.name):
                continue
            if entry.execution is not None and entry.execution.task_support == "required":
                logger.info(
                    "MCP server %s: tool %r skipped: it runs only as a task, which this "
                    "client does not support",
                    self.name,
                    entry.name,
                )
                continue
            if not _NAME_RE.match(self.prefix + entry.name):
                logger.warning(
                    "MCP server %s: tool %r skipped: a model-facing name needs 1-64 ASCII "
                    "letters, digits, '_' or '-'",
                    self.name,
                    self.prefix + entry.name,
                )
                continue
            tools[entry.name] = McpTool(self, entry, self.settings_for(entry.name))
        return tools

    def _unmount_all(self) -> None:
        for toolkit, tools, extras in self._mounted:
            for item in [*tools.values(), *extras]:
                if toolkit.get(item.name) is item:
                    toolkit.remove(item.name)
        self._mounted.clear()

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
        try:
            with scope:
                result = await client.call_tool(
                    name,
                    arguments,
                    read_timeout_seconds=self.max_duration,
                    progress_callback=progress,
                )
        except MCPError as exc:
            if scope.cancel_called:
                raise timed_out from None
            if exc.code == types.REQUEST_TIMEOUT:
                raise ToolTimeoutError(
                    f"MCP server {self.name} did not answer within {self.max_duration:g} s"
                ) from None
            if exc.code == types.CONNECTION_CLOSED:
                self._lost("the connection was closed (the server exited or went away)")
                raise ToolError(f"MCP server {self.name}: {self._failure}") from None
            if exc.code == types.INVALID_REQUEST and (
                exc.error.message in _UNKNOWN_SESSION or self._http_note().startswith("HTTP 404")
            ):
                raise _NotDelivered("the server no longer knows this session") from None
            note = self._http_note()
            if note and exc.error.message == "Server returned an error response":
                raise ToolError(f"MCP server {self.name}: {note}") from None
            raise ToolError(f"MCP server {self.name}: {exc}") from None
        except httpx2.ConnectError as exc:
            raise _NotDelivered(self._describe(exc)) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.HTTPError) as exc:
            self._lost(self._describe(exc))
            raise ToolError(f"MCP server {self.name} is not available ({self._failure})") from None
        if scope.cancelled_caught:
            raise timed_out
        return result

    # --- resources and prompts ----------------------------------------------------------------
    async def _offers_resources(self) -> bool:
        client = self._client
        return client is not None and client.server_capabilities.resources is not None

    async def list_resources(self) -> list[types.Resource]:
        """The server's resources (fetched once per connection; empty if it has none)."""
        if self._resources is None:
            client = await self._live_client()
            if client.server_capabilities.resources is None:
                return []
            found: list[types.Resource] = []
            cursor: str | None = None
            with anyio.fail_after(self.timeout):
                for _ in range(_LIST_PAGE_CAP):
                    page = await client.list_resources(cursor=cursor)
                    found.extend(page.resources)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            self._resources = found
        return list(self._resources)

    async def read_resource(self, uri: str) -> ToolOutput:
        """The resource ``uri`` as a tool result (text as is, binary described, capped)."""
        client = await self._live_client()
        try:
            with anyio.fail_after(self.timeout):
                result = await client.read_resource(uri)
        except TimeoutError:
            raise ToolTimeoutError(
                f"MCP server {self.name} did not answer within {self.timeout:g} s"
            ) from None
        except MCPError as exc:
            raise ToolError(f"MCP server {self.name}: {exc}") from None
        return resource_output(result, limit=self.output_limit, source=f"MCP server {self.name}")

    async def list_prompts(self) -> list[types.Prompt]:
        """The server's prompts (one page; empty if it offers none)."""
        client = await self._live_client()
        if client.server_capabilities.prompts is None:
            return []
        with anyio.fail_after(self.timeout):
            return list((await client.list_prompts()).prompts)

    # --- list_changed -------------------------------------------------------------------------
    async def _on_message(self, message: Any) -> None:
        # Runs inside the session's receive loop: only flag the refresh, never await a
        # request here (its response would be read by this very loop).
        if isinstance(message, types.ToolListChangedNotification):
            if self._refresh_wanted is not None:
                self._refresh_wanted.set()
        elif isinstance(message, Exception):
            logger.debug("MCP server %s transport message: %r", self.name, message)
        await anyio.lowlevel.checkpoint()

    async def _listener(self, client: Client) -> None:
        # On 2026-era connections list_changed arrives only on an opened listen stream;
        # its notifications also reach _on_message, which does the work.
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    if self._refresh_wanted is not None:
                        self._refresh_wanted.set()
        except Exception as exc:
            logger.info(
                "MCP server %s: no change notifications (%s)", self.name, self._describe(exc)
            )

    async def _refresher(self, client: Client) -> None:
        assert self._refresh_wanted is not None
        while True:
            await self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            try:
                with anyio.fail_after(self.timeout):
                    listed = await self._fetch_tools(client)
            except Exception as exc:
                logger.warning("MCP server %s: re-listing tools failed: %s", self.name, exc)
                continue
            self._listed = listed
            self._apply(listed)

    def _apply(self, listed: list[types.Tool]) -> None:
        """Bring every toolkit this server is mounted on in line with ``listed``."""
        for toolkit, tools, _extras in self._mounted:
            fresh = self._make_tools(listed)
            for name in list(tools):
                entry = fresh.get(name)
                if entry is None or not tools[name]._same_as(entry):
                    if toolkit.get(tools[name].name) is tools[name]:
                        toolkit.remove(tools[name].name)
                    del tools[name]
            for name, item in fresh.items():
                if name in tools:
                    continue
                try:
                    _check_free(toolkit, item, self.name)
                except ConfigurationError as exc:
                    logger.error("MCP server %s: new tool not added: %s", self.name, exc)
                    continue
                toolkit.add(item)
                tools[name] = item
        names = ", ".join(t.name for t in listed) or "none"
        logger.info("MCP server %s: tools now %s", self.name, names)

    async def _fetch_tools(self, client: Client) -> list[types.Tool]:
        self.list_fetches += 1
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _describe(self, exc: BaseException) -> str:
        text = _describe(exc)
        note = self._http_note()
        return f"{text} ({note})" if note and note not in text else text


# --- helpers ----------------------------------------------------------------------------------
def _check_free(toolkit: Toolkit, item: Tool[..., Any], server: str) -> None:
    existing = toolkit.get(item.name)
    if existing is None:
        return
    other = getattr(existing, "server", None)
    owner = f"MCP server {other.name!r}" if isinstance(other, McpServer) else "a local tool"
    raise ConfigurationError(
        f"tool name clash: MCP server {server!r} and {owner} both offer a tool named "
        f'{item.name!r}; give one of the servers a prefix (prefix=... or "prefix" in '
        "mcp.json), filter the tool out (tools=...), or mount only one of them"
    )


def _peer_gone(client: Client) -> bool:
    """The connection's receive loop has ended (a stdio server exited): nothing sent now can
    arrive. Reads an SDK internal, guarded: should it move, the loss is still noticed, one
    call later, through ``CONNECTION_CLOSED``."""
    try:
        dispatcher = getattr(client.session, "_dispatcher", None)
    except Exception:
        return False
    return getattr(dispatcher, "_closed", False) is True


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
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
