"""A retrieval span says how many candidates each stage had (keyword, vector, fused, above
the relevance threshold, shown to the reranker, returned) and the ``retrieve`` call's span
which passages disagree, so an operator sees where a right passage was lost."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shelfhand import (
    Agent,
    KnowledgeAgent,
    KnowledgeBase,
    Toolkit,
    UserContext,
    retrieve_tool,
)
from shelfhand.core.tracing import Tracer
from shelfhand.knowledge.types import SearchOptions
from shelfhand.testing import ScriptedModel, text, tool_call
from support.knowledge import sample_kb
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
GLOBEX = UserContext(tenant_id="globex", user_id="bob", roles=["user"])


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path_factory.mktemp("spans")) as base:
        yield base


@pytest.mark.parametrize("query", ["整机保修期", "How long is the warranty?"])
def test_a_search_counts_its_candidates_stage_by_stage(kb: KnowledgeBase, query: str) -> None:
    result = kb.search_result(query, k=3, user=ACME)
    counts = result.counts
    assert counts.keyword > 0 and counts.vector > 0
    # fusion takes each chunk once: at least either side, at most both
    assert max(counts.keyword, counts.vector) <= counts.fused <= counts.keyword + counts.vector
    assert counts.relevant <= counts.fused
    assert counts.returned == len(result.hits) <= 3
    assert counts.rerank_candidates is None  # no reranker


@pytest.mark.parametrize("query", ["保修 火箭 香蕉", "warranty for rockets and bananas"])
def test_the_threshold_count_shows_what_min_relevance_dropped(
    kb: KnowledgeBase, query: str
) -> None:
    """A query half about the documents: most fused candidates are too weak for 0.6."""
    keep_all = kb.search_result(query, k=3, user=ACME, options=SearchOptions(min_relevance=0))
    strict = kb.search_result(query, k=3, user=ACME, options=SearchOptions(min_relevance=0.6))
    assert keep_all.counts.relevant == keep_all.counts.fused > 3
    assert strict.counts.fused == keep_all.counts.fused
    assert strict.counts.relevant < 3 and strict.counts.returned == strict.counts.relevant


def test_another_tenant_has_no_candidates(kb: KnowledgeBase) -> None:
    counts = kb.search_result("整机保修期", k=3, user=GLOBEX).counts
    assert (counts.keyword, counts.vector, counts.fused, counts.returned) == (0, 0, 0, 0)


async def test_the_spans_carry_the_counts_and_the_conflicting_passages(
    kb: KnowledgeBase,
) -> None:
    spans = ListProcessor()
    tracer = Tracer([spans])
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "整机保修期", "top_k": 5}), text("24 个月 [2]。")]
    )
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]))
    with tracer.root("turn", trace_id="1" * 32, tenant_id="acme", user_id="alice"):
        result = await agent.run("整机保修期多久？", context=ACME)

    (call,) = spans.named("execute_tool retrieve")
    (retrieval,) = spans.children(call)
    a = retrieval.attributes
    assert a["shelfhand.retrieval.candidates.keyword"] > 0
    assert a["shelfhand.retrieval.candidates.fused"] >= a["shelfhand.retrieval.candidates.relevant"]
    assert a["shelfhand.retrieval.candidates.returned"] == a["shelfhand.retrieval.hits"]
    assert "shelfhand.retrieval.candidates.reranked" not in a  # no reranker
    # scores to six places, timings to three, hits counted by the side that found them
    documents = a["gen_ai.retrieval.documents"]
    assert all(d["score"] == round(d["score"], 6) > 0 for d in documents)
    assert a["shelfhand.retrieval.total_ms"] == round(a["shelfhand.retrieval.total_ms"], 3) > 0
    assert a["shelfhand.retrieval.hits_by_keyword"] == sum(
        d["keyword_rank"] is not None for d in documents
    )
    # the two warranty versions disagree (12 vs 24 months): the call's span says which
    flagged = sorted({c.index for c in result.citations if c.conflicts_with})
    (conflict,) = call.attributes["shelfhand.retrieval.conflicts"]
    assert conflict["passages"] == flagged
    low, high = flagged
    assert conflict["note"].startswith(f"[{low}] 与 [{high}] 不一致：")  # asked in Chinese
    assert "12 个月" in conflict["note"] and "24 个月" in conflict["note"]


async def test_a_model_free_answer_records_the_conflicts_on_the_callers_span(
    kb: KnowledgeBase,
) -> None:
    spans = ListProcessor()
    tracer = Tracer([spans])
    with tracer.root("turn", trace_id="2" * 32, tenant_id="acme", user_id="alice") as turn:
        result = await KnowledgeAgent(kb, top_k=5).run("整机保修期多久？", context=ACME)
    flagged = sorted({c.index for c in result.citations if c.conflicts_with})
    assert len(flagged) == 2
    (conflict,) = turn.attributes["shelfhand.retrieval.conflicts"]
    assert conflict["passages"] == flagged
