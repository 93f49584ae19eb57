"""An answer that states what only the documents could tell, written with no tool run while
``retrieve`` is offered and answers are checked, is not taken: the loop searches the documents
for the question (as if the model had called ``retrieve``) and asks again, once.

Seen with Qwen2.5-Coder-0.5B in ``tool`` mode: "How long is the warranty?" answered "The
warranty for the product is 10 years." (or 3, or 1, or "[8] years") without a search, shown
unchecked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent.answer_check import AnswerCheck, guessed, needs_search
from shelfhand.agent.grounding import PASSAGES_INTRO
from shelfhand.core.events import Final, TextDelta, TextWithdrawn, ToolFinished, ToolStarted
from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="globex", user_id="bob")  # a tenant with no documents

QUESTION = "投影仪的保修期是多久？"
GUESS = "投影仪的保修期为 99 年。"  # no passage holds 99


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def searched(messages: Sequence[Message]) -> bool:
    """Whether the model was shown passages: as text before the question (a search made for
    it) or as a tool result (its own call)."""
    return any(m.role == "tool" for m in messages) or PASSAGES_INTRO in messages[-1].text


def quoted(messages: Sequence[Message]) -> str:
    """The answer of a model that read the passages: the first one's first line, cited."""
    lines = messages[-1].text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("[1] ") and i + 1 < len(lines):
            return f"{lines[i + 1]} [1]"
    return "I could not find it."


def guessing(guess: str) -> Callable[[list[Message], Any], str]:
    """A model that answers ``guess`` until passages are in the conversation, then from them."""

    def model(messages: list[Message], tools: Any) -> str:
        return quoted(messages) if searched(messages) else guess

    return model


answer_from_passages = guessing(GUESS)
"""Guesses until a tool result is in the conversation, then answers from it."""


def checked_agent(model: Any, kb: KnowledgeBase, **kwargs: Any) -> Agent:
    return Agent(
        model=model,
        toolkit=Toolkit([retrieve_tool(kb), *kwargs.pop("tools", [])]),
        retrieval="tool",
        answer_check=AnswerCheck(),
        **kwargs,
    )


async def test_a_guessed_answer_gets_the_documents_searched_and_the_model_asked_again(
    kb: KnowledgeBase,
) -> None:
    model = FunctionModel(answer_from_passages)
    result = await checked_agent(model, kb).run(QUESTION, context=ALICE)

    assert len(model.requests) == 2
    assert not searched(model.requests[0]) and searched(model.requests[1])
    # shown as text before the question, not as a tool exchange the model never made
    assert all(m.role != "tool" for m in model.requests[1])
    assert model.requests[1][-1].text.endswith(QUESTION)
    assert result.output == quoted(model.requests[1]) and result.output.endswith("[1]")
    assert result.citations and result.unknown_citations == () and not result.fallback_reason
    # the search is in the transcript as a call of retrieve with the question; the guess is not
    call = result.messages[1].tool_calls[0]
    assert call.name == "retrieve" and QUESTION in call.arguments
    assert all(GUESS not in m.text for m in result.messages)
    assert (result.usage.model_calls, result.usage.tool_calls, result.usage.retrievals) == (2, 1, 1)


@pytest.mark.parametrize(
    "reply",
    [
        "The warranty is [1][2].",  # marks, no passage anywhere
        "The warranty is [8] years.",
        "That information is not provided.",  # a refusal without looking
        "保修期为2年。",
    ],
)
async def test_citation_marks_refusals_and_chinese_guesses_are_searched_for(
    kb: KnowledgeBase, reply: str
) -> None:
    model = FunctionModel(lambda messages, tools: quoted(messages) if searched(messages) else reply)
    result = await checked_agent(model, kb).run("保修期多久？", context=ALICE)
    assert len(model.requests) == 2 and result.output == quoted(model.requests[1])
    assert "保修" in result.output and not result.fallback_reason


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Hello!", "Hello! How can I help you today?"),  # states nothing
        ("My order is A-1001. Repeat it.", "Your order is A-1001."),  # the question's own
    ],
)
async def test_an_answer_stating_nothing_the_conversation_lacks_is_taken(
    kb: KnowledgeBase, question: str, reply: str
) -> None:
    model = ScriptedModel([text(reply)])
    result = await checked_agent(model, kb).run(question, context=ALICE)
    assert result.output == reply and len(model.requests) == 1


async def test_facts_from_earlier_turns_are_not_guesses(kb: KnowledgeBase) -> None:
    history = [Message.user("我的订单号是 A-1001"), Message.assistant("好的，已记下 A-1001。")]
    model = ScriptedModel([text("您的订单号是 A-1001。")])
    result = await checked_agent(model, kb).run(
        "我的订单号是多少？", context=ALICE, history=history
    )
    assert result.output == "您的订单号是 A-1001。" and len(model.requests) == 1


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


async def test_no_search_is_made_after_a_tool_ran_without_a_check_or_without_retrieve(
    kb: KnowledgeBase,
) -> None:
    # a number a tool gave is the tool's, not a guess
    model = ScriptedModel([tool_call("multiply", {"a": 6, "b": 7}), text("42")])
    result = await checked_agent(model, kb, tools=[multiply]).run("6*7?", context=ALICE)
    assert result.output == "42" and len(model.requests) == 2

    # no answer check: the caller takes the model's words as they are
    unchecked = Agent(model=ScriptedModel([text(GUESS)]), toolkit=Toolkit([retrieve_tool(kb)]))
    assert (await unchecked.run(QUESTION, context=ALICE)).output == GUESS

    # nothing to search with
    alone = Agent(model=ScriptedModel([text(GUESS)]), answer_check=AnswerCheck())
    assert (await alone.run(QUESTION, context=ALICE)).output == GUESS


async def test_the_search_is_made_once_and_a_second_guess_goes_to_the_check(
    kb: KnowledgeBase,
) -> None:
    model = ScriptedModel([text(GUESS), text(GUESS)])
    result = await checked_agent(model, kb).run(QUESTION, context=ALICE)
    assert len(model.requests) == 2 and result.usage.retrievals == 1
    # no passage found holds 99: the check answers from their sentences instead
    assert result.fallback_reason == "ungrounded" and result.extractive
    assert "99" not in result.output and "个月" in result.output


async def test_the_search_is_streamed_as_a_tool_call(kb: KnowledgeBase) -> None:
    agent = checked_agent(FunctionModel(answer_from_passages), kb)
    events = [e async for e in agent.stream(QUESTION, context=ALICE)]
    started = [e for e in events if isinstance(e, ToolStarted)]
    assert [e.name for e in started] == ["retrieve"]
    assert any(isinstance(e, ToolFinished) and e.name == "retrieve" for e in events)
    final = events[-1]
    assert isinstance(final, Final) and final.result.output.endswith("[1]")
    assert GUESS not in final.result.output
    # the guess had streamed: it is withdrawn, exactly, before the search; the answer follows
    withdrawn = [e for e in events if isinstance(e, TextWithdrawn)]
    assert len(withdrawn) == 1 and withdrawn[0].reason == "guessed"
    at = events.index(withdrawn[0])
    assert withdrawn[0].text == "".join(e.text for e in events[:at] if isinstance(e, TextDelta))
    assert withdrawn[0].text == GUESS and events.index(started[0]) > at
    after = "".join(e.text for e in events[at:] if isinstance(e, TextDelta))
    assert after == final.result.output  # no step separator left from the withdrawn text


async def test_a_search_not_streamed_withdraws_nothing(kb: KnowledgeBase) -> None:
    agent = checked_agent(FunctionModel(answer_from_passages), kb)
    events = [e async for e in agent.stream(QUESTION, context=ALICE, text_deltas=False)]
    assert not any(isinstance(e, TextWithdrawn | TextDelta) for e in events)
    assert any(isinstance(e, ToolStarted) for e in events)


async def test_two_callers_at_once_each_get_a_search_of_their_own_documents(
    kb: KnowledgeBase,
) -> None:
    # alice (acme, whose documents hold the warranty) and bob (globex, none) guess at once;
    # each first model call waits until the other's has come, so the runs interleave
    arrived: list[str] = []
    both = asyncio.Event()

    async def model(messages: list[Message], tools: Any) -> str:
        if not searched(messages):
            arrived.append(messages[-1].text)
            if len(arrived) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 10)
        return answer_from_passages(messages, tools)

    agent = checked_agent(FunctionModel(model), kb)
    alice, bob = await asyncio.gather(
        agent.run(QUESTION, context=ALICE),
        agent.run(QUESTION, context=BOB),
    )
    assert alice.output.endswith("[1]") and alice.citations and not alice.fallback_reason
    assert all(c.source.startswith("projector/") for c in alice.citations)
    # bob's search read globex's documents: none; his guess is never shown as an answer
    assert bob.citations == () and GUESS not in bob.output
    assert bob.usage.retrievals == alice.usage.retrievals == 1


def test_guessed_reads_the_question_and_the_conversation() -> None:
    assert guessed("It is 10 years.", "How long?")
    assert not guessed("It is 10 years.", "Is it 10 years?")
    assert not guessed("Order A-1001.", "What is my order?", [Message.user("my order: A-1001")])
    assert guessed("See [1].", "What?")
    assert not guessed("Hello.", "Hi")
    assert guessed("抱歉，我无法回答。", "保修期多久？")


def test_no_amount_for_a_question_asking_how_long_or_how_much_needs_a_search() -> None:
    # seen with Qwen2.5-Coder-0.5B in `tool` mode, no search made: "The warranty policy
    # states that the period depends on the purchase date." for how long a refund takes
    refund = "How long does a refund take after I send an item back?"
    vague = "The warranty policy states that the period depends on the date."
    assert needs_search(vague, refund) and not guessed(vague, refund)  # claims no fact
    assert needs_search("It has a list price.", "What does the Lumen X1 cost?")
    assert needs_search("It is 10 years.", "How long?")  # a guess too
    assert not needs_search("A refund takes three to five working days.", refund)
    assert not needs_search("Repairs under warranty are free.", "Is there a fee for repairs?")
    assert not needs_search("Hello! How can I help?", "Hi")


async def test_an_unsearched_answer_with_no_amount_gets_the_documents_searched(
    kb: KnowledgeBase,
) -> None:
    model_ = FunctionModel(guessing("投影仪的保修期取决于购买日期。"))  # no amount, no search
    result = await checked_agent(model_, kb).run(QUESTION, context=ALICE)
    assert len(model_.requests) == 2 and searched(model_.requests[1])
    assert result.usage.retrievals == 1 and "个月" in result.output


def test_an_answer_explaining_the_questions_code_is_a_guess() -> None:
    # what a code means is in the documents: explained with no search, it was guessed
    assert guessed("Error E-203 means a network connectivity failure.", "What does E-203 mean?")
    assert guessed("E-203 表示电源模块损坏，请更换主板。", "E-203 是什么故障？")
    # repeating the caller's own code says nothing new; a code the conversation discussed
    # (and searched) before is the conversation's
    assert not guessed("Your order is A-1001.", "My order is A-1001. Repeat it.")
    assert not guessed("我看到了这些消息：我的订单号是 A-1001", "我的订单号是 A-1001")  # told
    earlier = [Message.user("What is E-203?"), Message.assistant("E-203: the lamp overheats [1].")]
    assert not guessed("E-203 means the lamp overheats, as I said.", "And E-203?", earlier)


async def test_a_code_explained_without_a_search_gets_the_documents_searched(
    kb: KnowledgeBase,
) -> None:
    # seen with Qwen2.5-Coder-0.5B in `tool` mode: "Error E-203 means that the system is
    # unable to process the request due to a problem with the data…", shown unchecked
    guess = "Error E-203 means the system cannot process the request."
    agent = checked_agent(FunctionModel(guessing(guess)), kb)
    result = await agent.run("What does error E-203 mean?", context=ALICE)
    assert result.usage.retrievals == 1 and result.output.endswith("[1]")
    assert "过热" in result.output and "process the request" not in result.output
