"""An LLM reranker's model call is a model call like the loop's: in the run's usage (and so
the reply's and the ledger's), reserved against the caller's budget, counted, and traced as a
``chat`` span under the search's. Before, ``rerank = "llm"`` cost a call per search that no
usage, budget, metric or trace showed: it runs on a loop of its own, in another thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, Toolkit
from shelfhand.agent.llm_rerank import LlmReranker
from shelfhand.agent.retrieve import KnowledgeAgent, make_retrieve_tool
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.pricing import ModelPrice
from shelfhand.core.step_counts import count_steps, stop_counting
from shelfhand.core.tracing import Tracer
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.types import Document
from shelfhand.models.base import ToolSchema
from shelfhand.testing import FunctionModel
from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook, TurnMeter
from support.budgets import spent_book
from support.knowledge import text_document
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
DOCS = {
    "warranty.md": "Warranty: the projector warranty lasts 24 months from purchase.",
    "errors.md": "Error E-203: the lamp overheats. Clean the filter and restart the projector.",
    "returns.md": "Returns: an unopened projector may be returned within 30 days.",
    "保修-v1.md": "保修政策 第一版：投影仪保修期为 12 个月，自购买之日起计算。",
    "保修-v2.md": "保修政策 第二版：自 2025 年起，投影仪保修期延长为 24 个月。",
    "保修-范围.md": "保修范围：灯泡和遥控器不在保修范围内，人为损坏不保修。",
}
RANKING = "[2, 1]"
ANSWER = "投影仪保修期为 24 个月 [1]。"


def turn(messages: list[Message], tools: list[ToolSchema]) -> Any:
    """The ranking prompt gets an order; everything else an answer."""
    if messages[0].role == "system" and "You rank search results" in messages[0].text:
        return RANKING
    return ANSWER


def documents() -> list[Document]:
    return [text_document(name, body, tenant_id=ALICE.tenant_id) for name, body in DOCS.items()]


@pytest.fixture
def ranking_kb(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, FunctionModel]]:
    model = FunctionModel(turn)
    reranker = LlmReranker(model, timeout=5, price=ModelPrice(input=1.0, output=2.0))
    kb = KnowledgeBase(tmp_path / "ws", None, mode="keyword", reranker=reranker)
    kb.ingest_documents(documents())
    yield kb, model
    kb.close()
    reranker.close()


def ranking_calls(model: FunctionModel) -> int:
    return sum(1 for request in model.requests if "You rank" in request[0].text)


async def test_the_ranking_is_in_the_runs_usage_and_under_the_search_in_its_trace(
    ranking_kb: tuple[KnowledgeBase, FunctionModel],
) -> None:
    kb, model = ranking_kb
    agent = Agent(model=model, toolkit=Toolkit([make_retrieve_tool(kb)]), retrieval="context")
    spans = ListProcessor()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    with Tracer([spans]).root("turn", trace_id=trace_id):
        result = await agent.run("投影仪保修期多久？", context=ALICE, trace_id=trace_id)

    assert ranking_calls(model) == 1
    assert result.usage.model_calls == 2  # the ranking and the answer
    chats = [s for s in spans.spans if s.kind == "chat"]
    assert len(chats) == 2
    assert result.usage.input_tokens == sum(
        s.attributes["gen_ai.usage.input_tokens"] for s in chats
    )
    assert result.usage.output_tokens == sum(
        s.attributes["gen_ai.usage.output_tokens"] for s in chats
    )
    (search,) = [s for s in spans.spans if s.kind == "retrieval"]
    ranking = min(chats, key=lambda s: s.start_ns)
    assert ranking.parent_id == search.span_id


async def test_the_ranking_is_reserved_against_the_callers_budget(
    ranking_kb: tuple[KnowledgeBase, FunctionModel],
) -> None:
    kb, model = ranking_kb
    agent = Agent(model=model, toolkit=Toolkit([make_retrieve_tool(kb)]), retrieval="context")
    policy = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
    meter = TurnMeter(LocalBudgetBook(), policy, ALICE)
    token = metered(meter)
    try:
        result = await agent.run("投影仪保修期多久？", context=ALICE)
    finally:
        unmetered(token)
        meter.close()
    # the day's one call went to the ranking: the answer's call was not made, and the run
    # answers from the ranked passages (the turn spent the budget: no 429 that loses them)
    assert len(model.requests) == 1
    assert ranking_calls(model) == 1
    assert result.stop_reason == result.fallback_reason == "budget_exceeded"
    assert result.extractive and "[1]" in result.output and result.citations
    assert result.budget is not None and result.budget["budget"] == "model_calls_per_day"
    assert (result.usage.model_calls, result.usage.retrievals) == (1, 1)


def test_no_budget_left_keeps_the_fused_order_with_the_reason(
    ranking_kb: tuple[KnowledgeBase, FunctionModel],
) -> None:
    kb, model = ranking_kb
    plain = kb.search_result("投影仪保修期", k=3, user=ALICE, rerank=False)
    policy = BudgetPolicy(tenant=BudgetLimits(model_calls_per_day=1))
    meter = TurnMeter(spent_book(policy, ALICE), policy, ALICE)  # the day's one call is used
    token = metered(meter)
    try:
        found = kb.search_result("投影仪保修期", k=3, user=ALICE)
    finally:
        unmetered(token)
        meter.close()
    assert model.requests == []
    assert [h.chunk.chunk_id for h in found.hits] == [h.chunk.chunk_id for h in plain.hits]
    assert found.rerank_reason is not None
    assert "not asked, fused order kept: no budget left" in found.rerank_reason


def test_the_ranking_is_counted_for_the_metrics(
    ranking_kb: tuple[KnowledgeBase, FunctionModel],
) -> None:
    kb, _ = ranking_kb
    counted: list[tuple[str, str]] = []

    class Counter:
        def count_model_call(self, model: str, status: str, i: int, o: int) -> None:
            counted.append((model, status))

        def count_retrieval(self, mode: str, seconds: float) -> None:
            counted.append(("retrieval", mode))

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    counting, token = count_steps(Counter())  # type: ignore[arg-type]
    try:
        kb.search_result("投影仪保修期", k=3, user=ALICE)
    finally:
        stop_counting(token)
    assert counted == [("function:turn", "ok"), ("retrieval", "keyword")]
    assert counting.open_calls == []


async def test_the_knowledge_agents_usage_holds_its_ranking(
    ranking_kb: tuple[KnowledgeBase, FunctionModel],
) -> None:
    kb, _ = ranking_kb
    result = await KnowledgeAgent(kb).run("投影仪保修期多久？", context=ALICE)
    assert result.usage.retrievals == 1
    assert result.usage.model_calls == 1
    assert result.usage.output_tokens > 0
    assert result.usage.cost is not None and result.usage.cost > 0  # at the ranking's price
    assert result.citations and result.citations[0].source == "保修-v2.md"


def test_a_ranking_past_its_timeout_reads_as_a_timeout_in_the_trace(tmp_path: Path) -> None:
    async def slow(messages: list[Message], tools: list[ToolSchema]) -> str:
        await asyncio.sleep(30)
        return RANKING

    reranker = LlmReranker(FunctionModel(slow), timeout=0.3)
    kb = KnowledgeBase(tmp_path / "ws", None, mode="keyword", reranker=reranker)
    kb.ingest_documents(documents())
    spans = ListProcessor()
    try:
        with Tracer([spans]).root("turn", trace_id="0af7651916cd43dd8448eb211c80319d"):
            found = kb.search_result("投影仪保修期", k=3, user=ALICE)
    finally:
        kb.close()
        reranker.close()
    assert found.rerank_reason is not None and "within 0.3 s" in found.rerank_reason
    (chat,) = [s for s in spans.spans if s.kind == "chat"]
    assert chat.attributes["error.type"] == "ModelTimeoutError"
    assert chat.attributes["shelfhand.chat.failure"] == (
        "model 'function:slow' did not answer within 0.3s"
    )
