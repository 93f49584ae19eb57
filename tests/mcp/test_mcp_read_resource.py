"""The synthetic ``read_resource`` tool: mounted only for a server that lists resources or
resource templates, governed by the tool filter, never in place of a server's own tool of that
name; and a mount that fails leaves nothing behind. Real SDK servers
(tests/mcp/variant_server.py) over stdio: every ``MCPServer`` advertises resources."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest
from mcp_helpers import HERE

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.mcp import McpServerGroup, McpTool, ResourceTool, StdioServer
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio

VARIANT_SERVER = str(HERE / "variant_server.py")


def variant(kind: str, **kw: Any) -> StdioServer:
    return StdioServer(sys.executable, [VARIANT_SERVER, kind], name=kind, timeout=20, **kw)


async def test_two_servers_without_resources_mount_unprefixed_side_by_side() -> None:
    weather, math = variant("weather"), variant("math")
    kit = Toolkit()
    with anyio.fail_after(60):
        async with McpServerGroup([weather, math]) as group:
            await kit.add_mcp(group)
            names = sorted(t.name for t in kit.tools)
    assert names == ["add", "forecast"]


async def test_resource_templates_alone_get_a_read_resource_tool_naming_them() -> None:
    server = variant("templates")
    kit = Toolkit()
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        reader = kit.get("read_resource")
        read = await server.read_resource("notes://returns")
        await server.aclose()
    assert isinstance(reader, ResourceTool)
    assert "notes://{slug}" in reader.description and "A note by its slug" in reader.description
    assert read.content == "note returns"


@pytest.mark.parametrize(
    "tools", [{"deny": ["read_resource"]}, ["ping"], {"deny": ["read_*"]}], ids=str
)
async def test_the_tool_filter_governs_read_resource(tools: Any) -> None:
    server = variant("templates", tools=tools)
    kit = Toolkit()
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        names = [t.name for t in kit.tools]
        await server.aclose()
    assert names == ["ping"]


async def test_a_servers_own_read_resource_tool_is_mounted_instead_of_the_synthetic_one() -> None:
    server = variant("own_read_resource")
    kit = Toolkit()
    with anyio.fail_after(60):
        mounted = await kit.add_mcp(server)
        result = await kit.call(
            ToolCallBlock(id="c1", name="read_resource", arguments='{"uri": "memo://one"}'),
            RunContext(user=UserContext(tenant_id="acme", user_id="alice")),
        )
        await server.aclose()
    assert [type(t) for t in mounted] == [McpTool]
    assert result.content == "own read_resource memo://one"


async def test_a_failed_mount_leaves_no_tool_registered_and_the_server_closed() -> None:
    server = variant("reserved")  # alpha, then a name the toolkit keeps for itself
    kit = Toolkit()
    with anyio.fail_after(60):
        with pytest.raises(ConfigurationError, match=r"MCP server 'reserved'.*use_tool_group"):
            await kit.add_mcp(server)
    assert kit.tools == []
    assert not server.connected and server.status == "closed"
