"""ScriptedModel and FunctionModel: the fake chat models shipped in shelfhand.testing."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from shelfhand.core.errors import ScriptExhaustedError
from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.models import ChatModel, ModelResponse, StreamDone, StreamText
from shelfhand.testing import FunctionModel, ScriptedModel, stream_pieces, text, tool_call

pytestmark = pytest.mark.anyio

RETRIEVE = {"type": "function", "function": {"name": "retrieve", "parameters": {}}}


async def test_a_scripted_model_plays_its_turns_in_order() -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "退货政策"}), text("拆封后 7 天内可退 [1]。")]
    )
    question = [Message.user("拆封后还能退吗？")]

    first = await model.request(question, tools=[RETRIEVE])
    second = await model.request(question)

    assert isinstance(model, ChatModel)
    assert first.message.role == "assistant"
    assert first.message.tool_calls == (
        ToolCallBlock(id="call_1", name="retrieve", arguments='{"query": "退货政策"}'),
    )
    assert first.finish_reason == "tool_calls"
    assert second.message.text == "拆封后 7 天内可退 [1]。"
    assert second.message.tool_calls == ()
    assert second.finish_reason == "stop"
    assert model.remaining == 0


async def test_a_list_turn_is_one_reply_with_text_and_several_tool_calls() -> None:
    model = ScriptedModel(
        [
            [
                text("I'll check stock and price."),
                tool_call("query_stock", {"sku": "SKU2024-011"}),
                tool_call("quote_price", {"sku": "SKU2024-011", "quantity": 2}),
            ],
            [tool_call("query_order", {"order_id": "A-1"}, id="fixed")],
        ]
    )

    first = await model.request([Message.user("有货吗？报个价")])
    second = await model.request([Message.user("订单呢")])

    assert first.message.text == "I'll check stock and price."
    assert [(c.id, c.name) for c in first.message.tool_calls] == [
        ("call_1", "query_stock"),
        ("call_2", "quote_price"),
    ]
    assert first.message.tool_calls[1].parsed_arguments() == {"sku": "SKU2024-011", "quantity": 2}
    assert [c.id for c in second.message.tool_calls] == ["fixed"]


async def test_call_ids_are_unique_and_the_same_on_every_run() -> None:
    def script() -> list[Any]:
        return [tool_call("a"), [tool_call("b"), tool_call("c")], tool_call("d")]

    runs = []
    for _ in range(2):
        model = ScriptedModel(script())
        ids = []
        for _ in range(3):
            ids += [c.id for c in (await model.request([])).message.tool_calls]
        runs.append(ids)

    assert runs[0] == runs[1] == ["call_1", "call_2", "call_3", "call_4"]


async def test_tool_call_arguments_may_be_raw_json_text_even_malformed() -> None:
    model = ScriptedModel([tool_call("retrieve", '{"query": '), tool_call("retrieve")])

    broken = await model.request([])
    empty = await model.request([])

    assert broken.message.tool_calls[0].arguments == '{"query": '
    assert empty.message.tool_calls[0].arguments == "{}"


async def test_an_exhausted_script_says_how_many_turns_and_what_it_last_received() -> None:
    model = ScriptedModel([text("only answer")])
    await model.request([Message.user("first")])
    conversation = [
        Message.user("first"),
        Message.tool(
            [ToolResultBlock(call_id="call_1", name="retrieve", content="E-203: 灯泡过热")]
        ),
    ]

    with pytest.raises(ScriptExhaustedError) as caught:
        await model.request(conversation)

    message = str(caught.value)
    assert "holds 1 turn" in message
    assert "E-203: 灯泡过热" in message
    assert "retrieve" in message


async def test_an_exhausted_script_also_fails_a_stream() -> None:
    model = ScriptedModel([])

    with pytest.raises(ScriptExhaustedError, match="holds 0 turns"):
        async for _ in model.stream([Message.user("hello")]):
            pass


async def test_every_request_and_its_tool_schemas_are_recorded() -> None:
    model = ScriptedModel([tool_call("retrieve"), text("done")])
    first = [Message.user("q")]
    second = [*first, Message.assistant("thinking")]

    await model.request(first, tools=[RETRIEVE])
    await model.request(second)

    assert model.requests == [first, second]
    assert model.tool_schemas == [[RETRIEVE], []]


async def test_streaming_yields_the_text_in_several_pieces_then_one_done() -> None:
    answer = "The warranty is two years, 保修期为两年，拆封后七天内可以无理由退货 [1]."
    model = ScriptedModel([text(answer)])

    items = [item async for item in model.stream([Message.user("warranty?")])]

    pieces = [i.text for i in items if isinstance(i, StreamText)]
    assert len(pieces) > 3
    assert "".join(pieces) == answer
    assert pieces == stream_pieces(answer)
    assert isinstance(items[-1], StreamDone)
    assert sum(isinstance(i, StreamDone) for i in items) == 1
    assert items[-1].response.message.text == answer


async def test_streaming_a_tool_call_turn_yields_only_the_done_chunk() -> None:
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203"})])

    items = [item async for item in model.stream([Message.user("E-203?")])]

    assert [type(i) for i in items] == [StreamDone]
    assert items[0].response.message.tool_calls[0].name == "retrieve"


def test_stream_pieces_always_join_back_to_the_text() -> None:
    for sample in [
        "",
        "  leading",
        "trailing  ",
        "a\n\nb",
        "超长的中文句子没有任何空格也要被切开",
        "x" * 40,
    ]:
        assert "".join(stream_pieces(sample)) == sample


async def test_a_function_model_computes_each_turn_from_the_conversation() -> None:
    seen: list[tuple[int, int]] = []

    def answer(messages: list[Message], tools: list[Any]) -> Any:
        seen.append((len(messages), len(tools)))
        if not any(m.role == "tool" for m in messages):
            return tool_call("retrieve", {"query": messages[-1].text})
        return f"found: {messages[-1].tool_results[0].content}"

    model = FunctionModel(answer)
    question = Message.user("E-203 是什么故障？")

    first = await model.request([question], tools=[RETRIEVE])
    call = first.message.tool_calls[0]
    result = Message.tool([ToolResultBlock(call_id=call.id, name=call.name, content="灯泡过热")])
    second = await model.request([question, first.message, result], tools=[RETRIEVE])

    assert call.parsed_arguments() == {"query": "E-203 是什么故障？"}
    assert call.id == "call_1"
    assert second.message.text == "found: 灯泡过热"
    assert seen == [(1, 1), (3, 1)]
    assert model.name == "function:answer"


@pytest.mark.parametrize(
    "returned",
    [
        ToolCallBlock(id="x1", name="retrieve", arguments="{}"),
        [ToolCallBlock(id="x1", name="retrieve", arguments="{}")],
        Message.assistant(tool_calls=[ToolCallBlock(id="x1", name="retrieve", arguments="{}")]),
    ],
)
async def test_a_function_model_accepts_blocks_lists_and_messages(returned: Any) -> None:
    model = FunctionModel(lambda messages, tools: returned)

    response = await model.request([Message.user("q")])

    assert response.message.tool_calls == (ToolCallBlock(id="x1", name="retrieve", arguments="{}"),)


async def test_a_function_model_may_be_async_and_return_a_model_response() -> None:
    async def answer(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        return ModelResponse(message=Message.assistant("async hello"), model_name="custom")

    model = FunctionModel(answer)

    items = [item async for item in model.stream([Message.user("hi")])]

    assert "".join(i.text for i in items if isinstance(i, StreamText)) == "async hello"
    assert isinstance(items[-1], StreamDone)
    assert items[-1].response.model_name == "custom"


async def test_a_bad_turn_type_is_a_clear_type_error() -> None:
    model = ScriptedModel([42])  # type: ignore[list-item]

    with pytest.raises(TypeError, match=re.escape("text(...), tool_call(...)")):
        await model.request([])
