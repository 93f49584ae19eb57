"""``shelfhand mcp serve``, spoken to by MCP SDK clients over stdio and streamable HTTP."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream
from mcp.client.client import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import serve_asgi

from shelfhand.agent.agent import Agent
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.mcp import SseServer, StreamableHttpServer
from shelfhand.mcp.server import build_http_app
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.builtins import calculator
from shelfhand.tools.toolkit import Toolkit
from support.mcp_wire import INITIALIZE, LIST_TOOLS

pytestmark = pytest.mark.anyio

ACME_DOC = "# 退货政策\n\n拆封后 7 天内可以退货，需保留原包装。Acme 投影仪保修两年。\n"
GLOBEX_DOC = (
    "# Globex wholesale pricing\n\nThe Globex wholesale price for the X200 projector is "
    "499 dollars. 退货 requests go to the Globex partner desk.\n"
)
KEYS = {
    "key-acme": {"tenant": "acme", "user": "alice", "roles": ["user"]},
    "key-globex": {"tenant": "globex", "user": "bob", "roles": ["user"]},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A workspace with one Chinese document for tenant acme and one for tenant globex."""
    root = tmp_path_factory.mktemp("mcp-serve")
    for folder, name, body in (
        ("acme", "returns.md", ACME_DOC),
        ("globex", "pricing.md", GLOBEX_DOC),
    ):
        (root / folder).mkdir()
        (root / folder / name).write_text(body, encoding="utf-8")
    ws = root / "ws"
    with KnowledgeBase(ws, EmbeddingRouter({"any": HashingEmbedder()})) as kb:
        kb.ingest([root / "acme"], tenant_id="acme")
        kb.ingest([root / "globex"], tenant_id="globex")
    yield ws


def serve_env(ws: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(ws), SHELFHAND_EMBEDDER="hashing", **extra)
    return env


def sources(result: Any) -> list[str]:
    citations = (result.structured_content or {}).get("citations", [])
    return [Path(c["source"]).name for c in citations]


SERVER_INFO: dict[str, Any] = {}


async def retrieve_over_stdio(ws: Path, *cli: str, query: str) -> tuple[list[str], Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "shelfhand.cli", "mcp", "serve", *cli],
        env=serve_env(ws),
    )
    async with Client(params) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("retrieve", {"query": query})
        SERVER_INFO["info"] = client.server_info
    return names, result


async def test_an_sdk_client_retrieves_cited_passages_over_stdio(workspace: Path) -> None:
    from shelfhand import __version__

    with anyio.fail_after(60):
        names, result = await retrieve_over_stdio(
            workspace, "--tenant", "acme", "--user", "alice", query="拆封后可以退货吗"
        )
    info = SERVER_INFO["info"]
    assert info is not None and info.name == "shelfhand" and info.version == __version__
    assert names[0] == "retrieve" and {"calculator", "current_time"} <= set(names)
    assert not result.is_error
    assert result.content[0].text.startswith("[1] 退货政策")
    assert "7 天内" in result.content[0].text
    assert sources(result) == ["returns.md"]


async def test_a_stdio_caller_of_another_tenant_never_sees_acme_documents(workspace: Path) -> None:
    with anyio.fail_after(60):
        _, result = await retrieve_over_stdio(workspace, "--tenant", "globex", query="退货 7 天")
    assert "returns.md" not in sources(result)
    assert "拆封" not in result.content[0].text


@asynccontextmanager
async def cli_http_server(
    ws: Path, *flags: str, keys: dict[str, Any] | None = KEYS, loopback: bool = True
) -> AsyncIterator[str]:
    """``shelfhand mcp serve --transport http --port 0 [flags]`` as a child process; yields
    its URL."""
    command = [sys.executable, "-m", "shelfhand.cli", "mcp", "serve", "--transport", "http"]
    env = serve_env(ws, **({"SHELFHAND_API_KEYS": json.dumps(keys)} if keys else {}))
    process = await anyio.open_process([*command, "--port", "0", *flags], env=env)
    try:
        assert process.stderr is not None
        seen = ""
        with anyio.fail_after(60):
            async for chunk in TextReceiveStream(process.stderr):
                seen += chunk
                if "listening on " in seen and seen.endswith("\n"):
                    break
        url = seen.split("listening on ", 1)[1].split()[0]
        if loopback:
            assert url.startswith("http://127.0.0.1:"), seen  # loopback by default
        yield url
    finally:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def retrieve_over_http(url: str, key: str, query: str) -> Any:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        assert "retrieve" in [t.name for t in (await client.list_tools()).tools]
        return await client.call_tool("retrieve", {"query": query})


async def test_http_callers_get_their_own_tenants_documents_by_api_key(workspace: Path) -> None:
    with anyio.fail_after(90):
        async with cli_http_server(workspace) as url:
            acme = await retrieve_over_http(url, "key-acme", "拆封后可以退货吗")
            globex = await retrieve_over_http(url, "key-globex", "拆封后可以退货吗")
            # A missing or unknown key is refused before any MCP traffic.
            async with httpx2.AsyncClient() as plain:
                anonymous = await plain.post(url, json={})
                wrong = await plain.post(url, json={}, headers={"Authorization": "Bearer nope"})
            refused = StreamableHttpServer(url, {"Authorization": "Bearer nope"}, timeout=10)
            with pytest.raises(ConfigurationError, match="401"):
                await refused.connect()
    assert sources(acme) == ["returns.md"]
    assert "returns.md" not in sources(globex)
    assert anonymous.status_code == 401 and wrong.status_code == 401


async def test_with_no_keys_configured_the_configured_identity_is_used_and_warned_about(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kb = KnowledgeBase(workspace, EmbeddingRouter({"any": HashingEmbedder()}))
    globex = UserContext(tenant_id="globex", user_id="ops")
    with caplog.at_level(logging.WARNING, logger="shelfhand.mcp.server"):
        app = build_http_app([make_retrieve_tool(kb), calculator], keys={}, fallback=globex)
    assert "no API keys configured" in caplog.text
    try:
        with anyio.fail_after(30):
            async with serve_asgi(app) as base:
                result = await retrieve_over_http(f"{base}/mcp", "anything", "Globex X200 price")
    finally:
        kb.close()
    assert sources(result) == ["pricing.md"]


async def test_a_shelfhand_agent_mounts_another_shelfhands_retrieve_with_citations(
    workspace: Path,
) -> None:
    kb = KnowledgeBase(workspace, EmbeddingRouter({"any": HashingEmbedder()}))
    keys = {"k": UserContext(tenant_id="acme", user_id="alice")}
    app = build_http_app(
        [make_retrieve_tool(kb)], keys=keys, fallback=UserContext(tenant_id="x", user_id="y")
    )
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "退货政策"}), text("拆封后 7 天内可退 [1]。")]
    )
    try:
        with anyio.fail_after(30):
            async with serve_asgi(app) as base:
                remote = StreamableHttpServer(
                    f"{base}/mcp", {"Authorization": "Bearer k"}, name="docs"
                )
                kit = Toolkit()
                await kit.add_mcp(remote)
                result = await Agent(model=model, toolkit=kit).run("拆封后还能退吗？")
                await remote.aclose()
    finally:
        kb.close()
    assert Path(result.citations[0].source).name == "returns.md"
    assert kit.tools == []


async def test_a_mounted_servers_passages_take_the_next_numbers_of_the_run(
    workspace: Path,
) -> None:
    # both the local retrieve and the server number from 1: the run held two [1]s, and the
    # model read "[1]" for two passages
    kb = KnowledgeBase(workspace, EmbeddingRouter({"any": HashingEmbedder()}))
    acme = UserContext(tenant_id="acme", user_id="alice")
    app = build_http_app([make_retrieve_tool(kb)], keys={"k": acme}, fallback=acme)
    model = ScriptedModel(
        [
            tool_call("retrieve", {"query": "退货政策"}),
            tool_call("docs_retrieve", {"query": "保修"}),
            text("拆封后 7 天内可退 [1]，保修两年 [2]。"),
        ]
    )
    try:
        with anyio.fail_after(30):
            async with serve_asgi(app) as base:
                remote = StreamableHttpServer(
                    f"{base}/mcp", {"Authorization": "Bearer k"}, name="docs", prefix="docs_"
                )
                kit = Toolkit([make_retrieve_tool(kb)])
                await kit.add_mcp(remote)
                result = await Agent(model=model, toolkit=kit).run("退货和保修？", context=acme)
                await remote.aclose()
    finally:
        kb.close()
    numbers = [c.index for c in result.citations]
    assert numbers == list(range(1, len(numbers) + 1))
    local = [c for c in result.citations if not c.source.startswith("MCP server docs: ")]
    theirs = [c for c in result.citations if c.source.startswith("MCP server docs: ")]
    assert local and theirs and theirs[0].index == len(local) + 1
    read = [r.content for m in result.messages for r in m.tool_results]
    assert read[0].startswith("[1] ") and read[1].startswith(f"[{theirs[0].index}] ")


async def test_only_read_only_tools_can_be_served() -> None:
    from shelfhand.mcp.server import build_server
    from shelfhand.tools.tool import tool

    @tool
    def delete_everything() -> str:
        """Not read-only."""
        return "gone"

    with pytest.raises(ValueError, match="delete_everything"):
        build_server([delete_everything], lambda _ctx: UserContext(tenant_id="t", user_id="u"))


async def retrieve_over_sse(url: str, key: str, query: str) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    async with Client(sse_client(url, headers=headers)) as client:
        assert "retrieve" in [t.name for t in (await client.list_tools()).tools]
        return await client.call_tool("retrieve", {"query": query})


async def test_the_sse_transport_serves_sdk_sse_clients_by_api_key(workspace: Path) -> None:
    kb = KnowledgeBase(workspace, EmbeddingRouter({"any": HashingEmbedder()}))
    keys = {
        "key-acme": UserContext(tenant_id="acme", user_id="alice"),
        "key-globex": UserContext(tenant_id="globex", user_id="bob"),
    }
    app = build_http_app(
        [make_retrieve_tool(kb)],
        keys=keys,
        fallback=UserContext(tenant_id="x", user_id="y"),
        transport="sse",
    )
    try:
        with anyio.fail_after(60):
            async with serve_asgi(app) as base:
                acme = await retrieve_over_sse(f"{base}/sse", "key-acme", "拆封后可以退货吗")
                globex = await retrieve_over_sse(f"{base}/sse", "key-globex", "拆封后可以退货吗")
                async with httpx2.AsyncClient() as plain:
                    anonymous = await plain.get(f"{base}/sse")
                # shelfhand's own client speaks SSE too
                remote = SseServer(f"{base}/sse", {"Authorization": "Bearer key-acme"})
                await remote.connect()
                over_client = await remote.call_tool("retrieve", {"query": "退货政策"})
                await remote.aclose()
    finally:
        kb.close()
    assert sources(acme) == ["returns.md"]
    assert "returns.md" not in sources(globex)
    assert anonymous.status_code == 401
    assert [Path(c.source).name for c in over_client.citations] == ["returns.md"]


async def test_a_session_stays_bound_to_the_key_that_opened_it(workspace: Path) -> None:
    kb = KnowledgeBase(workspace, EmbeddingRouter({"any": HashingEmbedder()}))
    keys = {
        "key-acme": UserContext(tenant_id="acme", user_id="alice"),
        "key-globex": UserContext(tenant_id="globex", user_id="bob"),
    }
    app = build_http_app([make_retrieve_tool(kb)], keys=keys, fallback=keys["key-acme"])
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        with anyio.fail_after(30):
            async with serve_asgi(app) as base, httpx2.AsyncClient(headers=headers) as http:
                opened = await http.post(
                    f"{base}/mcp", json=INITIALIZE, headers={"Authorization": "Bearer key-acme"}
                )
                session = opened.headers["mcp-session-id"]
                hijack = await http.post(
                    f"{base}/mcp",
                    json=LIST_TOOLS,
                    headers={"Authorization": "Bearer key-globex", "Mcp-Session-Id": session},
                )
    finally:
        kb.close()
    assert opened.status_code == 200
    assert hijack.status_code == 404  # as if the session did not exist


async def test_allowed_hosts_turn_on_dns_rebinding_protection_off_loopback() -> None:
    from shelfhand.mcp.server import transport_security

    assert transport_security("0.0.0.0") is None  # nothing to check against: documented
    loopback = transport_security("127.0.0.1")
    assert loopback is not None and "localhost:*" in loopback.allowed_hosts
    security = transport_security("0.0.0.0", ["mcp.example.com"], ["https://app.example.com"])
    app = build_http_app(
        [calculator],
        keys={},
        fallback=UserContext(tenant_id="t", user_id="u"),
        host="0.0.0.0",
        security=security,
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    with anyio.fail_after(30):
        async with serve_asgi(app) as base, httpx2.AsyncClient(headers=accept) as http:
            evil = await http.post(f"{base}/mcp", json=body, headers={"Host": "evil.example"})
            good_host = await http.post(
                f"{base}/mcp", json=body, headers={"Host": "mcp.example.com"}
            )
            evil_origin = await http.post(
                f"{base}/mcp",
                json=body,
                headers={"Host": "mcp.example.com", "Origin": "https://evil.example"},
            )
    assert evil.status_code == 421 and evil_origin.status_code == 403
    assert good_host.status_code not in (403, 421)


async def test_a_non_loopback_bind_without_keys_starts_only_with_allow_anonymous(
    workspace: Path,
) -> None:
    with anyio.fail_after(90):
        async with cli_http_server(
            workspace, "--host", "0.0.0.0", "--allow-anonymous", keys=None, loopback=False
        ) as url:
            assert url.startswith("http://0.0.0.0:")
            local = url.replace("0.0.0.0", "127.0.0.1")
            async with Client(streamable_http_client(local)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
    assert "retrieve" in names


async def test_the_http_servers_connections_send_each_piece_at_once() -> None:
    """Nagle's algorithm off (TCP_NODELAY) on the served connections: asyncio sets it only
    on sockets made with their protocol named. With it on, each reply written in two pieces
    waited 40 ms for the client's delayed acknowledgement (a retrieve call took 94 ms, not
    14)."""
    import asyncio
    import socket

    from shelfhand.mcp.server import listening_socket

    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(
            writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        writer.close()

    sock = listening_socket("127.0.0.1", 0)
    server = await asyncio.start_server(handle, sock=sock)
    async with server:
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        await reader.read()  # until the server closes it
        writer.close()
    assert seen and seen[0] != 0
