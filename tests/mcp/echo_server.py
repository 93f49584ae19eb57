"""A small MCP server written with the SDK (MCPServer, formerly FastMCP): the peer in tests.

Run as ``python echo_server.py`` (stdio); tests also serve :func:`build` over SSE and
streamable HTTP in-process. Tools: ``echo`` (read-only), ``shout``, ``whoami_pid``, ``order_lookup`` (fails),
``tick``, ``slow``, ``grow`` / ``shrink`` (change the tool list and announce it),
``list_calls`` (how many tools/list requests this server answered), ``working`` (slow, but
reports progress), ``big`` (a long answer), ``picture`` (an image), ``background_job``
(listed as needing task mode), two resources (Chinese text, a PNG) and a prompt.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as McpToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations

PNG = bytes.fromhex("89504e470d0a1a0a") + b"\0" * 92  # 100 bytes that start like a PNG


def build(name: str = "echo", *, prefix: str = "") -> MCPServer[Any]:
    counter = {"tools/list": 0, "ticks": 0}

    async def count(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/list":
            counter["tools/list"] += 1
        result = await call_next(ctx)
        if ctx.method == "tools/list" and isinstance(result, dict):
            for listed in result.get("tools", ()):
                if listed.get("name") == f"{prefix}background_job":
                    listed["execution"] = {"taskSupport": "required"}
        return result

    server: MCPServer[Any] = MCPServer(name, log_level="WARNING", middleware=[count])

    @server.tool(name=f"{prefix}echo", annotations=ToolAnnotations(readOnlyHint=True))
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"

    @server.tool(name=f"{prefix}tick", annotations=ToolAnnotations(readOnlyHint=True))
    def tick() -> int:
        """How many times tick was called (read-only, but not the same answer twice)."""
        counter["ticks"] += 1
        return counter["ticks"]

    @server.tool(name=f"{prefix}shout")
    def shout(text: str) -> str:
        """Shout the text."""
        return text.upper() + "!"

    @server.tool(name=f"{prefix}order_lookup", annotations=ToolAnnotations(readOnlyHint=True))
    def order_lookup(order_id: str) -> str:
        """Look up an order (its database is down: the server answers with isError)."""
        raise McpToolError(f"order database unavailable while reading {order_id}")

    @server.tool(name=f"{prefix}whoami_pid")
    def whoami_pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool(name=f"{prefix}slow")
    async def slow(seconds: float) -> str:
        """Wait, then answer."""
        await anyio.sleep(seconds)
        return "finally"

    @server.tool(name=f"{prefix}working")
    async def working(seconds: float, every: float, ctx: Context) -> str:
        """Work for a while, reporting progress every so often (if every > 0)."""
        steps = 0
        while steps * max(every, 0.01) < seconds:
            await anyio.sleep(every if every > 0 else seconds)
            steps += 1
            if every > 0:
                await ctx.report_progress(steps, None, f"第 {steps} 步")
            else:
                break
        return f"worked {steps} steps"

    @server.tool(name=f"{prefix}big")
    def big(kib: int) -> str:
        """A long answer of about kib KiB (Chinese text)."""
        return "退货政策" * (kib * 1024 // 12)

    @server.tool(name=f"{prefix}picture")
    def picture() -> Image:
        """A small PNG."""
        return Image(data=PNG, format="png")

    @server.tool(name=f"{prefix}background_job")
    def background_job() -> str:
        """Runs only as a task (listed with taskSupport required)."""
        return "queued"

    @server.resource("notes://returns", name="returns", description="退货政策 (returns policy)")
    def returns_note() -> str:
        return "拆封后 7 天内可以退货。"

    @server.resource("images://logo", name="logo", mime_type="image/png")
    def logo() -> bytes:
        return PNG

    @server.prompt(name="summarise", description="总结一份文件 (summarise a document)")
    def summarise(path: str) -> str:
        return f"Summarise {path} in three sentences."

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
