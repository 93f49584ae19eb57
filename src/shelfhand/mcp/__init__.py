"""MCP both ways (DESIGN M1–M3): mount MCP servers' tools, and serve shelfhand over MCP.

Client side (this package's top level)::

    from shelfhand.mcp import StdioServer, StreamableHttpServer

    server = StdioServer(command="uvx", args=["mcp-server-time"], name="time")
    await toolkit.add_mcp(server)     # the server's tools, under their own names
    ...
    await server.aclose()             # connection closed, child process gone

Configuration files: :func:`load_mcp_config` (``mcp.json`` or ``[mcp]`` in
``shelfhand.toml``). Server side: :mod:`shelfhand.mcp.server` (``shelfhand mcp serve``).
Needs the ``mcp`` extra (``pip install "shelfhand[mcp]"``).
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError('shelfhand.mcp needs the MCP SDK: pip install "shelfhand[mcp]"') from exc

from shelfhand.mcp.client import DEFAULT_TIMEOUT, McpServer, McpServerGroup
from shelfhand.mcp.config import (
    ServerConfig,
    find_mcp_config,
    load_mcp_config,
    parse_mcp_config,
    refuse_stdio,
    servers_from_config,
)
from shelfhand.mcp.tool import McpTool
from shelfhand.mcp.transports import SseServer, StdioServer, StreamableHttpServer

__all__ = [
    "DEFAULT_TIMEOUT",
    "McpServer",
    "McpServerGroup",
    "McpTool",
    "ServerConfig",
    "SseServer",
    "StdioServer",
    "StreamableHttpServer",
    "find_mcp_config",
    "load_mcp_config",
    "parse_mcp_config",
    "refuse_stdio",
    "servers_from_config",
]
