"""MCP requests written out as JSON-RPC, for tests that speak the wire format themselves (a
raw stdio pipe, a hijacked HTTP session) instead of through the SDK's client."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
"""The client's first request."""
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
"""What the client sends once the server has answered :data:`INITIALIZE`."""
LIST_TOOLS: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
"""The request for the server's tools."""


@contextmanager
def stdio_serve(
    env: dict[str, str], *, cwd: Path | None = None, kill_after: float = 60
) -> Iterator[subprocess.Popen[str]]:
    """``shelfhand mcp serve`` over stdio in a process of its own (text pipes), killed after
    ``kill_after`` seconds (a server that never answers or never ends ends the test) and when
    the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "shelfhand.cli", "mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    killer = threading.Timer(kill_after, process.kill)
    killer.start()
    try:
        yield process
    finally:
        killer.cancel()
        process.kill()


def replies_until(
    process: subprocess.Popen[str], requests: Sequence[dict[str, Any]], last_id: int, what: str
) -> list[dict[str, Any]]:
    """Write ``requests`` to ``process`` (stdin stays open) and read its reply lines, every
    one a JSON-RPC message, up to the one answering ``last_id``; ``what`` names that request
    in the failure of a server that ends first."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
    process.stdin.flush()
    replies: list[dict[str, Any]] = []
    while not replies or replies[-1].get("id") != last_id:
        line = process.stdout.readline()
        assert line, f"the server ended without answering {what}"
        replies.append(json.loads(line))
    return replies
