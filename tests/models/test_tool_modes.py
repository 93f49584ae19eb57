"""Tool modes (native, plain, constrained) against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.models import StreamDone, StreamText
from shelfhand.providers.openai_chat import OpenAIChatModel
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
QUOTE_PRICE = {
    "type": "function",
    "function": {
        "name": "quote_price",
        "description": "Quote a price.",
        "parameters": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["sku"],
        },
    },
}
TOOLS = [QUERY_STOCK, QUOTE_PRICE]


async def ask(
    server: ChatServer, mode: str, reply: Reply, messages: list[Message] | None = None, **kw: Any
) -> Any:
    server.add(reply)
    model = OpenAIChatModel("m", base_url=server.url, tool_mode=mode, **kw)
    try:
        with anyio.fail_after(10):
            return await model.request(
                messages or [Message.user("SKU2024-011 有货吗？")], tools=TOOLS
            )
    finally:
        await model.aclose()


def schema_choices(body: dict[str, Any]) -> list[dict[str, Any]]:
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    choices: list[dict[str, Any]] = fmt["json_schema"]["schema"]["anyOf"]
    return choices


# --- constrained ---------------------------------------------------------------------------------


async def test_constrained_mode_sends_a_schema_of_every_tool_and_the_answer(
    chat_server: ChatServer,
) -> None:
    reply = completion(json.dumps({"tool": "query_stock", "arguments": {"sku": "SKU2024-011"}}))
    response = await ask(chat_server, "constrained", Reply(body=reply))

    body = chat_server.requests[0].body
    assert "tools" not in body  # described in the prompt, enforced by the schema
    choices = schema_choices(body)
    assert [c["properties"]["tool"]["const"] for c in choices] == [
        "query_stock",
        "quote_price",
        "none",
    ]
    assert choices[0]["properties"]["arguments"]["required"] == ["sku"]
    assert choices[2]["required"] == ["tool", "answer"]
    system = body["messages"][0]
    assert system["role"] == "system" and "- query_stock: How many units" in system["content"]
    assert "    sku: string" in system["content"]
    [call] = response.message.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("query_stock", {"sku": "SKU2024-011"})
    assert response.message.text == ""
    assert response.finish_reason == "tool_calls"


async def test_a_constrained_answer_becomes_plain_text(chat_server: ChatServer) -> None:
    reply = completion(json.dumps({"tool": "none", "answer": "有 12 台现货。"}, ensure_ascii=False))
    response = await ask(chat_server, "constrained", Reply(body=reply))

    assert response.message.text == "有 12 台现货。"
    assert response.message.tool_calls == ()


async def test_the_constrained_prompt_says_how_to_choose_and_plain_does_not(
    chat_server: ChatServer,
) -> None:
    reply = completion(json.dumps({"tool": "none", "answer": "Hi!"}))
    await ask(chat_server, "constrained", Reply(body=reply))
    await ask(chat_server, "plain", Reply(body=completion("Hi!")))

    constrained, plain = (r.body["messages"][0]["content"] for r in chat_server.requests)
    for rule in (
        "If one tool is made for exactly what the user asks, call that tool",
        "go to the search tool; never answer those from memory",
        "small talk: answer directly, no tool",
        "exactly as the user wrote them, whole",
    ):
        assert rule in constrained and rule not in plain
    # the rules follow the tool list, which names the tools; the rules name none of them
    rules = constrained[constrained.index("How to choose:") :]
    assert "query_stock" not in rules and "quote_price" not in rules


@pytest.mark.parametrize(
    ("cut", "answer"),
    [
        (
            '{"tool": "none", "answer": "To clean the lens:\\n1. Use a soft',
            "To clean the lens:\n1. Use a soft…",
        ),
        ('{"tool": "none", "answer": "拆封后七天内\\u53', "拆封后七天内…"),
        ('{"tool": "none", "answer": "有 12 台现货。"', "有 12 台现货。"),
    ],
)
async def test_a_constrained_answer_cut_off_by_max_tokens_is_text_not_json(
    chat_server: ChatServer, cut: str, answer: str
) -> None:
    body = completion(cut)
    body["choices"][0]["finish_reason"] = "length"
    response = await ask(chat_server, "constrained", Reply(body=body), max_tokens=16)

    assert response.message.text == answer
    assert response.message.tool_calls == ()


async def test_broken_constrained_json_that_is_not_a_cut_answer_is_not_guessed(
    chat_server: ChatServer,
) -> None:
    broken = '{"tool": "none", "answer": "ok", "extra": '
    response = await ask(chat_server, "constrained", Reply(body=completion(broken)))

    assert response.message.text == broken  # left to the agent's raw-JSON handling
    assert response.message.tool_calls == ()


async def test_tool_choice_required_leaves_no_answer_in_the_schema(
    chat_server: ChatServer,
) -> None:
    reply = completion(
        json.dumps({"tool": "quote_price", "arguments": {"sku": "X", "quantity": 3}})
    )
    response = await ask(chat_server, "constrained", Reply(body=reply), tool_choice="required")

    consts = [
        c["properties"]["tool"]["const"] for c in schema_choices(chat_server.requests[0].body)
    ]
    assert consts == ["query_stock", "quote_price"]
    assert json.loads(response.message.tool_calls[0].arguments) == {"sku": "X", "quantity": 3}


async def test_a_server_that_ignores_the_schema_still_gives_text_or_recovered_calls(
    chat_server: ChatServer,
) -> None:
    prose = await ask(chat_server, "constrained", Reply(body=completion("Yes, 12 in stock.")))
    assert prose.message.text == "Yes, 12 in stock."

    fenced = '```json\n{"name": "query_stock", "arguments": {"sku": "SKU2024-011"}}\n```'
    recovered = await ask(chat_server, "constrained", Reply(body=completion(fenced)))
    assert [c.name for c in recovered.message.tool_calls] == ["query_stock"]


async def test_constrained_history_sends_calls_and_results_as_text(
    chat_server: ChatServer,
) -> None:
    history = [
        Message.system("You are an after-sales assistant."),
        Message.user("SKU2024-011 有货吗？"),
        Message.assistant(
            "", tool_calls=[ToolCallBlock(id="c1", name="query_stock", arguments='{"sku": "S"}')]
        ),
        Message.tool([ToolResultBlock(call_id="c1", name="query_stock", content='{"stock": 12}')]),
    ]
    reply = completion(json.dumps({"tool": "none", "answer": "有货"}, ensure_ascii=False))
    await ask(chat_server, "constrained", Reply(body=reply), messages=history)

    messages = chat_server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].startswith("You are an after-sales assistant.")
    assert "You can call these tools" in messages[0]["content"]
    assert json.loads(messages[2]["content"]) == {"tool": "query_stock", "arguments": {"sku": "S"}}
    assert (
        "Result of query_stock" in messages[3]["content"]
        and '{"stock": 12}' in messages[3]["content"]
    )


async def test_a_constrained_stream_never_shows_the_json(chat_server: ChatServer) -> None:
    raw = json.dumps({"tool": "none", "answer": "保修两年。"}, ensure_ascii=False)
    pieces = [chunk({"content": raw[i : i + 5]}) for i in range(0, len(raw), 5)]
    chat_server.add(Reply(sse=[*pieces, chunk({}, finish="stop")]))
    model = OpenAIChatModel("m", base_url=chat_server.url, tool_mode="constrained")
    try:
        with anyio.fail_after(10):
            items = [i async for i in model.stream([Message.user("保修多久？")], tools=TOOLS)]
    finally:
        await model.aclose()

    assert [i.text for i in items if isinstance(i, StreamText)] == ["保修两年。"]
    assert isinstance(items[-1], StreamDone)
    assert items[-1].response.message.text == "保修两年。"


# --- plain ---------------------------------------------------------------------------------------


async def test_plain_mode_describes_tools_in_the_prompt_and_recovers_the_call(
    chat_server: ChatServer,
) -> None:
    text = '<tool_call>{"name": "quote_price", "arguments": {"sku": "SKU2024-011", "quantity": 3}}'
    response = await ask(chat_server, "plain", Reply(body=completion(text + "</tool_call>")))

    body = chat_server.requests[0].body
    assert "tools" not in body and "response_format" not in body
    assert "<tool_call>" in body["messages"][0]["content"]
    [call] = response.message.tool_calls
    assert json.loads(call.arguments) == {"sku": "SKU2024-011", "quantity": 3}


# --- native --------------------------------------------------------------------------------------


async def test_native_tool_calls_streamed_the_way_llama_cpp_sends_them(
    chat_server: ChatServer,
) -> None:
    # llama.cpp --jinja: the first delta names the call, the arguments follow in pieces
    first = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "3zLWiKnE",
                "type": "function",
                "function": {"name": "query_stock", "arguments": ""},
            }
        ],
    }
    pieces = ['{"sku":', ' "SKU20', '24-011"}']
    more = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces]
    chat_server.add(Reply(sse=[chunk(first), *more, chunk({}, finish="tool_calls")]))
    model = OpenAIChatModel("m", base_url=chat_server.url)
    try:
        with anyio.fail_after(10):
            items = [i async for i in model.stream([Message.user("有货吗")], tools=TOOLS)]
    finally:
        await model.aclose()

    assert not any(isinstance(i, StreamText) for i in items)
    [call] = items[-1].response.message.tool_calls
    assert (call.id, call.name) == ("3zLWiKnE", "query_stock")
    assert json.loads(call.arguments) == {"sku": "SKU2024-011"}
    assert "tools" in chat_server.requests[0].body


# --- constrained: a repeated call after its result -----------------------------------------------


def answered_history(*, error: bool = False) -> list[Message]:
    call = ToolCallBlock(id="c1", name="query_stock", arguments='{"sku": "SKU2024-011"}')
    result = ToolResultBlock(
        call_id="c1", name="query_stock", content='{"stock": 12}', is_error=error
    )
    return [
        Message.user("SKU2024-011 有货吗？"),
        Message.assistant("", tool_calls=[call]),
        Message.tool([result]),
    ]


def constrained_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return completion(json.dumps({"tool": name, "arguments": arguments}))


async def test_repeating_an_answered_call_gets_an_answer_only_schema(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(body=constrained_call("query_stock", {"sku": "SKU2024-011"})))
    answer = json.dumps({"tool": "none", "answer": "有 12 台现货。"}, ensure_ascii=False)
    response = await ask(
        chat_server, "constrained", Reply(body=completion(answer)), messages=answered_history()
    )

    assert response.message.text == "有 12 台现货。"
    assert response.message.tool_calls == ()
    first, second = (r.body for r in chat_server.requests)
    assert len(schema_choices(first)) == 3  # both tools and the answer
    [only] = schema_choices(second)
    assert only["properties"]["tool"]["const"] == "none"
    assert second["messages"] == first["messages"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ({"sku": "SKU2024-012"}, False),  # other arguments: a new call
        ({"sku": "SKU2024-011"}, True),  # the first one failed: the loop guard's business
    ],
)
async def test_a_new_call_or_a_retry_of_a_failed_one_is_passed_on(
    chat_server: ChatServer, call: dict[str, Any], error: bool
) -> None:
    response = await ask(
        chat_server,
        "constrained",
        Reply(body=constrained_call("query_stock", call)),
        messages=answered_history(error=error),
    )

    [block] = response.message.tool_calls
    assert json.loads(block.arguments) == call
    assert len(chat_server.requests) == 1


async def test_the_same_call_in_a_new_user_turn_is_passed_on(chat_server: ChatServer) -> None:
    history = [*answered_history(), Message.assistant("有货。"), Message.user("再查一次？")]
    response = await ask(
        chat_server,
        "constrained",
        Reply(body=constrained_call("query_stock", {"sku": "SKU2024-011"})),
        messages=history,
    )

    assert [c.name for c in response.message.tool_calls] == ["query_stock"]
    assert len(chat_server.requests) == 1
