"""Deployer-supplied tool examples on the wire, per tool mode, against a real HTTP server on
127.0.0.1 (the official openai SDK on the client side)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.evals.tool_eval import load_tool_cases, sample_tool_cases
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.providers.tool_modes import examples_block
from shelfhand.tools import tool
from shelfhand.tools.demo import RETRIEVE_EXAMPLES, TOOL_EXAMPLES, demo_database, make_tools
from support.chat_server import ChatServer, Reply, completion

pytestmark = pytest.mark.anyio


@tool(
    read_only=True,
    examples=[
        {"request": "SKU2023-105 缺货了吗？", "arguments": {"sku": "SKU2023-105"}},
        "Is the blue model available?",
    ],
)
def query_stock(sku: str) -> int:
    """How many units of a product are in stock.

    Args:
        sku: The product SKU.
    """
    return 0


@tool(
    examples=[
        {
            "request": "What do 5 of SKU2023-105 cost?",
            "arguments": {"sku": "SKU2023-105", "quantity": 5},
        }
    ]
)
def quote_price(sku: str, quantity: int = 1) -> float:
    """Quote a price.

    Args:
        sku: The product SKU.
        quantity: How many units.
    """
    return 0.0


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


TOOLS = [t.schema() for t in (query_stock, quote_price, ping)]


async def send(server: ChatServer, mode: str, reply: str) -> dict[str, Any]:
    server.add(Reply(body=completion(reply)))
    model = OpenAIChatModel("m", base_url=server.url, tool_mode=mode)
    try:
        with anyio.fail_after(10):
            await model.request([Message.user("Hi")], tools=TOOLS)
    finally:
        await model.aclose()
    return server.requests[-1].body


async def test_constrained_prompt_shows_examples_as_replies_taking_tools_in_turn(
    chat_server: ChatServer,
) -> None:
    body = await send(chat_server, "constrained", json.dumps({"tool": "none", "answer": "Hi"}))

    system = body["messages"][0]["content"]
    block = system[system.index("Examples of requests and the right reply:") :].splitlines()
    assert block[1:] == [
        'User: "SKU2023-105 缺货了吗？" -> {"tool": "query_stock", "arguments": {"sku": "SKU2023-105"}}',
        'User: "What do 5 of SKU2023-105 cost?" -> {"tool": "quote_price", "arguments": '
        '{"sku": "SKU2023-105", "quantity": 5}}',
        'User: "Is the blue model available?" -> {"tool": "query_stock", "arguments": {}}',
    ]
    assert system.index("How to choose:") < system.index("Examples of requests")
    # examples are prompt text only: the schema the server enforces is unchanged
    choices = body["response_format"]["json_schema"]["schema"]["anyOf"]
    assert all("examples" not in json.dumps(c) for c in choices)


async def test_plain_prompt_shows_examples_in_its_own_call_format(chat_server: ChatServer) -> None:
    body = await send(chat_server, "plain", "Hello!")

    system = body["messages"][0]["content"]
    assert (
        'User: "SKU2023-105 缺货了吗？" -> <tool_call>{"name": "query_stock", "arguments": '
        '{"sku": "SKU2023-105"}}</tool_call>'
    ) in system


async def test_native_tools_carry_no_examples(chat_server: ChatServer) -> None:
    body = await send(chat_server, "native", "Hello!")

    stock, price, plain = (t["function"] for t in body["tools"])
    assert all("examples" not in f for f in (stock, price, plain))
    assert stock["description"] == "How many units of a product are in stock."
    assert plain["description"] == "Answer pong."
    assert "SKU2023-105" not in json.dumps(body, ensure_ascii=False)
    assert query_stock.schema()["function"]["examples"]  # the cached schema is not changed


async def test_tools_without_examples_get_the_prompt_they_had(chat_server: ChatServer) -> None:
    server_tools = [ping.schema()]
    chat_server.add(Reply(body=completion(json.dumps({"tool": "none", "answer": "Hi"}))))
    model = OpenAIChatModel("m", base_url=chat_server.url, tool_mode="constrained")
    try:
        with anyio.fail_after(10):
            await model.request([Message.user("Hi")], tools=server_tools)
    finally:
        await model.aclose()

    assert "Examples" not in chat_server.requests[0].body["messages"][0]["content"]
    assert examples_block(server_tools, "constrained") == ""


def test_the_demo_examples_are_not_the_eval_cases() -> None:
    """The reference scenario's examples are written from each tool's purpose: none repeats an
    eval request, and they name no SKU or order of the demo data (a model that copied an
    example's arguments would be judged wrong, not right)."""
    db = demo_database(":memory:")
    assert {t.name for t in make_tools(db) if t.examples} == set(TOOL_EXAMPLES)
    assert all(t.examples == () for t in make_tools(db, examples=False))
    ids = {r[0] for r in db.execute("SELECT sku FROM products UNION SELECT id FROM orders")}
    db.close()
    examples = [e for group in TOOL_EXAMPLES.values() for e in group] + RETRIEVE_EXAMPLES
    shown = json.dumps(examples, ensure_ascii=False)
    assert not any(i in shown for i in ids)
    requests = {e["request"] for e in examples}
    assert not requests & {c.request for c in load_tool_cases(sample_tool_cases())}
    langs = {"zh" if any("\u4e00" <= ch <= "\u9fff" for ch in r) else "en" for r in requests}
    assert langs == {"en", "zh"}


async def test_examples_are_shown_to_route_a_request_not_after_tool_results(
    chat_server: ChatServer,
) -> None:
    call = ToolCallBlock(id="c1", name="query_stock", arguments='{"sku": "SKU2024-011"}')
    result = Message.tool([ToolResultBlock(call_id="c1", name="query_stock", content="12")])
    asked = Message.user("SKU2024-011 有货吗？")
    after_results = [asked, Message.assistant("", tool_calls=[call]), result]
    nudged = [*after_results, Message.user("Answer in plain words.")]
    next_turn = [*after_results, Message.assistant("有 12 台。"), Message.user("And the X2?")]
    for messages in ([asked], after_results, nudged, next_turn):
        chat_server.add(Reply(body=completion(json.dumps({"tool": "none", "answer": "ok"}))))
        model = OpenAIChatModel("m", base_url=chat_server.url, tool_mode="constrained")
        try:
            with anyio.fail_after(10):
                await model.request(messages, tools=TOOLS)
        finally:
            await model.aclose()

    systems = [r.body["messages"][0]["content"] for r in chat_server.requests]
    shown = ["Examples of requests and the right reply:" in s for s in systems]
    assert shown == [True, False, False, True]
    # the prompt without examples is the start of the prompt with them (a prompt cache holds)
    assert systems[0].startswith(systems[1])
