"""MCP both ways (docs/design.md M1–M3): mount MCP servers' tools, and serve shelfhand over MCP.

Client side (this package's top level)::

    from shelfhand.mcp import StdioServer, StreamableHttpServer

    server = StdioServer(command="uvx", args=["mcp-server-time"], name="time", prefix="time_")
    await toolkit.add_mcp(server)     # time_get_current_time, time_convert_time
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

from shelfhand.mcp.client import DEFAULT_TIMEOUT, McpServer
from shelfhand.mcp.config import (
    ServerConfig,
    find_mcp_config,
    load_mcp_config,
    parse_mcp_config,
    refuse_stdio,
    servers_from_config,
)
from shelfhand.mcp.group import McpServerGroup
from shelfhand.mcp.options import DEFAULT_OUTPUT_LIMIT, ServerOptions, ToolFilter, ToolSettings
from shelfhand.mcp.tool import McpTool, ResourceTool
from shelfhand.mcp.transports import SseServer, StdioServer, StreamableHttpServer

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT",
    "McpServer",
    "McpServerGroup",
    "McpTool",
    "ResourceTool",
    "ServerConfig",
    "ServerOptions",
    "SseServer",
    "StdioServer",
    "StreamableHttpServer",
    "ToolFilter",
    "ToolSettings",
    "find_mcp_config",
    "load_mcp_config",
    "parse_mcp_config",
    "refuse_stdio",
    "servers_from_config",
]
