"""MCP servers as tools: connect over stdio, SSE or streamable HTTP (docs/design.md M1).

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

The server class is built in three layers, one module each: the connection's lifecycle
(:mod:`shelfhand.mcp.connection`: opening, losing, reopening with backoff, closing), the calls
(:mod:`shelfhand.mcp.calls`: tool calls, progress, what is sent again), and here what the
server offers and the toolkits it is mounted on.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Unpack

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp.client.client import Client

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError, ToolError
from shelfhand.mcp.calls import McpCalls
from shelfhand.mcp.connection import DEFAULT_TIMEOUT, close_on_exit
from shelfhand.mcp.options import ServerOptions, ToolSettings
from shelfhand.mcp.tool import McpTool, ResourceTool
from shelfhand.tools.tool import Tool
from shelfhand.tools.toolkit import Toolkit

__all__ = ["DEFAULT_TIMEOUT", "McpServer", "close_on_exit"]

logger = logging.getLogger(__name__)

_LIST_PAGE_CAP = 100
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MODERN = "2026-07-28"
_READ_RESOURCE = "read_resource"


class McpServer(McpCalls):
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

    def __init__(
        self,
        *,
        name: str,
        timeout: float = DEFAULT_TIMEOUT,
        protocol: str = "auto",
        **options: Unpack[ServerOptions],
    ) -> None:
        super().__init__(name=name, timeout=timeout, protocol=protocol, **options)
        self._refresh_wanted: asyncio.Event | None = None
        self._listed: list[types.Tool] = []
        self._resources: list[types.Resource] | None = None
        self._mounted: list[tuple[Toolkit, dict[str, McpTool], list[Tool[..., Any]]]] = []
        self.list_fetches = 0
        """How many times the tool list was fetched from the server (mounts + refreshes)."""

    @property
    def listed_tools(self) -> list[types.Tool]:
        """The server's tools as last listed (cached; refreshed on ``list_changed``)."""
        return list(self._listed)

    @property
    def offered_tools(self) -> list[str]:
        """The model-facing names mounting would register now (prefixed, filtered, without
        task-only tools; ``read_resource`` not included)."""
        return [t.name for t in self._make_tools(self._listed).values()]

    async def aclose(self) -> None:
        """Close the connection (ending a stdio server's process) and unmount its tools.

        Raises:
            Exception: what went wrong while closing (after everything was released).
        """
        self._unmount_all()
        await super().aclose()

    # --- mounting -----------------------------------------------------------------------------
    async def mount(self, toolkit: Toolkit) -> list[Tool[..., Any]]:
        """Connect if needed and register the server's tools in ``toolkit``.

        Tools are named ``prefix + name`` and filtered by ``tools``; names that are not valid
        model-facing names and tools that need task mode are skipped with a log line. A
        server that lists resources or resource templates adds ``<prefix>read_resource``,
        unless the filter leaves ``read_resource`` out or the server has a tool of that name
        itself (its own tool is mounted then).

        Raises:
            ConfigurationError: the server cannot be reached, or one of its tool names is
                already taken in ``toolkit`` (the message names both owners) or reserved;
                nothing is registered then, and a server this call connected is closed.
        """
        opened_here = self._task is None
        await self.connect()
        added: list[Tool[..., Any]] = []
        try:
            tools = self._make_tools(self._listed)
            extras: list[Tool[..., Any]] = []
            if _READ_RESOURCE not in tools and self.tool_filter(_READ_RESOURCE):
                extras.extend(await self._resource_tool())
            for item in [*tools.values(), *extras]:
                _check_free(toolkit, item, self.name)
            for item in [*tools.values(), *extras]:
                try:
                    toolkit.add(item)
                except InvalidArgumentError as exc:  # (a reserved name)
                    raise ConfigurationError(
                        f"MCP server {self.name!r}: tool {item.name!r} cannot be mounted: {exc}; "
                        "filter it out (tools=...) or give the server a prefix"
                    ) from None
                added.append(item)
        except BaseException:
            for item in added:
                if toolkit.get(item.name) is item:
                    toolkit.remove(item.name)
            if opened_here:
                await self.aclose()
            raise
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

    # --- resources and prompts ----------------------------------------------------------------
    async def _resource_tool(self) -> list[ResourceTool]:
        """``read_resource`` when the server lists resources or templates; none when it has
        none, or its listing fails: its tools are mounted all the same (the reason logged)."""
        try:
            resources = await self.list_resources()
        except ToolError as exc:
            logger.warning("%s; its resources are not offered (no read_resource)", exc)
            return []
        templates = await self._resource_templates()
        return [ResourceTool(self, resources, templates)] if resources or templates else []

    async def list_resources(self) -> list[types.Resource]:
        """The server's resources (fetched once per connection; empty if it has none).

        Raises:
            ToolError: the server answered with an error, or with a malformed list (one line
                naming the server); ``ToolTimeoutError`` when it did not answer in time.
        """
        if self._resources is None:
            client = await self._live_client()
            if client.server_capabilities.resources is None:
                return []
            found: list[types.Resource] = []
            cursor: str | None = None
            with self._asking("resources/list"):
                for _ in range(_LIST_PAGE_CAP):
                    page = await client.list_resources(cursor=cursor)
                    found.extend(page.resources)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            self._resources = found
        return list(self._resources)

    async def _resource_templates(self) -> list[types.ResourceTemplate]:
        """The server's resource templates (one page; empty if it has none or will not say:
        the capability does not promise templates)."""
        client = await self._live_client()
        if client.server_capabilities.resources is None:
            return []
        try:
            with self._asking("resources/templates/list"):
                return list((await client.list_resource_templates()).resource_templates)
        except ToolError as exc:
            logger.info("no resource templates (%s)", exc)
            return []

    async def list_prompts(self) -> list[types.Prompt]:
        """The server's prompts (one page; empty if it offers none).

        Raises:
            ToolError: as :meth:`list_resources`.
        """
        client = await self._live_client()
        if client.server_capabilities.prompts is None:
            return []
        with self._asking("prompts/list"):
            return list((await client.list_prompts()).prompts)

    # --- the connection's hooks: list when opening, follow list_changed -----------------------
    async def _on_open(self, client: Client) -> None:
        self._refresh_wanted = asyncio.Event()
        self._listed = await self._fetch_tools(client)
        self._resources = None  # listed again on demand

    def _watchers(self, client: Client) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        watchers: list[Callable[[], Coroutine[Any, Any, None]]] = [lambda: self._refresher(client)]
        if client.protocol_version == _MODERN and _announces_changes(client):
            watchers.append(lambda: self._listener(client))
        return watchers

    def _on_reopen(self) -> None:
        self._apply(self._listed)

    async def _on_message(self, message: Any) -> None:
        # Runs inside the session's receive loop: only flag the refresh, never await a
        # request here (its response would be read by this very loop).
        if isinstance(message, types.ToolListChangedNotification):
            if self._refresh_wanted is not None:
                self._refresh_wanted.set()
            await anyio.lowlevel.checkpoint()
        else:
            await super()._on_message(message)

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


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)
