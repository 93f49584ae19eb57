"""The query rewrite's model call is a model call like the loop's: in the run's usage (and so
the reply's and the ledger's), reserved against the caller's budget, and traced as a ``chat``
span. Before, a follow-up rewritten by the model cost a call that nothing showed or capped."""

from __future__ import annotations

from typing import Any

import pytest
from test_rewrite import HISTORY_EN, RecordingSearcher, answering

from shelfhand import Agent, Toolkit
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.agent.rewrite import QueryRewriter
from shelfhand.core.context import UserContext
from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.tracing import Tracer
from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook, TurnMeter
from support.budgets import spent_book
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


def agent_with_rewriter() -> tuple[Agent, RecordingSearcher, Any]:
    searcher = RecordingSearcher()
    model = answering("Lumen X1 price")
    agent = Agent(
        model=model,
        toolkit=Toolkit([make_retrieve_tool(searcher)]),
        retrieval="context",
        rewriter=QueryRewriter(model),
    )
    return agent, searcher, model


async def test_the_rewrite_is_in_the_runs_usage_and_its_trace() -> None:
    agent, searcher, _ = agent_with_rewriter()
    spans = ListProcessor()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    with Tracer([spans]).root("turn", trace_id=trace_id):
        result = await agent.run(
            "and the price?", history=HISTORY_EN, context=ALICE, trace_id=trace_id
        )
    assert searcher.queries == ["Lumen X1 price"]
    assert result.usage.model_calls == 2  # the rewrite and the answer
    chats = [s for s in spans.spans if s.kind == "chat"]
    assert len(chats) == 2
    assert result.usage.output_tokens == sum(
        s.attributes["gen_ai.usage.output_tokens"] for s in chats
    )
    (run,) = [s for s in spans.spans if s.name.startswith("invoke_agent ")]
    rewrite = min(chats, key=lambda s: s.start_ns)
    assert rewrite.parent_id == run.span_id


async def test_the_rewrite_is_reserved_against_the_callers_budget() -> None:
    agent, searcher, model = agent_with_rewriter()
    policy = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
    meter = TurnMeter(LocalBudgetBook(), policy, ALICE)
    token = metered(meter)
    try:
        result = await agent.run("and the price?", history=HISTORY_EN, context=ALICE)
    finally:
        unmetered(token)
        meter.close()
    # the day's one call went to the rewrite: the answer's call was not made, and the run
    # answers without the model from what its search found (the turn spent the budget)
    assert len(model.requests) == 1
    assert searcher.queries == ["Lumen X1 price"]
    assert result.stop_reason == result.fallback_reason == "budget_exceeded"
    assert result.budget is not None and result.budget["budget"] == "model_calls_per_day"
    assert result.usage.model_calls == 1


async def test_a_run_whose_budget_was_spent_before_it_is_refused() -> None:
    """With no call of its own made, the run fails (the service answers 429)."""
    agent, _, model = agent_with_rewriter()
    policy = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
    meter = TurnMeter(spent_book(policy, ALICE), policy, ALICE)  # the day's one call is used
    token = metered(meter)
    try:
        with pytest.raises(BudgetExceededError):
            await agent.run("and the price?", history=HISTORY_EN, context=ALICE)
    finally:
        unmetered(token)
        meter.close()
    assert model.requests == []
