"""A tool call to shelfhand's own MCP server over streamable HTTP (``shelfhand mcp serve
--transport http``, the bundled sample documents, ``retrieve``), timed from the official SDK's
client in another process, per tree.

Each tree's server runs in a process of its own (``PYTHONPATH`` at its ``src``), trees
interleaved round by round; reported: p50 and p95 ms of ``--calls`` calls (after a warm-up),
median over the rounds.

    python bench/mcp_serve.py                                  # this tree
    python bench/mcp_serve.py --trees /tmp/before .            # a worktree beside it
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from shelfhand.dev.services import free_port, wait_port


async def timed_calls(url: str, calls: int) -> list[float]:
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with Client(streamable_http_client(url)) as client:
        for _ in range(10):
            await client.call_tool("retrieve", {"query": "保修期"})
        samples = []
        for i in range(calls):
            start = time.perf_counter()
            await client.call_tool("retrieve", {"query": "保修期" if i % 2 else "warranty"})
            samples.append((time.perf_counter() - start) * 1000)
    return sorted(samples)


def one(tree: Path, workspace: Path, calls: int) -> tuple[float, float]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "src")}
    env.pop("SHELFHAND_MODEL", None)
    command = [sys.executable, "-m", "shelfhand.cli", "mcp", "serve", "--transport", "http"]
    command += ["--port", str(port), "--workspace", str(workspace)]
    server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        if not wait_port(port, 60.0, alive=lambda: server.poll() is None):
            raise RuntimeError(f"{tree}: shelfhand mcp serve did not listen within 60 s")
        samples = anyio.run(timed_calls, f"http://127.0.0.1:{port}/mcp", calls)
    finally:
        server.terminate()
        server.wait(10)
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        ingest = [sys.executable, "-m", "shelfhand.cli", "ingest", "--samples"]
        subprocess.run([*ingest, "--workspace", str(workspace)], check=True, capture_output=True)
        rows: dict[Path, list[tuple[float, float]]] = {t: [] for t in a.trees}
        for _ in range(a.rounds):
            for tree in a.trees:
                rows[tree].append(one(tree, workspace, a.calls))
    print("| tree | retrieve over streamable HTTP, p50 ms | p95 ms |")
    print("|---|---|---|")
    for tree, got in rows.items():
        p50 = statistics.median(r[0] for r in got)
        p95 = statistics.median(r[1] for r in got)
        print(f"| {tree} | {p50:.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
