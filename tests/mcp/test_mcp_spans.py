"""An MCP tool call in a traced run: an ``mcp tools/call`` span under the tool call's
``execute_tool`` span, against a real MCP server (streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp_helpers import serve_asgi

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.core.tracing import Tracer, enter, leave
from shelfhand.mcp import StreamableHttpServer
from shelfhand.tools.toolkit import Toolkit
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

RUN = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))


def notes_server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("notes", log_level="WARNING")

    @server.tool(name="read_note")
    def read_note(path: str) -> str:
        """Read a note."""
        return f"{path}: 退货须在七天内"

    return server


async def test_an_mcp_call_is_a_span_under_its_tool_call() -> None:
    spans = ListProcessor()
    async with serve_asgi(notes_server().streamable_http_app()) as base:
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(StreamableHttpServer(f"{base}/mcp", name="notes", timeout=10))
            root = Tracer([spans]).start_root("turn", trace_id="c" * 32, tenant_id="acme")
            token = enter(root)
            call = ToolCallBlock(id="c1", name="read_note", arguments='{"path": "退货.md"}')
            report = await kit.execute(call, RUN)
            leave(root, token)
    assert not report.result.is_error
    (tool_span,) = spans.named("execute_tool read_note")
    (mcp_span,) = spans.children(tool_span)
    assert mcp_span.name == "mcp tools/call read_note"
    assert mcp_span.kind == "mcp"
    assert mcp_span.attributes["mcp.server.name"] == "notes"
    assert mcp_span.status == "ok"
