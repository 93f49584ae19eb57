"""A model server that sends half of a surrogate pair alone (a JSON ``\\ud800`` escape: valid
JSON, but no text). The reply reached the session store and the stream's encoder as it came
and failed there ("surrogates not allowed"): the turn failed and the stream was cut short.
The adapter now hands on text that UTF-8 can carry, U+FFFD in the half's place; a whole pair
sent as two escapes stays its character. A real server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from shelfhand.core.messages import Message
from shelfhand.core.names import is_text
from shelfhand.models import StreamDone, StreamText
from shelfhand.models.base import ToolSchema
from shelfhand.providers.openai_chat import OpenAIChatModel
from support.chat_server import ChatServer, Reply, chunk, completion

pytestmark = pytest.mark.anyio

LOOKUP: ToolSchema = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


@pytest.fixture
async def model(chat_server: ChatServer) -> AsyncIterator[OpenAIChatModel]:
    chat_model = OpenAIChatModel("m", base_url=chat_server.url, api_key="k", max_retries=0)
    yield chat_model
    await chat_model.aclose()


async def test_a_reply_with_a_lone_half_comes_as_text_with_the_replacement_character(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(Reply(body=completion("保修 \ud800 两年，😀。"), ascii=True))

    response = await model.request([Message.user("保修多久？")])

    # (compared as ascii(): a failure's report holding the half could not be sent between
    # the test processes)
    assert ascii(response.message.text) == ascii("保修 \ufffd 两年，😀。")


async def test_streamed_text_and_a_tool_calls_arguments_are_text(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    call: dict[str, Any] = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": "x\udc80"}'},
    }
    chat_server.add(
        Reply(
            sse=[chunk({"content": "a\udbff"}), chunk({"content": "b"}), chunk({}, "stop")],
            ascii=True,
        ),
        Reply(sse=[chunk({"tool_calls": [call]}), chunk({}, "tool_calls")], ascii=True),
    )

    items = [item async for item in model.stream([Message.user("hi")])]
    pieces = [i.text for i in items if isinstance(i, StreamText)]
    done = items[-1]
    assert isinstance(done, StreamDone)
    assert ascii(pieces) == ascii(["a\ufffd", "b"])
    assert ascii(done.response.message.text) == ascii("a\ufffdb")

    items = [item async for item in model.stream([Message.user("hi")], tools=[LOOKUP])]
    done = items[-1]
    assert isinstance(done, StreamDone)
    (called,) = done.response.message.tool_calls
    assert ascii((called.name, called.arguments)) == ascii(("lookup", '{"q": "x\ufffd"}'))
    assert all(is_text(t) for t in (called.id, called.name, called.arguments))
