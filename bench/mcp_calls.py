"""Cost of an MCP tool call through shelfhand, beside the SDK's own client, in one run.

One SDK server (``MCPServer``, a read-only ``echo``) is spoken to over stdio (a child process
running this script with ``--serve-stdio``) and over streamable HTTP (uvicorn on 127.0.0.1, a
child process running this script with ``--serve-http PORT``). Rows per transport, p50/p95 of ``--calls`` sequential calls (after a warm-up):

- ``sdk Client.call_tool``: the official client, nothing else.
- ``McpServer.call_tool``: shelfhand's connection (idle timeout with progress, reconnect
  check, result conversion and output cap).
- ``Toolkit.call``: the full governed path the agent uses (permission, breaker, audit-free
  toolkit, result block).

    python bench/mcp_calls.py [--calls 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from shelfhand.dev.services import free_port, wait_port


def build_server() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server: Any = MCPServer("bench", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    return server


async def timed(calls: int, one: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    for i in range(20):
        await one(i)  # warm-up
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        await one(i)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(len(samples) * 0.95) - 1],
    }


async def measure(transport: str, target: Any, calls: int) -> dict[str, dict[str, float]]:
    from mcp.client.client import Client

    from shelfhand.core.context import RunContext
    from shelfhand.core.messages import ToolCallBlock
    from shelfhand.mcp import StdioServer, StreamableHttpServer
    from shelfhand.tools.toolkit import Toolkit

    rows: dict[str, dict[str, float]] = {}
    if transport == "stdio":
        from mcp.client.stdio import StdioServerParameters

        sdk_target: Any = StdioServerParameters(command=sys.executable, args=target)
        server: Any = StdioServer(sys.executable, target, name="bench")
    else:
        from mcp.client.streamable_http import streamable_http_client

        sdk_target = streamable_http_client(target)
        server = StreamableHttpServer(target, name="bench")
    async with Client(sdk_target) as client:
        rows["sdk Client.call_tool"] = await timed(
            calls, lambda i: client.call_tool("echo", {"text": f"退货 {i}"})
        )
    kit = Toolkit()
    await kit.add_mcp(server)
    try:
        rows["McpServer.call_tool"] = await timed(
            calls, lambda i: server.call_tool("echo", {"text": f"退货 {i}"})
        )
        run = RunContext()

        async def governed(i: int) -> Any:
            block = ToolCallBlock(id=str(i), name="echo", arguments=json.dumps({"text": f"x{i}"}))
            return await kit.call(block, run)

        rows["Toolkit.call"] = await timed(calls, governed)
    finally:
        await server.aclose()
    return rows


async def main(calls: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    results["stdio"] = await measure("stdio", [__file__, "--serve-stdio"], calls)
    # the HTTP server in a process of its own, as it is deployed, binding its own socket:
    # served before from a socket this script made with protocol 0, on which asyncio leaves
    # Nagle's algorithm on, each call took 44-60 ms (40 ms waits for a delayed ACK), not 1.5
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve-http", str(port)])
    try:
        if not await anyio.to_thread.run_sync(wait_port, port, 30.0, lambda: server.poll() is None):
            raise RuntimeError(f"the MCP server did not listen on port {port} within 30 s")
        results["http"] = await measure("http", f"http://127.0.0.1:{port}/mcp", calls)
    finally:
        server.terminate()
        server.wait(10)
    return results


if __name__ == "__main__":
    if "--serve-stdio" in sys.argv:
        build_server().run("stdio")
        sys.exit(0)
    if "--serve-http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--serve-http") + 1])
        app = build_server().streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    out = anyio.run(main, options.calls)
    print("| transport | path | p50 ms | p95 ms |\n|---|---|---|---|")
    for transport, rows in out.items():
        for path, row in rows.items():
            print(f"| {transport} | {path} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} |")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
