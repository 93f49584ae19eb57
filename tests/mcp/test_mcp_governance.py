"""Governance of MCP tools, against a real MCP server (the SDK's MCPServer over streamable
HTTP on 127.0.0.1): read-only tools are not cached unless configured, and one tool's timeouts
do not block its sibling tools (issue 11 points 2 and 3)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from mcp_helpers import serve_asgi

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.mcp import StreamableHttpServer
from shelfhand.mcp.tool import McpTool
from shelfhand.tools.governance import Governance, GovernancePolicy
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio

RUN = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))


def files_server() -> MCPServer[Any]:
    """A file server whose note changes between calls, and a tool that hangs."""
    server: MCPServer[Any] = MCPServer("files", log_level="WARNING")
    versions = iter(["version 1", "version 2", "version 3"])
    read_only = ToolAnnotations(readOnlyHint=True, idempotentHint=True)

    @server.tool(name="read_note", annotations=read_only)
    def read_note(path: str) -> str:
        """Read a note."""
        return f"{path}: {next(versions)}"

    @server.tool(name="hang", annotations=read_only)
    async def hang() -> str:
        """Never answers in time."""
        await anyio.sleep(30)
        return "late"

    return server


async def test_a_read_only_mcp_tool_is_not_cached_and_one_tools_timeouts_spare_the_others() -> None:
    async with serve_asgi(files_server().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="files", timeout=10)
        policy = GovernancePolicy(retries=0, breaker_min_calls=2)
        kit = Toolkit(governance=Governance(policy))
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            hang = kit.get("hang")
            assert hang is not None and hang.read_only and hang.cache_ttl is None
            assert isinstance(hang, McpTool)
            hang.call_timeout = 0.3  # no answer or progress for 0.3 s: the call gives up
            try:
                read = ToolCallBlock(id="c1", name="read_note", arguments='{"path": "笔记.md"}')
                first = await kit.execute(read, RUN)
                second = await kit.execute(read, RUN)
                hung = [
                    await kit.call(ToolCallBlock(id="h", name="hang", arguments="{}"), RUN)
                    for _ in range(3)
                ]
                after = await kit.execute(read, RUN)
            finally:
                await server.aclose()
    assert first.result.content == "笔记.md: version 1"
    assert second.result.content == "笔记.md: version 2" and not second.replayed
    assert all("no answer or progress within 0.3 s" in h.content for h in hung[:2]), hung
    assert hung[2].content.startswith("tool hang unavailable: circuit open")
    assert after.result.content == "笔记.md: version 3"  # the sibling still runs
