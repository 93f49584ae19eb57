"""MCP requests written out as JSON-RPC, for tests that speak the wire format themselves (a
raw stdio pipe, a hijacked HTTP session) instead of through the SDK's client."""

from __future__ import annotations

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
