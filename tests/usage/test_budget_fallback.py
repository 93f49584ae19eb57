"""A budget that runs out mid-run ends the run cleanly: the model-free (extractive) answer of
the passages the run already found, saying which budget ended it and what was used; a run
refused before its first model call still fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.extractive import lead
from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.events import Final, TextDelta
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.results import RunResult
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.tool import Tool
from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook, TurnMeter
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
ONE_CALL = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
QUESTIONS = [("E-203 是什么故障？", "灯泡过热"), ("What does error E-203 mean?", "E-203")]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


class Metered:
    """A meter over ``policy`` set for the runs inside the block (as the service does)."""

    def __init__(self, policy: BudgetPolicy, user: UserContext = ACME) -> None:
        self.meter = TurnMeter(LocalBudgetBook(), policy, user)

    def __enter__(self) -> TurnMeter:
        self.token = metered(self.meter)
        return self.meter

    def __exit__(self, *exc: object) -> None:
        unmetered(self.token)
        self.meter.close()


def retrieving_model(question: str) -> ScriptedModel:
    """Searches for ``question``, then would answer (the second call the budget refuses)."""
    return ScriptedModel([tool_call("retrieve", {"query": question}), text("never sent")])


@pytest.mark.parametrize(("question", "expected"), QUESTIONS)
async def test_a_budget_spent_after_a_retrieval_answers_from_the_passages_found(
    kb: KnowledgeBase, question: str, expected: str
) -> None:
    model = retrieving_model(question)
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]))
    with Metered(ONE_CALL):
        result = await agent.run(question, context=ACME)

    assert len(model.requests) == 1  # the refused call was never made
    assert result.stop_reason == "budget_exceeded"
    assert result.fallback_reason == "budget_exceeded"
    assert result.extractive and result.output.startswith(lead(question))
    assert expected in result.output and "[1]" in result.output
    assert result.grounding is not None and result.grounding.grounded
    assert result.budget is not None
    assert result.budget["budget"] == "model_calls_per_day"
    assert result.budget["scope"] == "tenant acme" and result.budget["limit"] == 1
    assert (result.usage.model_calls, result.usage.retrievals, result.usage.tool_calls) == (1, 1, 1)
    assert result.messages[-1].text == result.output  # the transcript ends with the answer


async def test_the_answer_check_leaves_the_budget_answer_as_it_is(kb: KnowledgeBase) -> None:
    question = QUESTIONS[0][0]
    agent = Agent(
        model=retrieving_model(question),
        toolkit=Toolkit([retrieve_tool(kb)]),
        answer_check=AnswerCheck(),
    )
    with Metered(ONE_CALL):
        result = await agent.run(question, context=ACME)
    assert result.fallback_reason == "budget_exceeded" and result.extractive
    assert "灯泡过热" in result.output


async def test_the_streamed_text_is_the_budget_answer_the_final_event_carries(
    kb: KnowledgeBase,
) -> None:
    question = QUESTIONS[0][0]
    agent = Agent(model=retrieving_model(question), toolkit=Toolkit([retrieve_tool(kb)]))
    deltas: list[str] = []
    results: list[RunResult] = []
    with Metered(ONE_CALL):
        async for event in agent.stream(question, context=ACME):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
            elif isinstance(event, Final):
                results.append(event.result)
    (result,) = results
    assert "".join(deltas) == result.output  # no text to take back
    assert result.stop_reason == "budget_exceeded" and result.extractive


async def test_a_run_refused_before_its_first_model_call_fails(kb: KnowledgeBase) -> None:
    model = retrieving_model("E-203")
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]))
    with Metered(ONE_CALL) as meter:
        meter.reserve(10)  # the day's one call is spent already
        with pytest.raises(BudgetExceededError) as caught:
            await agent.run("E-203 是什么故障？", context=ACME)
    assert caught.value.budget == "model_calls_per_day"
    assert model.requests == []


async def test_without_passages_about_the_question_the_answer_names_the_budget() -> None:
    async def order_status(order_id: str) -> str:
        """The status of an order."""
        return f"order {order_id}: shipped 已发货"

    model = ScriptedModel([tool_call("order_status", {"order_id": "A-1"}), text("never")])
    agent = Agent(model=model, toolkit=Toolkit([Tool(order_status)]))
    own = BudgetPolicy(user=BudgetLimits(model_calls_per_day=1))
    with Metered(own):
        result = await agent.run("where is my order A-1?", context=ACME)

    assert result.stop_reason == "budget_exceeded" and not result.extractive
    assert result.output.startswith("The model calls per day budget of user acme/u1 is spent")
    assert "resets in" in result.output
    assert "- order_status: order A-1: shipped 已发货" in result.output
    assert result.budget is not None and result.budget["scope"] == "user acme/u1"
