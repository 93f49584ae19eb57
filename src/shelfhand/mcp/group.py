"""Several MCP servers opened, mounted and closed together (docs/design.md M1)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.mcp.client import McpServer, close_on_exit
from shelfhand.tools.tool import Tool
from shelfhand.tools.toolkit import Toolkit

__all__ = ["McpServerGroup"]

logger = logging.getLogger(__name__)


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
        await close_on_exit(self.aclose, exc_info, "MCP servers")
