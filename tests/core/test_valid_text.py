"""Text from outside the caller's control made storable: a model's reply or a tool's result
holding half of a surrogate pair alone (:func:`shelfhand.core.names.valid_text`), and a
prompt holding one refused with the reason."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shelfhand import Agent, Toolkit, tool
from shelfhand.agent.replies import cleaned, storable
from shelfhand.api.deps import sse_event
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.messages import Message, ToolCallBlock, tool_result
from shelfhand.core.names import valid_text
from shelfhand.testing import ScriptedModel, text, tool_call

HALVES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@given(st.lists(st.one_of(st.characters(), HALVES)).map("".join))
def test_valid_text_is_always_utf8_and_keeps_valid_text_as_it_is(value: str) -> None:
    out = valid_text(value)
    out.encode("utf-8")  # never raises
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a half alone became U+FFFD, a pair its character
        assert out != value and len(out) <= len(value)
    else:
        assert out is value


def test_a_pair_kept_in_two_code_points_is_joined_and_a_lone_half_replaced() -> None:
    assert valid_text("\ud83d\ude00 好") == "😀 好"
    assert ascii(valid_text("a\ud800b\udcb1")) == ascii("a\ufffdb\ufffd")


def test_a_tools_result_holding_a_name_read_with_surrogateescape_is_storable() -> None:
    name = b"\xb1\xa3\xd0\xde.md".decode("utf-8", "surrogateescape")  # a GBK file name
    block = tool_result(call_id="c1", name="list_files", content=f"found {name}")
    assert ascii(block.content) == ascii("found \ufffd\ufffd\ufffd\ufffd.md")


@tool(read_only=True)
def list_files() -> str:
    """The files of the share."""
    return "保修.md " + b"\xb1\xa3.md".decode("utf-8", "surrogateescape")


@pytest.mark.anyio
async def test_a_run_hands_on_a_tools_result_as_text() -> None:
    model = ScriptedModel([tool_call("list_files", {}), text("done")])
    result = await Agent(model=model, toolkit=Toolkit([list_files])).run("哪些文件？")
    (block,) = [b for m in result.messages for b in m.tool_results]
    assert ascii(block.content) == ascii("保修.md \ufffd\ufffd.md")


@pytest.mark.anyio
async def test_a_prompt_holding_a_lone_half_is_refused_with_where_it_is() -> None:
    agent = Agent(model=ScriptedModel([text("never")]))
    with pytest.raises(InvalidArgumentError, match="surrogate pair alone at character 3"):
        await agent.run("保修期\ud800？")
    assert (await Agent(model=ScriptedModel([text("两年")])).run("保修期😀？")).output == "两年"


@tool(read_only=True)
def lookup(code: str) -> str:
    """A fault code's meaning."""
    return f"{code}: overheated"


@pytest.mark.anyio
async def test_a_custom_models_reply_and_call_holding_a_lone_half_are_made_storable() -> None:
    """A custom ChatModel (no adapter between it and the run) hands on half a pair in its
    answer and in a call's arguments: the run keeps U+FFFD in their place, so the session
    store, a JSON reply and the trace can hold them (before: the service's turn failed with
    500 and lost the question too)."""
    model = ScriptedModel(
        [tool_call("lookup", '{"code": "E-\udc80"}'), text("E-203 \ud800 过热 [1]。")]
    )
    result = await Agent(model=model, toolkit=Toolkit([lookup])).run("E-203？")
    assert ascii(result.output) == ascii("E-203 \ufffd 过热 [1]。")
    (sent,) = [c for m in result.messages for c in m.tool_calls]
    assert ascii(sent.arguments) == ascii('{"code": "E-\ufffd"}')
    (block,) = [b for m in result.messages for b in m.tool_results]
    assert ascii(block.content) == ascii("E-\ufffd: overheated")
    for m in result.messages:
        json.dumps(m.to_dict(), ensure_ascii=False).encode("utf-8")  # never raises


def test_a_valid_reply_is_handed_on_as_it_is() -> None:
    reply = Message.assistant("保修期两年 😀。")
    assert storable(reply) is reply
    assert cleaned(reply, (), ())[0] is reply
    call = ToolCallBlock(id="c1", name="lookup", arguments='{"code": "故障"}')
    calling = Message(role="assistant", content=(call,))
    assert cleaned(calling, (), ())[0] is calling


def test_an_event_holding_a_lone_half_is_sent_as_a_json_escape() -> None:
    """The stream's last resort (a custom model or tool that hands one on): a JSON escape,
    not an exception that cuts the stream short."""
    sent = sse_event({"type": "text_delta", "text": "a\ud800 好"}, 3)
    data = sent.decode("utf-8").split("data: ", 1)[1]
    assert ascii(json.loads(data)["text"]) == ascii("a\ud800 好")
    assert sse_event({"type": "text_delta", "text": "好"}, 4).endswith('"好"}\n\n'.encode())
