"""What the retrieve tool and the agents make of the evidence: conflict flags, compression, and
an honest "the documents do not cover this" when nothing is found."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from shelfhand import Agent, KnowledgeAgent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.fallbacks import NOT_COVERED, NOT_COVERED_ZH, found_nothing
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.app import App
from shelfhand.core.messages import Citation, Message, ToolResultBlock
from shelfhand.core.settings import Settings
from shelfhand.knowledge.evidence.compress import GAP
from shelfhand.testing import ScriptedModel, text, tool_call
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
NOBODY = UserContext(tenant_id="elsewhere", user_id="u2", roles=["user"])


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    # keyword-only: "整机保修期" brings both warranty versions today, whatever fusion does
    with sample_kb(tmp_path_factory.mktemp("evidence"), vectors=False) as base:
        yield base


async def test_the_warranty_question_shows_both_versions_with_a_conflict_flag(
    kb: KnowledgeBase,
) -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "整机保修期", "top_k": 5}), text("24 个月 [3]。")]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "整机保修期多久？", context=ACME
    )
    (passages,) = result.messages[2].tool_results
    by_chunk = {c.chunk_id: c for c in result.citations}
    # the 保修期限 (warranty period) section of each version
    v1 = by_chunk["projector/warranty-policy-v1.md::1"]
    v2 = by_chunk["projector/warranty-policy-v2.md::1"]
    # both versions are there, flagged against each other, the newer one named
    assert v1.conflicts_with == (v2.index,) and v2.conflicts_with == (v1.index,)
    low, high = sorted((v1.index, v2.index))
    note = f"[{low}] 与 [{high}] 不一致："  # the question is in Chinese: so is the note
    assert note in v1.conflict_note and f"[{v2.index}] 较新（第 2 版" in v1.conflict_note
    # the model read the same flag after the passages
    assert f"注意：{note}" in passages.content
    assert passages.content.index("注意：") > passages.content.index(f"[{high}] ")
    assert "12 个月" in v1.conflict_note and "24 个月" in v1.conflict_note
    # and the flag survives the transcript's JSON
    assert Message.from_json(result.messages[2].to_json()).citations == passages.citations


async def test_passages_that_agree_carry_no_flag(kb: KnowledgeBase) -> None:
    model = ScriptedModel(
        # top 3: the manual and the FAQ on E-203 (different numbers, one subject each); a
        # top 5 brings both warranty versions too, which rightly disagree
        [tool_call("retrieve", {"query": "E-203 灯泡过热", "top_k": 3}), text("ok")]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "E-203?", context=ACME
    )
    assert result.citations
    assert all(c.conflicts_with == () and c.conflict_note == "" for c in result.citations)
    assert "Note:" not in result.messages[2].tool_results[0].content


async def test_a_second_retrieval_is_checked_against_the_first(kb: KnowledgeBase) -> None:
    # the first call sees only one version (top 1); the second brings the other one
    model = ScriptedModel(
        [
            tool_call("retrieve", {"query": "整机保修期 12 个月", "top_k": 1}),
            tool_call("retrieve", {"query": "整机保修期 24 个月 2025", "top_k": 1}),
            text("ok"),
        ]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(
        "保修？", context=ACME
    )
    first = result.messages[2].tool_results[0].citations
    second = result.messages[4].tool_results[0].citations
    assert [c.source for c in first] == ["projector/warranty-policy-v1.md"]
    assert [c.source for c in second] == ["projector/warranty-policy-v2.md"]
    assert second[0].conflicts_with == (1,)
    assert (
        "注意：[1] 与 [2] 不一致：12 个月 vs 24 个月" in result.messages[4].tool_results[0].content
    )


async def test_compression_keeps_only_answering_sentences_with_valid_spans(
    kb: KnowledgeBase,
) -> None:
    tool = make_retrieve_tool(kb, compress_tokens=24)
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "E-203 灯泡过热", "top_k": 3}), text("ok")]
    )
    result = await Agent(model=model, toolkit=Toolkit([tool])).run("E-203?", context=ACME)
    compressed = [c for c in result.citations if c.spans]
    assert compressed
    for c in compressed:
        assert GAP in c.text
        assert c.start is not None and c.end is not None
        assert all(c.start <= s < e <= c.end for s, e in c.spans)
    assert GAP in result.messages[2].tool_results[0].content


async def test_the_knowledge_agent_flags_conflicts_and_says_when_nothing_is_found(
    kb: KnowledgeBase,
) -> None:
    agent = KnowledgeAgent(kb, top_k=5)
    found = await agent.run("整机保修期", context=ACME)
    assert "不一致：12 个月 vs 24 个月" in found.output
    nothing = await agent.run("整机保修期", context=NOBODY)
    assert nothing.citations == () and nothing.output == NOT_COVERED_ZH


async def test_with_nothing_found_the_model_is_told_to_say_so_and_a_blank_reply_says_it(
    kb: KnowledgeBase,
) -> None:
    model = ScriptedModel([text(""), text("")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="context")
    result = await agent.run("整机保修期多久？", context=NOBODY)
    shown = model.requests[0][-1].text
    assert "No relevant passages were found" in shown and "do not cover this" in shown
    assert result.stop_reason == "empty" and result.citations == ()
    assert result.output.startswith(NOT_COVERED)
    assert found_nothing(result.messages)


async def test_an_honest_not_covered_answer_passes_through(kb: KnowledgeBase) -> None:
    model = ScriptedModel([text("文档中没有相关内容。")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="both")
    result = await agent.run("火星上能用投影仪吗？", context=NOBODY)
    assert result.output == "文档中没有相关内容。" and result.citations == ()
    assert found_nothing(result.messages)


def test_found_nothing_needs_a_search_that_ran_and_found_nothing() -> None:
    empty = ToolResultBlock(call_id="1", name="retrieve", content="No relevant passages")
    assert found_nothing([Message.tool([empty])])
    assert not found_nothing([])  # nothing searched
    failed = replace(empty, is_error=True, content="timed out")
    assert not found_nothing([Message.tool([failed])])
    unconfigured = replace(empty, content="knowledge base not configured")
    assert not found_nothing([Message.tool([unconfigured])])
    other = replace(empty, name="calculator")
    assert not found_nothing([Message.tool([other])])
    passage = Citation(index=1, source="a.md", text="E-203")
    found = replace(empty, content="[1] a.md\nE-203", citations=(passage,))
    assert not found_nothing([Message.tool([empty]), Message.tool([found])])


async def test_the_compress_setting_reaches_the_retrieve_tool_and_the_knowledge_agent(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    on = App(settings=replace(Settings.load(tmp_path, env={}), compress=True, compress_tokens=24))
    assert on.knowledge_agent(kb).compress_tokens == 24
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203 灯泡过热"}), text("ok")])
    agent = Agent(model=model, toolkit=on.toolkit(kb, governed=False))
    result = await agent.run("E-203?", context=ACME)
    assert any(c.spans for c in result.citations)
    off = App(settings=Settings.load(tmp_path, env={}))
    assert off.knowledge_agent(kb).compress_tokens is None
