"""A message from an MCP server over HTTP is read up to ``max_message_bytes`` (a JSON reply,
or one event of a stream): a longer one fails the call that asked, saying why, and the
server stays usable."""

from __future__ import annotations

import anyio
import pytest
from echo_server import build
from mcp_helpers import serve_asgi

from shelfhand.core.errors import ConfigurationError, ToolError
from shelfhand.mcp import SseServer, StreamableHttpServer
from support.misbehaving_chat_server import FakeModelServer

pytestmark = pytest.mark.anyio

MIB = 1024**2


async def test_a_result_over_the_bound_fails_its_call_and_the_next_call_works() -> None:
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="remote", max_message_bytes=MIB)
        with anyio.fail_after(30):
            async with server:
                with pytest.raises(ToolError, match="a reply longer than 1 MiB"):
                    await server.call_tool("big", {"kib": 2048})
                small = await server.call_tool("big", {"kib": 64})
                echoed = await server.call_tool("echo", {"text": "还在"})
    assert len(small.content) >= 20_000
    assert echoed.content == "echo: 还在"


async def test_an_event_stream_is_bounded_per_event_not_in_all() -> None:
    # eight results over one session's stream, each of 68,000 characters (200 KiB or more
    # on the wire), over 1.6 MiB in all: each event under the bound
    async with serve_asgi(build().sse_app()) as base:
        server = SseServer(f"{base}/sse", name="legacy", max_message_bytes=MIB)
        with anyio.fail_after(60):
            async with server:
                for _ in range(8):
                    out = await server.call_tool("big", {"kib": 200})
                    assert not out.is_error and len(out.content) > 20_000  # (cut to 64 KiB)


@pytest.mark.parametrize(
    ("transport", "mode", "says"),
    [
        ("http", "endless_json", "cannot connect .*a reply longer than 1 MiB"),
        ("http", "endless_event", "cannot connect .*a reply longer than 1 MiB"),
        ("sse", "endless_event", "did not answer within 5 s .a reply longer than 1 MiB"),
    ],
)
async def test_a_server_whose_message_never_ends_is_refused_with_the_reason(
    model_server: FakeModelServer, transport: str, mode: str, says: str
) -> None:
    fake = model_server
    fake.modes.extend([mode] * 3)
    kind = StreamableHttpServer if transport == "http" else SseServer
    server = kind(fake.url, name="endless", timeout=5, max_message_bytes=MIB)
    with anyio.fail_after(20), pytest.raises(ConfigurationError, match=says):
        async with server:
            pass
