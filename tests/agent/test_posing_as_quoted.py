"""A model's answer that opens with the extractive answer's lead line ("From the documents:")
would pass its own words off as the documents' sentences: the answer check replaces it by
the passages' sentences. A scripted model in a conversation with memory, over the samples."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck, poses_as_quoted
from shelfhand.agent.extractive import LEAD
from shelfhand.agent.memory import ConversationMemory
from shelfhand.testing import ScriptedModel, text
from support.knowledge import sample_kb

X1_PRO_PRICE = "What is the list price of the Lumen X1 Pro?"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path_factory.mktemp("kb")) as base:
        yield base


@pytest.mark.parametrize(
    ("answer", "poses"),
    [
        ("From the documents:\n- 保修 24 个月。", True),
        ("  from the documents: the warranty is 24 months.", True),
        ("The warranty is 24 months, from the documents [1].", False),
        ("根据文档，保修 24 个月。", False),
    ],
)
def test_only_an_answer_opening_with_the_lead_line_poses_as_quoted(
    answer: str, poses: bool
) -> None:
    assert poses_as_quoted(answer) is poses


@pytest.mark.anyio
async def test_a_model_answer_posing_as_the_documents_sentences_is_replaced(
    kb: KnowledgeBase,
) -> None:
    # in a chat whose earlier answer was extractive, the local model opened its own answer
    # with the extractive lead line: its words would read as the documents' sentences
    agent = Agent(
        model=ScriptedModel(
            [
                text("The list price of the Lumen X1 Pro is 3,999 CNY."),
                text("From the documents:\n- 保修维修需要 6 个月或累计使用 1000 小时。"),
            ]
        ),
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=AnswerCheck(scaffolds=AGENT_SCAFFOLDS),
        memory=ConversationMemory(),
    )
    alice = UserContext(tenant_id="acme", user_id="u1")
    first = await agent.run(X1_PRO_PRICE, context=alice)
    assert first.extractive and first.output.startswith(LEAD)

    second = await agent.run("保修维修需要多长时间？", context=alice)

    assert second.fallback_reason == "posed_as_quoted" and second.extractive
    assert "保修维修需要 6 个月" not in second.output
