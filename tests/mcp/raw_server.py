"""An MCP server written by hand (JSON-RPC lines over stdio), for replies the SDK would never
send: ``python raw_server.py METHOD REPLY``.

It answers the handshake, ``tools/list`` (``odd`` and ``fine``), ``tools/call``,
``resources/list`` (one), ``resources/templates/list`` (none) and ``prompts/list`` (one)
properly, except that its reply to ``METHOD`` (one of those; for ``tools/call`` only the call
of ``odd``) is ``REPLY``, a JSON object of the reply's members other than
``jsonrpc`` and ``id``, such as ``{"result": 5}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object"}}
    for name in ("odd", "fine")
]


def proper(request: dict[str, Any]) -> dict[str, Any]:
    """The reply a well-behaved server sends to ``request``."""
    method = request["method"]
    if method == "initialize":
        info = {"name": "raw", "version": "1"}
        version = request["params"]["protocolVersion"]
        return {
            "result": {
                "protocolVersion": version,
                "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                "serverInfo": info,
            }
        }
    if method == "tools/list":
        return {"result": {"tools": _TOOLS}}
    if method == "tools/call":
        return {"result": {"content": [{"type": "text", "text": request["params"]["name"]}]}}
    if method == "resources/list":
        return {"result": {"resources": [{"uri": "memo://one", "name": "one"}]}}
    if method == "resources/templates/list":
        return {"result": {"resourceTemplates": []}}
    if method == "prompts/list":
        return {"result": {"prompts": [{"name": "greet"}]}}
    return {"error": {"code": -32601, "message": f"no method {method}"}}


def main(broken: str, reply: dict[str, Any]) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue  # a notification, or a reply to a request of ours (none are sent)
        odd = request["method"] == broken and (
            broken != "tools/call" or request["params"]["name"] == "odd"
        )
        body = reply if odd else proper(request)
        print(json.dumps({"jsonrpc": "2.0", "id": request["id"], **body}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
