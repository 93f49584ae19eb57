"""Short-term memory: a token-bounded window plus a model-written summary."""

from __future__ import annotations

import pytest

from shelfhand import Agent
from shelfhand.agent.memory import ConversationMemory, build_system_prompt
from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, ScriptedModel, text

pytestmark = pytest.mark.anyio


async def test_old_turns_are_folded_into_a_summary_made_by_the_model() -> None:
    memory = ConversationMemory(token_budget=60)
    for i in range(6):
        memory.add(
            [
                Message.user(f"question number {i} about projector lamps and warranty terms"),
                Message.assistant(f"answer number {i} with some words about it"),
            ]
        )
    summarizer = ScriptedModel([text("User asked about lamps and warranty.")])
    assert await memory.compact(summarizer)
    assert memory.summary == "User asked about lamps and warranty."
    assert memory.tokens() <= 60
    assert memory.messages[0].role == "user"  # cut at a turn boundary
    # the summariser saw the oldest turn
    assert "question number 0" in summarizer.requests[0][-1].text


async def test_the_summary_reaches_the_prompt_in_its_own_section() -> None:
    memory = ConversationMemory(token_budget=10_000)
    memory.summary = "用户的订单号是 SO-1001。"
    seen: list[str] = []

    def reply(messages, tools):
        seen.append(messages[0].text)
        return "好的"

    await Agent(model=FunctionModel(reply), memory=memory).run("那我的订单呢？")
    assert "## Conversation so far" in seen[0] and "SO-1001" in seen[0]
    assert len(memory.messages) == 2


async def test_memory_carries_history_between_runs() -> None:
    memory = ConversationMemory()
    model = ScriptedModel([text("Hi Ann."), text("Your name is Ann.")])
    agent = Agent(model=model, memory=memory)
    await agent.run("I am Ann.")
    await agent.run("What is my name?")
    assert "I am Ann." in [m.text for m in model.requests[1]]


def test_sections_are_labelled_and_separate() -> None:
    prompt = build_system_prompt(
        "Base.", memory="likes Chinese", summary="asked about E-203", knowledge="doc"
    )
    assert (
        prompt.index("## Knowledge")
        < prompt.index("## Memory")
        < prompt.index("## Conversation so far")
    )


def long_memory() -> ConversationMemory:
    """A window over its budget: the next run's memory folds its oldest turns."""
    memory = ConversationMemory(token_budget=60)
    for i in range(6):
        memory.add(
            [Message.user(f"第 {i} 个问题：投影仪灯泡的保修条款"), Message.assistant(f"回答 {i}")]
        )
    return memory


async def test_the_summary_call_is_in_the_runs_usage_and_cost() -> None:
    from shelfhand.core.pricing import ModelPrice

    summary = "用户问了灯泡保修。"
    model = ScriptedModel([text("好的"), text(summary)])
    price = {"scripted": ModelPrice(input=1_000_000, output=2_000_000)}
    result = await Agent(model=model, memory=long_memory(), prices=price).run("还有呢？")
    answer_tokens = len("好的") // 4 + 1
    summary_tokens = len(summary) // 4 + 1
    assert result.usage.model_calls == 2
    assert result.usage.output_tokens == answer_tokens + summary_tokens
    assert result.usage.cost == pytest.approx(2.0 * (answer_tokens + summary_tokens))


async def test_the_summary_call_is_reserved_against_the_turns_budget() -> None:
    from shelfhand.core.context import UserContext
    from shelfhand.core.metering import metered, unmetered
    from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook, TurnMeter

    alice = UserContext(tenant_id="acme", user_id="alice")
    policy = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
    memory = long_memory()
    model = ScriptedModel([text("好的"), text("never written")])
    meter = TurnMeter(LocalBudgetBook(), policy, alice)
    token = metered(meter)
    try:
        result = await Agent(model=model, memory=memory).run("还有呢？")
    finally:
        unmetered(token)
        meter.close()
    # the answer took the day's one call: the summary is not asked for, the turns still go
    assert len(model.requests) == 1
    assert result.output == "好的"
    assert result.usage.model_calls == 1
    assert memory.summary == ""
    assert memory.tokens() <= 60


async def test_a_failed_summary_is_counted_failed_and_the_window_still_shrinks() -> None:
    from shelfhand.core.step_counts import count_steps, stop_counting

    class Counter:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str]] = []

        def count_turn(self, status: str) -> None: ...
        def count_fallback(self, reason: str) -> None: ...
        def count_model_call(self, model: str, status: str, i: int, o: int) -> None:
            self.calls.append((model, status))

        def count_tool_call(self, tool: str, outcome: str) -> None: ...
        def count_retrieval(self, mode: str, seconds: float) -> None: ...

    def reply(messages, tools):
        if "Summarise" in messages[0].text:
            raise ConnectionError("model down")
        return "好的"

    counter = Counter()
    memory = long_memory()
    counting, token = count_steps(counter)
    try:
        result = await Agent(model=FunctionModel(reply), memory=memory).run("还有呢？")
    finally:
        stop_counting(token)
    assert [status for _, status in counter.calls] == ["ok", "error"]
    assert counting.open_calls == []
    assert result.usage.model_calls == 1
    assert memory.tokens() <= 60
