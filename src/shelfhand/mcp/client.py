"""MCP servers as tools: connect over stdio, SSE or streamable HTTP (DESIGN M1).

Each server object owns one connection, held open by a background task of its own, so that
any task may mount, call or close it, and a transport that dies takes down only that task:
calls then come back to the model as tool errors, the run goes on. ::

    servers = McpServerGroup([
        StdioServer(command="uvx", args=["mcp-server-time"], name="time"),
        StreamableHttpServer(url="http://127.0.0.1:8000/mcp", name="orders"),
    ])
    async with servers:
        await toolkit.add_mcp(servers)      # every tool, under its own name
        result = await agent.run("...")
    # closed in reverse order of opening; child processes are gone

The tool list is fetched once when mounting and again only when the server announces
``notifications/tools/list_changed`` (on 2026-era connections after opting in through
``subscriptions/listen``); tools that appear or go are added to or removed from every toolkit
the server is mounted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import mcp.types as types
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from shelfhand.core.errors import ConfigurationError, ToolError, ToolTimeoutError
from shelfhand.mcp.tool import McpTool, to_output
from shelfhand.tools.tool import Tool, ToolOutput
from shelfhand.tools.toolkit import Toolkit

__all__ = ["DEFAULT_TIMEOUT", "McpServer", "McpServerGroup"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
"""Seconds one tool call (and connecting) may take unless a server says otherwise."""

_CLOSE_TIMEOUT = 15.0  # stdio shutdown is bounded by the SDK (~6 s); this only stops a hang
_LIST_PAGE_CAP = 100
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MODERN = "2026-07-28"


class McpServer(ABC):
    """A connection to one MCP server; use :class:`StdioServer`, :class:`SseServer` or
    :class:`StreamableHttpServer`.

    Args:
        name: The server's name in messages and errors (its tools keep their own names).
        timeout: Seconds per tool call and for connecting.
        protocol: ``auto`` (the newest version both sides speak) or ``legacy`` (force the
            pre-2026 ``initialize`` handshake, for servers that mishandle discovery).
    """

    transport = "unknown"

    def __init__(
        self, *, name: str, timeout: float = DEFAULT_TIMEOUT, protocol: str = "auto"
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
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._refresh_wanted: asyncio.Event | None = None
        self._failure: str | None = None
        self._close_error: BaseException | None = None
        self._closing = False
        self._listed: list[types.Tool] = []
        self._mounted: list[tuple[Toolkit, dict[str, McpTool]]] = []
        self.list_fetches = 0
        """How many times the tool list was fetched from the server (mount + refreshes)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # --- what subclasses provide ------------------------------------------------------------
    @abstractmethod
    def _transport(self) -> AbstractAsyncContextManager[Any]:
        """Provided by each subclass."""

    # --- state --------------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._client is not None and self._failure is None

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

    # --- lifecycle ----------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the connection and list the tools (nothing happens if already connected).

        Raises:
            ConfigurationError: the server cannot be started or reached, or did not answer
                within ``timeout``; the message names the server.
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
                f"cannot connect to MCP server {self.name} ({self.transport}): {_describe(exc)}"
            ) from exc

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
                self._failure = _describe(exc)
                logger.warning("MCP server %s failed: %s", self.name, self._failure)
        finally:
            self._client = None

    async def aclose(self) -> None:
        """Close the connection (ending a stdio server's process) and unmount its tools.

        Raises:
            Exception: what went wrong while closing (after everything was released).
        """
        self._unmount_all()
        task = self._task
        if task is None:
            return
        self._closing = True
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
        await _close_on_exit(self.aclose, exc_info, f"MCP server {self.name}")

    # --- tools --------------------------------------------------------------------------------
    async def mount(self, toolkit: Toolkit) -> list[Tool[..., Any]]:
        """Connect if needed and register every tool in ``toolkit`` under its own name.

        Tool names that are not valid model-facing names are skipped with a warning.

        Raises:
            ConfigurationError: the server cannot be reached, or one of its tool names is
                already taken in ``toolkit`` (the message names both owners); nothing is
                registered then.
        """
        opened_here = self._task is None
        await self.connect()
        try:
            tools = self._make_tools(self._listed)
            for item in tools.values():
                _check_free(toolkit, item)
        except BaseException:
            if opened_here:
                await self.aclose()
            raise
        for item in tools.values():
            toolkit.add(item)
        self._mounted.append((toolkit, tools))
        return list(tools.values())

    def _make_tools(self, listed: Iterable[types.Tool]) -> dict[str, McpTool]:
        tools: dict[str, McpTool] = {}
        for entry in listed:
            if not _NAME_RE.match(entry.name):
                logger.warning(
                    "MCP server %s: tool %r skipped: a model-facing name needs 1-64 ASCII "
                    "letters, digits, '_' or '-'",
                    self.name,
                    entry.name,
                )
                continue
            tools[entry.name] = McpTool(self, entry, timeout=self.timeout)
        return tools

    def _unmount_all(self) -> None:
        for toolkit, tools in self._mounted:
            for name, item in tools.items():
                if toolkit.get(name) is item:
                    toolkit.remove(name)
        self._mounted.clear()

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout: float | None = None
    ) -> ToolOutput:
        """Call ``name`` on the server; failures raise model-facing :class:`ToolError`."""
        client = self._client
        if client is None or self._failure is not None:
            reason = self._failure or self.status
            raise ToolError(f"MCP server {self.name} is not available ({reason})")
        limit = timeout or self.timeout
        try:
            with anyio.fail_after(limit):
                result = await client.call_tool(name, arguments, read_timeout_seconds=limit)
        except TimeoutError:
            raise ToolTimeoutError(
                f"MCP server {self.name} did not answer within {limit:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise ToolTimeoutError(
                    f"MCP server {self.name} did not answer within {limit:g} s"
                ) from None
            if exc.code == types.CONNECTION_CLOSED:
                self._failure = "the connection was closed (the server exited or went away)"
                logger.warning("MCP server %s: %s", self.name, self._failure)
            raise ToolError(f"MCP server {self.name}: {exc}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.HTTPError) as exc:
            self._failure = _describe(exc)
            raise ToolError(f"MCP server {self.name} is not available ({self._failure})") from None
        return to_output(result)

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
            logger.info("MCP server %s: no change notifications (%s)", self.name, _describe(exc))

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
        fresh = {t.name: t for t in listed if _NAME_RE.match(t.name)}
        for toolkit, tools in self._mounted:
            for name in list(tools):
                entry = fresh.get(name)
                if entry is None or not tools[name]._same_as(entry):
                    if toolkit.get(name) is tools[name]:
                        toolkit.remove(name)
                    del tools[name]
            for name, entry in fresh.items():
                if name in tools:
                    continue
                item = McpTool(self, entry, timeout=self.timeout)
                try:
                    _check_free(toolkit, item)
                except ConfigurationError as exc:
                    logger.error("MCP server %s: new tool not added: %s", self.name, exc)
                    continue
                toolkit.add(item)
                tools[name] = item
        logger.info("MCP server %s: tools now %s", self.name, ", ".join(fresh) or "none")

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


class McpServerGroup:
    """Several MCP servers mounted together and closed in reverse order of opening.

    ``await toolkit.add_mcp(group)`` mounts each server in order; a tool name offered by two
    servers is a :class:`ConfigurationError` naming both.
    """

    def __init__(self, servers: Iterable[McpServer] = ()) -> None:
        self.servers: list[McpServer] = list(servers)
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ConfigurationError(f"MCP server names must be unique: {', '.join(twice)}")
        self._opened: list[McpServer] = []

    def __iter__(self) -> Iterator[McpServer]:
        return iter(self.servers)

    async def connect(self) -> None:
        """Connect every server, in order (see :meth:`McpServer.connect`)."""
        for server in self.servers:
            await server.connect()
            if server not in self._opened:
                self._opened.append(server)

    async def mount(self, toolkit: Toolkit) -> list[Tool[..., Any]]:
        """Mount every server's tools in ``toolkit``, in order."""
        mounted: list[Tool[..., Any]] = []
        for server in self.servers:
            mounted.extend(await server.mount(toolkit))
            if server not in self._opened:
                self._opened.append(server)
        return mounted

    async def aclose(self) -> None:
        """Close the servers in reverse order of opening; every one is closed even if some
        fail, then the first failure is raised."""
        first: BaseException | None = None
        while self._opened:
            server = self._opened.pop()
            try:
                await server.aclose()
            except Exception as exc:
                logger.warning("closing MCP server %s failed: %s", server.name, exc)
                first = first or exc
        if first is not None:
            raise first

    async def __aenter__(self) -> McpServerGroup:
        try:
            await self.connect()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await _close_on_exit(self.aclose, exc_info, "MCP servers")


# --- helpers ----------------------------------------------------------------------------------
def _check_free(toolkit: Toolkit, item: McpTool) -> None:
    existing = toolkit.get(item.name)
    if existing is None:
        return
    if isinstance(existing, McpTool):
        owner = f"MCP server {existing.server.name!r}"
    else:
        owner = "a local tool"
    raise ConfigurationError(
        f"tool name clash: MCP server {item.server.name!r} and {owner} both offer a tool "
        f"named {item.name!r}; tools keep their servers' names, so mount only one of them "
        "in this toolkit"
    )


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    from shelfhand import __version__

    return __version__


async def _close_on_exit(
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
