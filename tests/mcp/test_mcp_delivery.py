"""What an HTTP error says is about its own request: one call's 404 never makes another call
(a write) run again, a call answered with an error is never sent twice, and each error names
its own status. A real SDK server on 127.0.0.1 behind an ASGI gate that plays the proxy."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST, METHOD_NOT_FOUND
from mcp_helpers import Asgi, answer, gate, serve_asgi

from shelfhand.core.errors import ToolError
from shelfhand.mcp import StreamableHttpServer

pytestmark = pytest.mark.anyio


class Shop:
    """A server with one write (``place_order``, counted) and one read (``stock``).

    ``place_order`` records the order, then waits for ``answer`` before it answers with a
    JSON-RPC error: the order was placed, the server says something went wrong after that.
    """

    def __init__(self) -> None:
        self.orders: list[str] = []
        self.placed = anyio.Event()
        self.answer = anyio.Event()
        self.server: MCPServer[Any] = MCPServer("shop", log_level="WARNING")

        @self.server.tool()
        async def place_order(item: str) -> str:
            """Place an order (a write: never to be run twice for one call)."""
            self.orders.append(item)
            self.placed.set()
            await self.answer.wait()
            raise MCPError(code=INVALID_REQUEST, message="order placed, receipt not ready")

        @self.server.tool()
        def stock(item: str) -> int:
            """How many of ``item`` are in stock."""
            return 3


async def no_route(app: Asgi, scope: Any, receive: Any, send: Any) -> None:
    """A proxy without a route for this tool: 404 with a JSON-RPC error, the server untouched."""
    error = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": METHOD_NOT_FOUND, "message": "no route"},
    }
    await answer(send, 404, "application/json", json.dumps(error).encode())


async def bad_gateway_after_running(app: Asgi, scope: Any, receive: Any, send: Any) -> None:
    """The server runs the call; the proxy drops its answer and says 502."""

    async def dropped(message: Any) -> None:
        pass

    await app(scope, receive, dropped)
    await answer(send, 502, "text/plain", b"upstream went away")


async def test_a_404_for_one_call_never_makes_a_concurrent_write_run_again() -> None:
    # On a pre-2026 connection the write's answer streams on a response that opened (200)
    # before the other call's 404 came: the case a server-wide "last status" got wrong.
    shop = Shop()
    app = gate(shop.server.streamable_http_app(), {"stock": no_route})
    errors: dict[str, str] = {}

    async def call(name: str, arguments: dict[str, Any]) -> None:
        try:
            await server.call_tool(name, arguments)
        except ToolError as exc:
            errors[name] = str(exc)

    async with serve_asgi(app) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="shop", timeout=10, protocol="legacy")
        with anyio.fail_after(60):
            await server.connect()
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "place_order", {"item": "P20"})
                await shop.placed.wait()  # the write has run; its answer is still to come
                await call("stock", {"item": "P20"})  # answered 404 meanwhile
                shop.answer.set()
            await server.aclose()
    assert shop.orders == ["P20"]
    assert "HTTP 404" in errors["stock"] and "no route" in errors["stock"]
    assert "receipt not ready" in errors["place_order"] and "HTTP 404" not in errors["place_order"]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
@pytest.mark.parametrize("answered", ["with a JSON-RPC error", "with HTTP 502 by a proxy"])
async def test_an_mcp_call_answered_with_an_error_is_never_sent_twice(
    answered: str, protocol: str
) -> None:
    shop = Shop()
    shop.answer.set()
    rules = {"place_order": bad_gateway_after_running} if "502" in answered else {}
    app = gate(shop.server.streamable_http_app(), {"stock": no_route, **rules})
    async with serve_asgi(app) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="shop", timeout=10, protocol=protocol)
        with anyio.fail_after(60):
            await server.connect()
            with pytest.raises(ToolError) as missing:  # a 404 just before, on the same server
                await server.call_tool("stock", {"item": "P20"})
            with pytest.raises(ToolError) as failed:
                await server.call_tool("place_order", {"item": "P20"})
            await server.aclose()
    assert shop.orders == ["P20"]
    assert "HTTP 404" in str(missing.value)
    if "502" in answered:
        assert "HTTP 502 Bad Gateway" in str(failed.value)
    else:
        assert "receipt not ready" in str(failed.value) and "HTTP 404" not in str(failed.value)
