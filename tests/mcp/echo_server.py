"""A small MCP server written with the SDK (MCPServer, formerly FastMCP): the peer in tests.

Run as ``python echo_server.py`` (stdio); tests also serve :func:`build` over SSE and
streamable HTTP in-process. Tools: ``echo`` (read-only), ``shout``, ``whoami_pid``,
``slow``, ``grow`` / ``shrink`` (change the tool list and announce it) and
``list_calls`` (how many tools/list requests this server answered).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations


def build(name: str = "echo", *, prefix: str = "") -> MCPServer[Any]:
    counter = {"tools/list": 0}

    async def count(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/list":
            counter["tools/list"] += 1
        return await call_next(ctx)

    server: MCPServer[Any] = MCPServer(name, log_level="WARNING", middleware=[count])

    @server.tool(name=f"{prefix}echo", annotations=ToolAnnotations(readOnlyHint=True))
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"

    @server.tool(name=f"{prefix}shout")
    def shout(text: str) -> str:
        """Shout the text."""
        return text.upper() + "!"

    @server.tool(name=f"{prefix}whoami_pid")
    def whoami_pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool(name=f"{prefix}slow")
    async def slow(seconds: float) -> str:
        """Wait, then answer."""
        await anyio.sleep(seconds)
        return "finally"

    @server.tool(name=f"{prefix}list_calls")
    def list_calls() -> int:
        """How many tools/list requests this server answered."""
        return counter["tools/list"]

    @server.tool(name=f"{prefix}grow")
    async def grow(ctx: Context) -> str:
        """Add the tool 'translate' and announce the change."""

        def translate(text: str) -> str:
            """Translate to Chinese (a stub)."""
            return {"hello": "你好"}.get(text, text)

        server.add_tool(translate, name=f"{prefix}translate")
        await _announce(ctx)
        return "grown"

    @server.tool(name=f"{prefix}shrink")
    async def shrink(ctx: Context) -> str:
        """Remove the tool 'shout' and announce the change."""
        server.remove_tool(f"{prefix}shout")
        await _announce(ctx)
        return "shrunk"

    return server


async def _announce(ctx: Context) -> None:
    # 2026-era clients hear it through subscriptions/listen, older ones as a plain notification.
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else "echo").run("stdio")
