"""A large result from an MCP server over stdio: what reading it costs the client's event
loop, per tree (a line of 1 to 32 MiB: the SDK joined and split the line again at every
64 KiB it read).

Each tree runs in a child process of its own (``PYTHONPATH`` at its ``src``) holding one
``StdioServer`` whose server (this script with ``--serve``) answers ``big(mib)`` with that
many MiB of text; reported: wall and CPU seconds of the call in the client.

    python bench/mcp_stdio.py                                   # this tree
    python bench/mcp_stdio.py --trees /tmp/before .             # a worktree beside it
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZES = (1, 4, 16, 32)


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server: Any = MCPServer("big", log_level="WARNING")

    @server.tool()
    def big(mib: int) -> str:
        """That many MiB of text."""
        return "x" * (mib * 1024 * 1024)

    server.run("stdio")


def client(sizes: list[int]) -> None:
    import anyio

    from shelfhand.mcp import StdioServer

    async def main() -> None:
        server = StdioServer(sys.executable, [__file__, "--serve"], name="big", timeout=600)
        async with server:
            await server.call_tool("big", {"mib": 1})  # warm-up
            for mib in sizes:
                wall, cpu = time.perf_counter(), time.process_time()
                await server.call_tool("big", {"mib": mib})
                row = {"mib": mib, "wall": time.perf_counter() - wall}
                row["cpu"] = time.process_time() - cpu
                print(json.dumps(row), flush=True)

    anyio.run(main)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve()
        return
    if a.client:
        client(a.sizes)
        return
    print("| tree | result (MiB) | wall s | client CPU s |")
    print("|---|---|---|---|")
    for tree in a.trees:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}
        command = [sys.executable, __file__, "--client", "--sizes", *map(str, a.sizes)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            row = json.loads(line)
            print(f"| {tree} | {row['mib']} | {row['wall']:.2f} | {row['cpu']:.2f} |")


if __name__ == "__main__":
    main()
