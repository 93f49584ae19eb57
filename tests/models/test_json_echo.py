"""A small model that answers tool results with bare JSON (issue 9): asked once more for words,
then the JSON rendered as text; real HTTP server on 127.0.0.1, the official openai SDK."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.core.events import Final, TextDelta
from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.models import StreamDone, StreamText
from shelfhand.models.textcalls import json_as_text, json_reply
from shelfhand.providers.openai_chat import PLAIN_WORDS, OpenAIChatModel
from support.chat_server import ChatServer, Reply, chunk, completion

pytestmark = pytest.mark.anyio

QUERY_STOCK = {
    "type": "function",
    "function": {
        "name": "query_stock",
        "description": "How many units of a product are in stock.",
        "parameters": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
        },
    },
}
ECHO = '{"name": "Lumen X1", "stock": 12}\n'


def after_result(question: str = "SKU2024-011 有货吗？") -> list[Message]:
    call = ToolCallBlock(id="c1", name="query_stock", arguments='{"sku": "SKU2024-011"}')
    result = ToolResultBlock(
        call_id="c1", name="query_stock", content='{"name": "Lumen X1", "stock": 12}'
    )
    return [
        Message.user(question),
        Message.assistant("", tool_calls=[call]),
        Message.tool([result]),
    ]


async def request(server: ChatServer, mode: str, messages: list[Message]) -> Any:
    model = OpenAIChatModel("m", base_url=server.url, tool_mode=mode)
    try:
        with anyio.fail_after(10):
            return await model.request(messages, tools=[QUERY_STOCK])
    finally:
        await model.aclose()


def constrained(answer: str) -> dict[str, Any]:
    return completion(json.dumps({"tool": "none", "answer": answer}, ensure_ascii=False))


@pytest.mark.parametrize("mode", ["native", "plain"])
async def test_a_json_echo_of_a_result_gets_one_request_for_words(
    chat_server: ChatServer, mode: str
) -> None:
    chat_server.add(Reply(body=completion(ECHO)))
    chat_server.add(Reply(body=completion("Lumen X1 有 12 台现货。")))
    response = await request(chat_server, mode, after_result())

    assert response.message.text == "Lumen X1 有 12 台现货。"
    assert len(chat_server.requests) == 2
    last = chat_server.requests[1].body["messages"][-1]
    assert last["role"] == "user" and PLAIN_WORDS in last["content"]


@pytest.mark.parametrize(
    ("mode", "second"),
    [
        ("native", completion("```json\n" + ECHO + "```")),
        ("plain", completion(ECHO)),
        ("constrained", constrained(ECHO)),
    ],
)
async def test_json_again_after_the_request_for_words_is_rendered_as_text(
    chat_server: ChatServer, mode: str, second: dict[str, Any]
) -> None:
    first = constrained(ECHO) if mode == "constrained" else completion(ECHO)
    chat_server.add(Reply(body=first))
    chat_server.add(Reply(body=second))
    response = await request(chat_server, mode, after_result())

    assert response.message.text == "name: Lumen X1\nstock: 12"
    assert response.message.tool_calls == ()
    assert len(chat_server.requests) == 2


async def test_a_call_in_reply_to_the_request_for_words_is_kept(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion('{"found": false}')))
    call = {"name": "query_stock", "arguments": {"sku": "SKU2024-012"}}
    chat_server.add(Reply(body=completion(f"<tool_call>{json.dumps(call)}</tool_call>")))
    response = await request(chat_server, "native", after_result())

    [block] = response.message.tool_calls
    assert (block.name, json.loads(block.arguments)) == ("query_stock", {"sku": "SKU2024-012"})


async def test_json_asked_for_in_the_first_reply_is_left_alone(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion('{"thank you": "merci"}')))
    question = [Message.user("Give me a JSON object translating 'thank you' to French.")]
    response = await request(chat_server, "native", question)

    assert response.message.text == '{"thank you": "merci"}'  # no tool result was echoed
    assert len(chat_server.requests) == 1


async def test_a_streamed_json_echo_ends_with_the_words_of_the_second_request(
    chat_server: ChatServer,
) -> None:
    pieces = [chunk({"content": ECHO[i : i + 6]}) for i in range(0, len(ECHO), 6)]
    chat_server.add(Reply(sse=[*pieces, chunk({}, finish="stop")]))
    chat_server.add(Reply(body=completion("有 12 台。")))
    model = OpenAIChatModel("m", base_url=chat_server.url, tool_mode="native")
    try:
        with anyio.fail_after(10):
            chunks = [c async for c in model.stream(after_result(), tools=[QUERY_STOCK])]
    finally:
        await model.aclose()

    done = chunks[-1]
    assert isinstance(done, StreamDone) and done.response.message.text == "有 12 台。"
    assert all(isinstance(c, StreamText) for c in chunks[:-1])


@tool(read_only=True)
def query_stock(sku: str) -> dict[str, Any]:
    """How many units of a product are in stock.

    Args:
        sku: The product SKU, e.g. SKU2024-011.
    """
    return {"name": "Lumen X1", "stock": 12}


async def test_an_agent_run_never_shows_the_echoed_json(chat_server: ChatServer) -> None:
    call = {"name": "query_stock", "arguments": {"sku": "SKU2024-011"}}
    calling = f"<tool_call>{json.dumps(call)}</tool_call>"
    chat_server.add(Reply(sse=[chunk({"content": calling}), chunk({}, finish="stop")]))
    pieces = [chunk({"content": ECHO[i : i + 4]}) for i in range(0, len(ECHO), 4)]
    chat_server.add(Reply(sse=[*pieces, chunk({}, finish="stop")]))
    chat_server.add(Reply(body=completion(ECHO)))  # asked for words (not streamed): JSON again
    model = OpenAIChatModel("m", base_url=chat_server.url, tool_mode="native")
    agent = Agent(model=model, toolkit=Toolkit([query_stock]), max_iters=3)
    user = UserContext(tenant_id="t1", user_id="alice")
    try:
        with anyio.fail_after(20):
            events = [e async for e in agent.stream("SKU2024-011 有货吗？", context=user)]
    finally:
        await model.aclose()

    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    final = next(e for e in events if isinstance(e, Final)).result
    assert "{" not in shown and "{" not in final.output
    assert final.output == "name: Lumen X1\nstock: 12"
    assert shown.strip() == final.output
    assert len(chat_server.requests) == 3


def test_json_reply_reads_only_whole_json_replies() -> None:
    assert json_reply(ECHO) == {"name": "Lumen X1", "stock": 12}
    assert json_reply('```json\n[{"a": 1}]\n```') == [{"a": 1}]
    assert json_reply("库存 {12} 台") is None
    assert json_reply('"just a string"') is None
    assert json_reply('{"a": 1} and more') is None


def test_json_as_text_renders_nesting_and_scalars() -> None:
    value = {"order": "SO-1001", "items": [{"sku": "SKU2024-011", "qty": 2}], "paid": True}
    assert json_as_text(value) == (
        "order: SO-1001\nitems:\n  - sku: SKU2024-011\n    qty: 2\npaid: yes"
    )
    assert json_as_text({"note": None, "tags": []}) == "note: none\ntags: (nothing)"
