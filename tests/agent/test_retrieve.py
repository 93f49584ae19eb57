"""The ``retrieve`` tool and the knowledge agent over a real knowledge base."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from shelfhand import Agent, KnowledgeAgent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.retrieve import NOT_CONFIGURED, make_retrieve_tool
from shelfhand.knowledge import sample_corpus
from shelfhand.knowledge.retrieval.hybrid import MAX_QUERY_CHARS
from shelfhand.knowledge.types import SearchHit
from shelfhand.testing import ScriptedModel, hashing_router, text, tool_call
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
GLOBEX = UserContext(tenant_id="globex", user_id="u2", roles=["user"])


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path, hr_text="E-203 bonus table: secret.") as base:
        yield base


async def test_citations_from_retrieve_reach_the_run_result(kb: KnowledgeBase) -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "拆封 退货"}), text("拆封后 7 天内可退 [1]。")]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "拆封后还能退吗？", context=ACME
    )
    assert result.output == "拆封后 7 天内可退 [1]。"
    first = result.citations[0]
    assert first.index == 1
    assert first.source == "projector/returns-policy.md"
    assert first.title and first.text
    # the model read numbered passages
    passages = result.messages[2].tool_results[0].content
    assert passages.startswith("[1] ")


async def test_the_caller_identity_comes_from_the_context_not_the_arguments(
    kb: KnowledgeBase,
) -> None:
    # the model cannot pass a tenant: the schema has no such parameter and extra ones are refused
    schema = retrieve_tool(kb).schema()["function"]["parameters"]
    assert set(schema["properties"]) == {"query", "top_k"}
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "E-203", "tenant_id": "acme"}), text("ok")]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=GLOBEX
    )
    refused = result.messages[2].tool_results[0]
    assert refused.is_error and "tenant_id" in refused.content


async def test_another_tenant_and_untagged_roles_see_nothing_they_may_not_read(
    kb: KnowledgeBase,
) -> None:
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203", "top_k": 8}), text("ok")])
    other = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=GLOBEX
    )
    assert other.citations == ()
    assert "No relevant passages" in other.messages[2].tool_results[0].content

    model = ScriptedModel([tool_call("retrieve", {"query": "E-203 bonus", "top_k": 8}), text("ok")])
    plain = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=ACME
    )
    assert plain.citations and all(c.source != "hr/salaries.md" for c in plain.citations)

    hr = UserContext(tenant_id="acme", user_id="u3", roles=["hr"])
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203 bonus", "top_k": 8}), text("ok")])
    allowed = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=hr
    )
    assert any(c.source == "hr/salaries.md" for c in allowed.citations)


async def test_top_k_is_capped_at_eight(kb: KnowledgeBase) -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "投影仪 保修 退货 E-203", "top_k": 100}), text("ok")]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "everything", context=ACME
    )
    assert 0 < len(result.citations) <= 8


async def test_a_query_over_the_limit_is_refused_with_the_limit_named(kb: KnowledgeBase) -> None:
    # three 200 KB queries over MCP grew a server to 5 GB (embedding them)
    schema = retrieve_tool(kb).schema()["function"]["parameters"]
    assert schema["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
    model = ScriptedModel(
        [
            tool_call("retrieve", {"query": "E-203 " * 400}),  # 2,400 characters
            tool_call("retrieve", {"query": "E-203 " * 300}),
            text("ok"),
        ]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=ACME
    )
    refused = result.messages[2].tool_results[0]
    assert refused.is_error and str(MAX_QUERY_CHARS) in refused.content
    taken = result.messages[4].tool_results[0]
    assert not taken.is_error and "E-203" in taken.content


async def test_without_a_knowledge_base_retrieve_says_not_configured() -> None:
    model = ScriptedModel([tool_call("retrieve", {"query": "保修"}), text("没有知识库。")])
    result = await Agent(model=model, toolkit=Toolkit([make_retrieve_tool(None)])).run("保修？")
    res = result.messages[2].tool_results[0]
    assert res.content == NOT_CONFIGURED and not res.is_error
    assert result.output == "没有知识库。"


async def test_the_knowledge_agent_answers_with_cited_passages_and_no_model(
    kb: KnowledgeBase,
) -> None:
    result = await KnowledgeAgent(kb).run("E-203 是什么故障？", context=ACME)
    assert result.citations[0].source == "projector/troubleshooting-manual.pdf"
    assert result.citations[0].page == 2
    assert result.output.startswith("[1] ")
    assert "灯泡过热" in result.output
    # one search, no model: what its usage says (the ledger books it so)
    assert (result.usage.retrievals, result.usage.model_calls, result.usage.tool_calls) == (1, 0, 0)
    extractive = await KnowledgeAgent(kb, extractive=True).run("E-203 是什么故障？", context=ACME)
    assert extractive.extractive and extractive.usage.retrievals == 1


async def test_a_document_ingested_between_two_calls_is_found_by_the_second(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    kit = Toolkit([retrieve_tool(kb)])
    script = [tool_call("retrieve", {"query": "Z-999 firmware"}), text("a")] * 2
    agent = Agent(model=ScriptedModel(script), toolkit=kit)
    before = await agent.run("Z-999?", context=ACME)
    assert all("Z-999" not in c.text for c in before.citations)
    new = tmp_path / "new"
    new.mkdir()
    (new / "firmware.md").write_text(
        "# Firmware\n\nZ-999 means the firmware update failed.", encoding="utf-8"
    )
    kb.ingest([new], tenant_id="acme")
    after = await agent.run("Z-999?", context=ACME)
    assert after.citations[0].source == "new/firmware.md"


class SlowReranker:
    """Ranks in reverse after ``seconds``, within its own ``timeout``."""

    name = "slow"

    def __init__(self, seconds: float, timeout: float) -> None:
        self.seconds = seconds
        self.timeout = timeout

    def rerank(self, query: str, hits: Sequence[SearchHit], top_n: int) -> list[SearchHit]:
        time.sleep(self.seconds)
        return list(reversed(hits))[:top_n]


async def test_the_tool_waits_for_a_ranking_within_the_rerankers_own_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranking slower than the tool's base deadline, within the reranker's timeout, ends in
    passages: not in a timed-out call that the model answers with another search (seen with
    a local model, rerank_timeout 60 against the tool's 30 s: two rankings a question)."""
    monkeypatch.setattr("shelfhand.agent.retrieve.RETRIEVE_TIMEOUT", 0.3)
    base = KnowledgeBase(
        tmp_path / "ws", hashing_router(), reranker=SlowReranker(seconds=0.6, timeout=2.0)
    )
    with base as kb:
        kb.ingest([sample_corpus()], tenant_id="acme")
        assert kb.rerank_timeout == 2.0
        tool = make_retrieve_tool(kb)
        assert tool.timeout == pytest.approx(2.3)
        model = ScriptedModel([tool_call("retrieve", {"query": "拆封 退货"}), text("[1]")])
        result = await Agent(model=model, toolkit=Toolkit([tool])).run("退货？", context=ACME)
    (found,) = result.messages[2].tool_results
    assert not found.is_error, found.content
    assert found.content.startswith("[1] ")
    assert make_retrieve_tool(None).timeout == pytest.approx(0.3)
