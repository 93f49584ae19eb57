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
