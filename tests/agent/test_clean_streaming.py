"""Streaming never shows a tool call as text, and successive steps are kept apart (issue 9.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent import streaming
from shelfhand.agent.streaming import STEP_SEPARATOR, CallTextGate
from shelfhand.core.events import Event, Final, TextDelta, ToolFinished, ToolStarted
from shelfhand.core.messages import Message
from shelfhand.models.textcalls import recover_tool_calls
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from support.chat_server import ChatServer, Reply, chunk

ALICE = UserContext(tenant_id="t1", user_id="alice")
CALL_JSON = '{"name": "lookup_order", "arguments": {"order_id": "SO-1001"}}'
CALL_FORMS = {
    "fenced": f"```json\n{CALL_JSON}\n```",
    "bare": CALL_JSON,
    "tag": f"<tool_call>\n{CALL_JSON}\n</tool_call>",
    "prose-then-fence": f"我来查一下订单。\n```json\n{CALL_JSON}\n```",
    "mistral": f"[TOOL_CALLS] [{CALL_JSON}]",
    "list": f"[{CALL_JSON}]",
}
PLAIN_WITH_BRACES = [
    "{x for x in items} builds a set; [1] is a citation.",
    "保修两年 [1]，见 {保修政策}。",
    "Use ```python\nprint({'a': 1})\n``` to print a dict.",
    "A list: [1, 2] and a tag-like <tool> word.",
    'Run:\n```python\nrun({"name": "lookup_order", "arguments": {"order_id": "A-1"}})\n```\nDone.',
    "```bash\nshelfhand ask '{q}'\n```\n```python\nx = {1: [2]}\n```",
]
LEAKS = ('"arguments"', '"name"', "```json", "<tool_call", "[TOOL_CALLS]")


@tool(read_only=True)
def lookup_order(ctx: UserContext, order_id: str) -> str:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
    """
    return f"{order_id} of {ctx.user_id}: shipped"


def splits(content: str) -> Iterator[list[str]]:
    """Every cut of ``content`` into two chunks, and one chunk per character."""
    for i in range(1, len(content)):
        yield [content[:i], content[i:]]
    yield list(content)


def gate_output(pieces: list[str], names: set[str]) -> str:
    gate = CallTextGate(active=True)
    shown = "".join(gate.feed(p) for p in pieces)
    visible, _ = recover_tool_calls("".join(pieces), names)
    return shown + gate.finish(visible)


@pytest.mark.parametrize("form", sorted(CALL_FORMS))
def test_the_gate_never_releases_a_text_call_wherever_the_chunks_are_cut(form: str) -> None:
    content = CALL_FORMS[form]
    for pieces in splits(content):
        shown = gate_output(pieces, {"lookup_order"})
        assert not any(leak in shown for leak in LEAKS), (pieces, shown)
        assert "{" not in shown, (pieces, shown)
    expected = "我来查一下订单。" if form == "prose-then-fence" else ""
    assert gate_output([content], {"lookup_order"}) == expected


@pytest.mark.parametrize("content", PLAIN_WITH_BRACES)
def test_plain_text_with_braces_is_released_intact_wherever_the_chunks_are_cut(
    content: str,
) -> None:
    for pieces in splits(content):
        assert gate_output(pieces, {"lookup_order"}) == content, pieces


def test_text_before_a_possible_call_is_streamed_at_once() -> None:
    gate = CallTextGate(active=True)
    assert gate.feed("订单 SO-1001 ") == "订单 SO-1001"  # trailing space waits for what follows
    assert gate.feed("已发货。`") == " 已发货。"  # a lone backtick may open a fence: held
    assert gate.feed("``json\n{") == ""
    assert gate.feed('"name": "x"') == ""


def test_a_code_fence_of_another_language_streams_before_the_reply_ends() -> None:
    gate = CallTextGate(active=True)
    assert gate.feed("示例：\n```pyt") == "示例："
    assert gate.feed("hon\nx = {'a': 1}\n") == "\n```python\nx = {'a': 1}\n"
    assert gate.feed("``") == ""  # may be the closing fence
    assert gate.feed("`\nThen ") == "```\nThen"
    assert gate.feed('{"name": "lookup_order"') == ""  # after the fence: held again
    assert gate.finish("示例：\n```python\nx = {'a': 1}\n```\nThen") == ""


def test_a_fence_opened_one_character_at_a_time_still_streams() -> None:
    # held from its first backtick, decided only once its language line is whole
    reply = "示例：\n  ```python\nx = {'a': 1}\n```\nThen"
    gate = CallTextGate(active=True)
    shown = "".join(gate.feed(c) for c in reply)
    assert shown == reply  # (the code streamed before the reply's end)


def test_a_held_reply_is_shown_whole_at_its_end() -> None:
    # held at its brace (maybe a call): not read again as it grows, decided at the end
    reply = '配置如下：{"a": 1}\n' + "Some prose that goes on. " * 2000
    gate = CallTextGate(active=True)
    shown = "".join(gate.feed(reply[i : i + 4]) for i in range(0, len(reply), 4))
    assert shown == "配置如下："
    assert shown + gate.finish(reply) == reply


def partial_marker_by_definition(text: str) -> int:
    """The longest suffix of ``text`` (up to the longest marker) that a marker starts with."""
    for size in range(min(len(text), max(map(len, streaming._MARKERS))), 0, -1):
        tail = text[-size:]
        if any(m.startswith(tail) for m in streaming._MARKERS) or (
            tail.startswith("[") and not tail[1:].strip()
        ):
            return size
    return 0


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet="ab `<[{ \n|TOOL_CALS]>pythn_g", max_size=40),
    st.sampled_from(streaming._MARKERS),
    st.integers(0, 60),
)
def test_what_may_start_a_marker_is_found_as_by_its_definition(
    text: str, marker: str, cut: int
) -> None:
    for candidate in (text, text + marker[:cut], marker[:cut]):
        assert streaming._partial_marker(candidate) == partial_marker_by_definition(candidate)


def test_a_json_fence_is_held_even_with_its_language_line_complete() -> None:
    gate = CallTextGate(active=True)
    assert gate.feed("```json\n") == ""
    assert gate.feed('{"name": "lookup_order", "arguments": {}}\n```') == ""


def events_of(agent: Agent, prompt: str) -> list[Event]:
    async def collect() -> list[Event]:
        return [e async for e in agent.stream(prompt, context=ALICE)]

    import asyncio

    return asyncio.run(collect())


def streamed_text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def final_of(events: list[Event]) -> Any:
    last = events[-1]
    assert isinstance(last, Final)
    return last.result


@pytest.fixture
def server() -> Iterator[Any]:
    s = ChatServer()
    s.start()
    yield s
    s.stop()


def sse_text(content: str, size: int) -> Reply:
    pieces = [content[i : i + size] for i in range(0, len(content), size)]
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    events.append(chunk({}, finish="stop"))
    return Reply(sse=events)


@pytest.mark.parametrize("form", ["fenced", "bare", "tag", "prose-then-fence"])
@pytest.mark.parametrize("size", [1, 3, 7])
def test_text_calls_from_a_real_server_are_run_and_never_streamed_as_text(
    server: Any, form: str, size: int
) -> None:
    answer = "订单 SO-1001 已发货。"
    server.add(sse_text(CALL_FORMS[form], size), sse_text(answer, size))
    model = OpenAIChatModel("local", base_url=server.url, api_key="sk-test", max_retries=0)
    agent = Agent(model=model, toolkit=Toolkit([lookup_order]))

    events = events_of(agent, "SO-1001 到哪了？")

    shown = streamed_text(events)
    assert not any(leak in shown for leak in LEAKS) and "{" not in shown, shown
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("ToolStarted") == 1 and kinds.count("ToolFinished") == 1
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.content == "SO-1001 of alice: shipped" and not finished.is_error
    result = final_of(events)
    assert result.output == answer
    assert shown.endswith(answer)
    if form == "prose-then-fence":
        assert shown == "我来查一下订单。" + STEP_SEPARATOR + answer
    else:
        assert shown == answer
    # the first request's reply became a call; the second request carries its result
    second = server.requests[1].body["messages"]
    assert second[-1]["role"] == "tool" and "shipped" in second[-1]["content"]


def test_plain_text_starting_with_a_brace_from_a_real_server_arrives_intact(server: Any) -> None:
    answer = '{"status": "shipped"} is what the order record says [1].'
    server.add(sse_text(answer, 2))
    model = OpenAIChatModel("local", base_url=server.url, api_key="sk-test", max_retries=0)

    events = events_of(Agent(model=model, toolkit=Toolkit([lookup_order])), "status?")

    assert streamed_text(events) == answer
    assert final_of(events).output == answer


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "delete_everything", "arguments": {}}',
        '```json\n{"name": "delete_everything", "arguments": {"all": true}}\n```',
        '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
    ],
)
def test_a_text_call_to_an_unknown_tool_goes_back_to_the_model_not_to_the_user(
    reply: str,
) -> None:
    model = ScriptedModel([text(reply), text("我没有这个工具，无法删除。")])
    events = events_of(Agent(model=model, toolkit=Toolkit([lookup_order])), "删除所有数据")

    shown = streamed_text(events)
    assert "delete_everything" not in shown and "{" not in shown
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.is_error and "unknown tool 'delete_everything'" in finished.content
    assert final_of(events).output == "我没有这个工具，无法删除。"
    assert model.requests[1][-1].role == "tool"


def test_text_call_arguments_that_are_not_an_object_go_back_to_the_model() -> None:
    model = ScriptedModel(
        [text('{"name": "lookup_order", "arguments": ["SO-1001"]}'), text("Sorry.")]
    )
    events = events_of(Agent(model=model, toolkit=Toolkit([lookup_order])), "SO-1001?")

    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.is_error and "must be a JSON object" in finished.content
    assert streamed_text(events) == "Sorry."


def test_the_text_of_successive_steps_is_separated_not_glued() -> None:
    def turns(messages: list[Message], tools: list[Any]) -> Any:
        if messages[-1].role == "user":
            return [text("Let me check."), tool_call("lookup_order", {"order_id": "SO-1"})]
        return text("It has shipped.")

    events = events_of(Agent(model=FunctionModel(turns), toolkit=Toolkit([lookup_order])), "?")

    assert streamed_text(events) == "Let me check." + STEP_SEPARATOR + "It has shipped."
    started = next(i for i, e in enumerate(events) if isinstance(e, ToolStarted))
    assert streamed_text(events[:started]) == "Let me check."
    assert final_of(events).output == "It has shipped."


def test_without_tools_nothing_is_held_back() -> None:
    model = ScriptedModel([text('{"name": "lookup_order", "arguments": {}}')])
    events = events_of(Agent(model=model), "show me a call")

    assert streamed_text(events) == '{"name": "lookup_order", "arguments": {}}'
    first_delta = next(e for e in events if isinstance(e, TextDelta))
    assert first_delta.text == '{"name'  # streamed piece by piece, not at the end


def test_run_and_stream_agree_on_a_recovered_call() -> None:
    def script() -> ScriptedModel:
        return ScriptedModel([text(CALL_FORMS["fenced"]), text("Shipped.")])

    import asyncio

    kit = Toolkit([lookup_order])
    result = asyncio.run(Agent(model=script(), toolkit=kit).run("?", context=ALICE))
    assert result.output == "Shipped."
    assert json.loads(result.messages[1].tool_calls[0].arguments) == {"order_id": "SO-1001"}
    assert result.messages[1].text == ""
