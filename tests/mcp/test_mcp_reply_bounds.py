"""A message from an MCP server over HTTP is read up to ``max_message_bytes`` (a JSON reply,
or one event of a stream): a longer one fails the call that asked, saying why, and the
server stays usable."""

from __future__ import annotations

import anyio
import pytest
from echo_server import build
from mcp_helpers import serve_asgi

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ConfigurationError, ToolError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.mcp import SseServer, StreamableHttpServer
from shelfhand.tools.governance import CUT_RESULT, Governance, GovernancePolicy
from shelfhand.tools.toolkit import Toolkit
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


async def test_a_long_result_within_the_bound_is_cut_for_the_model_at_max_result_chars() -> None:
    """A reply the transport reads whole (64 KiB of Chinese text) is still cut, like a local
    tool's, at the toolkit's ``max_result_chars`` before the model and the transcript get it."""
    run = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="remote")
        kit = Toolkit(governance=Governance(GovernancePolicy(max_result_chars=1000)))
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            try:
                call = ToolCallBlock(id="c1", name="big", arguments='{"kib": 64}')
                result = await kit.call(call, run)
            finally:
                await server.aclose()
    assert not result.is_error and result.content.startswith("退货政策退货政策")
    total = len("退货政策" * (64 * 1024 // 12))
    assert result.content.endswith(CUT_RESULT.format(total=total, shown=1000))
