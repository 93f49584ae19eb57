"""An error the server sent is the server's: a JSON-RPC error whose code the SDK also uses for a
closed connection, a timeout or an unknown session comes back to the model as the server's own
message, and the server is neither restarted nor sent the call again. A reply the SDK cannot
read is named in one line, at once, whatever the transport. Real SDK servers
(tests/mcp/variant_server.py) over stdio and HTTP, a hand-written one (tests/mcp/raw_server.py)
for replies the SDK never sends, and a proxy (mcp_helpers.gate) that sends them over HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import echo_server
import pytest
from mcp.types import CONNECTION_CLOSED, INVALID_REQUEST, REQUEST_TIMEOUT
from mcp_helpers import HERE, answer, gate, serve_asgi
from variant_server import build

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ConfigurationError, ToolError, ToolTimeoutError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.mcp import McpServer, StdioServer, StreamableHttpServer
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio

VARIANT_SERVER = str(HERE / "variant_server.py")
RAW_SERVER = str(HERE / "raw_server.py")


def variant(kind: str, **kw: Any) -> StdioServer:
    return StdioServer(sys.executable, [VARIANT_SERVER, kind], name=kind, **kw)


@asynccontextmanager
async def errors_server(transport: str) -> AsyncIterator[McpServer]:
    if transport == "stdio":
        yield variant("errors", timeout=20)
        return
    async with serve_asgi(build("errors").streamable_http_app()) as base:
        yield StreamableHttpServer(f"{base}/mcp", name="errors", timeout=20)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(
    ("code", "message"),
    [
        (CONNECTION_CLOSED, "quota exceeded: 0 of 100 requests left today"),
        (REQUEST_TIMEOUT, "upstream API rate limited"),
        (INVALID_REQUEST, "Session not found"),
    ],
    ids=["-32000", "-32001", "-32600"],
)
async def test_a_servers_own_error_with_a_transport_code_is_its_message_and_runs_once(
    code: int, message: str, transport: str
) -> None:
    sibling: dict[str, str] = {}

    async def slow_sibling() -> None:
        sibling["answer"] = (await server.call_tool("slow", {"seconds": 1})).content

    with anyio.fail_after(60):
        async with errors_server(transport) as server:
            await server.connect()
            pid = (await server.call_tool("calls", {})).content.split()[0]
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_sibling)  # in flight while the error comes back
                with pytest.raises(ToolError) as failed:
                    await server.call_tool("fail_with", {"code": code, "message": message})
            after = (await server.call_tool("calls", {})).content
            await server.aclose()
    assert not isinstance(failed.value, ToolTimeoutError)
    # (over HTTP the SDK server answers -32600 with status 400, which the message adds)
    assert str(failed.value).startswith(f"MCP server errors: {message}")
    assert sibling["answer"] == "slept 1 s"  # the healthy server was not restarted under it
    # the same process ran calls, slow, fail_with (once: not sent again) and calls
    assert after == f"{pid} 4" and server.connections == 1


async def test_a_malformed_result_fails_the_call_in_one_line_naming_the_server() -> None:
    server = variant("malformed", timeout=20)
    kit = Toolkit()
    run = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        results = [
            await kit.call(ToolCallBlock(id=name, name=name, arguments=json.dumps({})), run)
            for name in ("hologram", "no_text", "fine")
        ]
        await server.aclose()
    hologram, no_text, fine = results
    assert hologram.is_error and no_text.is_error
    assert "MCP server malformed sent a malformed reply to tools/call hologram" in hologram.content
    assert "MCP server malformed sent a malformed reply to tools/call no_text" in no_text.content
    for failed in (hologram, no_text):
        assert "\n" not in failed.content and len(failed.content) < 200, failed.content
    assert fine.content == "fine" and not fine.is_error and server.connections == 1


def raw(method: str, reply: dict[str, Any]) -> StdioServer:
    """A server whose reply to ``method`` (to ``tools/call`` only ``odd``'s) is ``reply``."""
    return StdioServer(
        sys.executable, [RAW_SERVER, method, json.dumps(reply)], name="raw", timeout=30
    )


NOT_OBJECTS = [5, [], "x", None]


@pytest.mark.parametrize("result", NOT_OBJECTS, ids=json.dumps)
async def test_a_result_that_is_not_an_object_fails_the_call_at_once_and_the_server_goes_on(
    result: Any,
) -> None:
    # (the SDK drops such a message: the call waited out its 30 s)
    server = raw("tools/call", {"result": result})
    with anyio.fail_after(60):
        await server.connect()
        try:
            with anyio.fail_after(10), pytest.raises(ToolError) as failed:
                await server.call_tool("odd", {})
            fine = await server.call_tool("fine", {})
        finally:
            await server.aclose()
    assert not isinstance(failed.value, ToolTimeoutError)
    assert str(failed.value) == (
        "MCP server raw sent a malformed reply to tools/call odd (its result is not a JSON object)"
    )
    assert fine.content == "fine" and server.connections == 1


async def test_the_sdks_traceback_for_a_reply_we_report_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the SDK's stdio client logged "Failed to parse JSONRPC message from server" at ERROR
    # with pydantic's lines (about 20 on stderr) before our one-line error, for every reply
    server = raw("tools/call", {"result": 5})
    with anyio.fail_after(60):
        await server.connect()
        try:
            with pytest.raises(ToolError, match="its result is not a JSON object"):
                await server.call_tool("odd", {})
        finally:
            await server.aclose()
    assert not [r for r in caplog.records if r.name.startswith("mcp.client")]


async def test_an_error_that_is_not_an_object_fails_the_call_at_once() -> None:
    server = raw("tools/call", {"error": "quota exceeded"})
    with anyio.fail_after(60):
        await server.connect()
        try:
            with anyio.fail_after(10), pytest.raises(ToolError) as failed:
                await server.call_tool("odd", {})
        finally:
            await server.aclose()
    assert str(failed.value) == (
        "MCP server raw sent a malformed reply to tools/call odd (its error is not a JSON object)"
    )


@pytest.mark.parametrize("method", ["initialize", "tools/list"])
@pytest.mark.parametrize("result", [5, None], ids=json.dumps)
async def test_a_handshake_or_tool_list_that_is_not_an_object_is_a_mount_error_at_once(
    method: str, result: Any
) -> None:
    server = raw(method, {"result": result})
    with anyio.fail_after(10), pytest.raises(ConfigurationError) as failed:
        await Toolkit().add_mcp(server)
    assert str(failed.value) == (
        "cannot connect to MCP server raw (stdio): "
        f"it sent a malformed reply to {method} (its result is not a JSON object)"
    )


LISTING_FAILURES = {
    "an error": ({"error": {"code": -32603, "message": "catalogue database down"}}, ": "),
    "a list that is not one": ({"result": {"resources": 5, "prompts": 5}}, " sent a malformed"),
    "not an object": ({"result": 5}, " sent a malformed"),
}


@pytest.mark.parametrize("reply", LISTING_FAILURES.values(), ids=LISTING_FAILURES)
async def test_a_failed_resource_list_mounts_the_tools_without_read_resource(
    reply: tuple[dict[str, Any], str], caplog: pytest.LogCaptureFixture
) -> None:
    # the whole server failed to mount, with the bare "catalogue database down" (no server
    # named) or pydantic's lines, though its tools had listed fine
    body, said = reply
    toolkit = Toolkit()
    with anyio.fail_after(60):
        mounted = await toolkit.add_mcp(raw("resources/list", body))
    assert [t.name for t in mounted] == ["odd", "fine"]
    warned = [r.getMessage() for r in caplog.records if "resources are not offered" in r.message]
    assert len(warned) == 1 and warned[0].startswith(f"MCP server raw{said}")
    assert "\n" not in warned[0]


@pytest.mark.parametrize("reply", LISTING_FAILURES.values(), ids=LISTING_FAILURES)
async def test_a_failed_prompt_list_is_one_line_naming_the_server(
    reply: tuple[dict[str, Any], str],
) -> None:
    body, said = reply
    server = raw("prompts/list", body)
    with anyio.fail_after(60):
        await server.connect()
        try:
            with anyio.fail_after(10), pytest.raises(ToolError) as failed:
                await server.list_prompts()
            fine = await server.call_tool("fine", {})  # the server goes on
        finally:
            await server.aclose()
    assert str(failed.value).startswith(f"MCP server raw{said}")
    assert "\n" not in str(failed.value) and fine.content == "fine"


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
async def test_over_http_a_result_that_is_not_an_object_is_named_in_one_line(
    content_type: str,
) -> None:
    # (the SDK's streamable-HTTP client failed it with pydantic's account: lines of it)
    async def odd(app: Any, scope: Any, receive: Any, send: Any) -> None:
        request = json.loads((await receive())["body"])
        reply = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": 5})
        body = reply if content_type == "application/json" else f"event: message\ndata: {reply}\n\n"
        await answer(send, 200, content_type, body.encode())

    app = gate(echo_server.build().streamable_http_app(), {"echo": odd})
    async with serve_asgi(app) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="gated", timeout=30)
        with anyio.fail_after(60):
            await server.connect()
            try:
                with anyio.fail_after(10), pytest.raises(ToolError) as failed:
                    await server.call_tool("echo", {"text": "hi"})
                shouted = await server.call_tool("shout", {"text": "hi"})
            finally:
                await server.aclose()
    assert str(failed.value) == (
        "MCP server gated sent a malformed reply to tools/call echo (its result is not a JSON object)"
    )
    assert shouted.content == "HI!" and server.connections == 1
