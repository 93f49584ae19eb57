"""Every request fits the model's context window (issue 9.7)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.budget import (
    ContextBudgetError,
    estimate_tokens,
    fit_messages,
    message_tokens,
    request_budget,
)
from shelfhand.core.errors import ModelProviderError
from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from support.chat_server import ChatServer, Reply, completion

pytestmark = pytest.mark.anyio
ALICE = UserContext(tenant_id="t1", user_id="alice")
WINDOW = 1500
PAGE = (
    "第{n}页：投影仪 P20 的灯泡过热时显示 E-203，请关机冷却 30 分钟后再开机。"
    "If the error persists after 3 restarts, replace lamp module LM-{n}0 (part 7781-{n}). "
) * 12

# Roughly how a BPE tokenizer splits text: one token per CJK character, per digit, per run of
# letters, per run of punctuation. The agent's estimate must never be below this.
_SERVER_TOKENS = re.compile(r"[\u4e00-\u9fff]|\d|[A-Za-z]+|[^\sA-Za-z\d\u4e00-\u9fff]+")


def server_count(body: dict[str, Any]) -> int:
    parts = [json.dumps(body.get("tools", []), ensure_ascii=False)]
    for m in body["messages"]:
        parts.append(m.get("content") or "")
        for call in m.get("tool_calls") or ():
            parts.append(call["function"]["name"] + " " + call["function"]["arguments"])
    return sum(len(_SERVER_TOKENS.findall(p)) + 3 for p in parts)


class WindowedServer(ChatServer):  # type: ignore[misc, valid-type]
    """A chat server that refuses, like llama.cpp, any prompt over ``limit`` tokens."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.counts: list[int] = []

    def next_reply(self, received: Any) -> Any:
        count = server_count(received.body)
        self.counts.append(count)
        if count > self.limit:
            with self._lock:
                self.requests.append(received)
            return Reply(
                status=400,
                body={
                    "error": {
                        "message": f"the request exceeds the available context size "
                        f"({count} > {self.limit} tokens)",
                        "type": "exceed_context_size_error",
                    }
                },
            )
        return super().next_reply(received)


@pytest.fixture
def windowed() -> Iterator[Any]:
    s = WindowedServer(WINDOW)
    s.start()
    yield s
    s.stop()


@tool(read_only=True)
def read_page(n: int) -> str:
    """Read one page of the projector manual.

    Args:
        n: Page number.
    """
    return PAGE.format(n=n)


def page_calls(server: Any) -> None:
    for n in (1, 2, 3, 4):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "read_page", "arguments": json.dumps({"n": n})},
        }
        server.add(Reply(body=completion(tool_calls=[call])))
    server.add(Reply(body=completion("关机冷却 30 分钟，仍报错则更换灯泡模块。")))


def model_for(server: Any) -> OpenAIChatModel:
    return OpenAIChatModel("local", base_url=server.url, api_key="sk-test", max_retries=0)


def test_the_server_really_refuses_a_conversation_that_outgrows_its_window(
    windowed: Any,
) -> None:
    page_calls(windowed)
    agent = Agent(model=model_for(windowed), toolkit=Toolkit([read_page]), context_tokens=100_000)

    with pytest.raises(ModelProviderError, match="context size"):
        agent.run_sync("E-203 怎么处理？", context=ALICE)


def test_a_fitted_conversation_never_reaches_the_servers_limit(windowed: Any) -> None:
    page_calls(windowed)
    agent = Agent(model=model_for(windowed), toolkit=Toolkit([read_page]), context_tokens=WINDOW)

    result = agent.run_sync("E-203 怎么处理？", context=ALICE)

    assert result.output == "关机冷却 30 分钟，仍报错则更换灯泡模块。"
    assert len(windowed.counts) == 5 and max(windowed.counts) <= WINDOW
    last = windowed.requests[-1].body["messages"]
    tool_contents = [m["content"] for m in last if m["role"] == "tool"]
    assert len(tool_contents) == 4  # every call keeps a result, older ones as a marker
    assert "was cut to fit the context window" in tool_contents[0]
    assert tool_contents[-1].startswith("第4页")  # the newest result is kept (or shortened)
    # the run's own transcript keeps every result whole
    kept = [r.content for m in result.messages for r in m.tool_results]
    assert kept == [PAGE.format(n=n) for n in (1, 2, 3, 4)]


async def test_the_window_and_max_tokens_come_from_the_model_object() -> None:
    seen: list[list[Message]] = []

    def turns(messages: list[Message], tools: list[Any]) -> Any:
        seen.append(messages)
        done = sum(1 for m in messages if m.role == "tool")
        return tool_call("read_page", {"n": done + 1}) if done < 3 else text("ok")

    model = FunctionModel(turns)
    model.context_tokens = 2000  # type: ignore[attr-defined]
    model.max_tokens = 900  # type: ignore[attr-defined]
    kit = Toolkit([read_page])
    result = await Agent(model=model, toolkit=kit).run("E-203?", context=ALICE)

    assert result.output == "ok"
    budget = request_budget(2000, 900, kit.schemas(ALICE))
    assert all(sum(message_tokens(m) for m in request) <= budget for request in seen)
    assert sum(message_tokens(m) for m in seen[-1]) > budget // 2  # it was really full


async def test_a_question_that_cannot_fit_is_refused_before_anything_is_sent() -> None:
    model = ScriptedModel([text("never asked")])
    agent = Agent(model=model, context_tokens=300)

    with pytest.raises(ContextBudgetError, match="context window"):
        await agent.run("请总结：" + "投影仪灯泡过热。" * 200)
    assert model.requests == []


def tool_turn(call_id: str, content: str) -> list[Message]:
    call = ToolCallBlock(id=call_id, name="read_page", arguments='{"n": 1}')
    result = ToolResultBlock(call_id=call_id, name="read_page", content=content)
    return [Message.assistant(tool_calls=[call]), Message.tool([result])]


def test_fitting_cuts_old_results_first_then_history_then_shortens_the_newest() -> None:
    system = Message.system("You answer from the manual.")
    history = [Message.user("old question"), *tool_turn("h1", PAGE), Message.assistant("old")]
    prompt = Message.user("E-203 怎么处理？")
    run = [*tool_turn("r1", PAGE), *tool_turn("r2", PAGE)]
    messages = [system, *history, prompt, *run]
    total = sum(message_tokens(m) for m in messages)
    page = estimate_tokens(PAGE)

    # a little too big: only the oldest results become markers
    fitted = fit_messages(messages, total - page // 2, keep_from=1 + len(history))
    assert len(fitted) == len(messages)
    contents = [r.content for m in fitted for r in m.tool_results]
    assert "was cut to fit" in contents[0] and contents[1:] == [PAGE, PAGE]

    # much too big: history goes (never leaving a tool result without its call)
    fitted = fit_messages(messages, 2 * page // 3, keep_from=1 + len(history))
    assert fitted[0] == system and prompt in fitted
    assert all(m not in fitted for m in history)
    newest = fitted[-1].tool_results[0].content
    assert newest.startswith(PAGE[:20]) and "more characters were cut" in newest
    assert sum(message_tokens(m) for m in fitted) <= 2 * page // 3

    # fits already: unchanged
    assert fit_messages(messages, total, keep_from=1 + len(history)) == messages


async def test_a_call_nested_a_hundred_thousand_deep_is_refused_and_cut_from_the_next_request(
    chat_server: ChatServer,
) -> None:
    """A model's arguments ``[[[…]]]`` 100,000 levels deep raised ``RecursionError`` out of
    the run (the service's turn failed); then, refused, their 200,000 characters did not fit
    the next request (``ContextBudgetError``). Now the call gets an error result and the next
    request carries a marker in their place. The real adapter against a loopback server."""
    deep = '{"n": ' + "[" * 100_000 + "]" * 100_000 + "}"
    call = {"id": "c1", "type": "function", "function": {"name": "read_page", "arguments": deep}}
    chat_server.add(
        Reply(body=completion(None, tool_calls=[call])), Reply(body=completion("第 1 页说明了。"))
    )
    model = OpenAIChatModel("m", base_url=chat_server.url, api_key="k", max_retries=0)
    agent = Agent(model=model, toolkit=Toolkit([read_page]), context_tokens=4096)

    result = await agent.run("读第一页", context=ALICE)
    await model.aclose()

    assert (result.stop_reason, result.output) == ("final", "第 1 页说明了。")
    (refused,) = [r for m in result.messages for r in m.tool_results]
    assert refused.is_error and "nested deeper than 64 levels" in refused.content
    sent = chat_server.requests[1].body["messages"]
    (sent_call,) = [c for m in sent for c in m.get("tool_calls") or ()]
    assert sent_call["function"]["arguments"] == (
        '"[200007 characters of arguments, cut to fit the context window]"'
    )
    assert len(deep) == 200_007


def test_fitting_cuts_a_calls_own_long_arguments_before_the_newest_results() -> None:
    system = Message.system("You answer from the manual.")
    prompt = Message.user("E-203 怎么处理？")
    small = ToolCallBlock(id="c1", name="read_page", arguments='{"n": 1}')
    huge = ToolCallBlock(id="c2", name="read_page", arguments='{"n": "' + "9" * 5000 + '"}')
    calls = Message.assistant(tool_calls=[small, huge])
    results = Message.tool(
        [
            ToolResultBlock(call_id="c1", name="read_page", content="page 1"),
            ToolResultBlock(call_id="c2", name="read_page", content="refused", is_error=True),
        ]
    )
    messages = [system, prompt, calls, results]

    fitted = fit_messages(messages, 300, keep_from=1)

    kept = fitted[2].tool_calls
    assert kept[0] == small
    assert kept[1].arguments == '"[5009 characters of arguments, cut to fit the context window]"'
    assert fitted[3] == results
