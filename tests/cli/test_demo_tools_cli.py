"""``ask --demo-tools`` and ``chat --demo-tools``: the reference scenario's stock question
answered from the command line, as ``serve --demo-tools`` answers it over HTTP (the real CLI,
the real openai SDK and a chat-completions server on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.chat_server import Reply, chunk, completion  # see conftest.py
from support.cli import run_cli

STOCK = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "query_stock", "arguments": json.dumps({"sku": "SKU2024-011"})},
}


def offered(server: Any) -> list[set[str]]:
    """The tool names of each request the model got."""
    return [{t["function"]["name"] for t in r.body.get("tools", [])} for r in server.requests]


def test_ask_with_demo_tools_answers_the_stock_question(tmp_path: Path, server: Any) -> None:
    server.add(
        Reply(body=completion(tool_calls=[STOCK])),
        Reply(body=completion("SKU2024-011 (Lumen X1) has 12 in stock.")),
    )

    out = run_cli(["ask", "Is SKU2024-011 in stock?", "--demo-tools", "--json"], tmp_path, server)

    assert out.returncode == 0, out.stderr
    assert "query_stock" in offered(server)[0]
    result = json.loads(out.stdout)
    assert "12 in stock" in result["output"]
    assert (tmp_path / "demo-shop.db").is_file()


def test_ask_without_the_flag_offers_no_shop_tool(tmp_path: Path, server: Any) -> None:
    server.add(Reply(body=completion("I cannot check stock.")))

    run_cli(["ask", "Is SKU2024-011 in stock?"], tmp_path, server)

    assert server.requests and "query_stock" not in offered(server)[0]


def test_chat_with_demo_tools_answers_the_stock_question(tmp_path: Path, server: Any) -> None:
    call = {"index": 0, **STOCK}
    server.add(
        Reply(sse=[chunk({"role": "assistant", "tool_calls": [call]}, "tool_calls")]),
        Reply(sse=[chunk({"content": "12 in stock."}), chunk({}, "stop")]),
    )
    out = run_cli(["chat", "--demo-tools"], tmp_path, server, stdin="Is SKU2024-011 in stock?\n\n")

    assert out.returncode == 0, out.stderr
    assert "query_stock" in offered(server)[0]
    assert "12 in stock." in out.stdout
    tool_result = server.requests[1].body["messages"][-1]
    assert tool_result["role"] == "tool" and '"stock":12' in tool_result["content"]
