"""Cold start: the first ``retrieve`` of a fresh ``shelfhand mcp serve`` and the first search of
a fresh ``shelfhand serve``, with the default offline embedders (MiniLM + USE).

The issue this answers: the first search of a fresh process loaded the embedders and the
Chinese segmenter inside the call and took longer than the 5 s tool timeout. Now both servers
warm up before they answer (the MCP handshake, ``/readyz``). Measured per fresh process:

- ``mcp serve`` (stdio, the official ``mcp`` SDK client): seconds until the handshake
  answers, then the first ``retrieve`` call's wall time and whether it succeeded;
- ``serve``: seconds until ``/readyz`` answers ready, then the first
  ``/v1/knowledge/search`` request's wall time.

    python bench/cold_start.py [--runs 3] [--workspace DIR]

The workspace holds the bundled samples (ingested once with the default embedders).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

QUERY = "投影仪保修期多久？"
STARTED = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def prepare(workspace: Path) -> None:
    if (workspace / "knowledge.db").is_file():
        return
    cmd = [sys.executable, "-m", "shelfhand.cli", "ingest", "--samples", "-w", str(workspace)]
    subprocess.run(cmd, env=_env(), check=True, capture_output=True, timeout=900)


async def mcp_run(workspace: Path) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "shelfhand.cli", "mcp", "serve", "-w", str(workspace)],
        env=_env(),
    )
    t0 = time.perf_counter()
    async with Client(params, read_timeout_seconds=300) as client:
        ready = time.perf_counter() - t0
        t1 = time.perf_counter()
        result = await client.call_tool("retrieve", {"query": QUERY})
        first = time.perf_counter() - t1
    return {"ready_s": ready, "first_retrieve_s": first, "ok": not result.is_error}


def serve_run(workspace: Path) -> dict[str, Any]:
    env = _env()
    env["SHELFHAND_API_KEYS"] = json.dumps({"k": {"tenant": "default", "user": "u"}})
    cmd = [sys.executable, "-m", "shelfhand.cli", "serve", "-w", str(workspace), "--port", "0"]
    t0 = time.perf_counter()
    process = subprocess.Popen(
        [*cmd, "--no-access-log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = next(m.group(1) for line in process.stdout if (m := STARTED.search(line)))
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer k"}, timeout=300) as c:
            assert c.get("/readyz").status_code == 200
            ready = time.perf_counter() - t0
            t1 = time.perf_counter()
            r = c.get("/v1/knowledge/search", params={"q": QUERY, "top_k": 5})
            first = time.perf_counter() - t1
        return {"ready_s": ready, "first_search_s": first, "ok": r.status_code == 200}
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workspace", type=Path)
    args = parser.parse_args()
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="shelfhand-cold-")) / "ws"
    prepare(workspace)
    print("| server | run | ready (s) | first call (s) | ok |")
    print("|---|---|---|---|---|")
    for i in range(1, min(args.runs, 10) + 1):
        m = asyncio.run(mcp_run(workspace))
        print(f"| mcp serve | {i} | {m['ready_s']:.2f} | {m['first_retrieve_s']:.3f} | {m['ok']} |")
    for i in range(1, min(args.runs, 10) + 1):
        s = serve_run(workspace)
        print(f"| serve | {i} | {s['ready_s']:.2f} | {s['first_search_s']:.3f} | {s['ok']} |")


if __name__ == "__main__":
    main()
