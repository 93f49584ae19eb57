"""After a model: the passages a turn's up-front search found for the question as typed are
the search's for it, so an English one the search found for a Chinese question the model
declined answers it, as without a model (tests/agent/test_extractive_across.py); not when the
model searched with words of its own, nor in place of an answer the model wrote."""

from __future__ import annotations

from typing import Any

import pytest

from shelfhand import Agent, Toolkit
from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.agent.rewrite import QueryRewriter
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.knowledge.types import Chunk, SearchHit
from shelfhand.testing import ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

QUESTION = "工单附件保存多久？"
ENGLISH = "Support tickets and their attachments are kept for 2 years after the ticket is closed."
DECLINE = "抱歉，文档中没有相关信息。"


class RetentionPolicy:
    """A search that finds the retention policy's English passage, by its meaning (the bridge
    space), at relevance 0.3."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def search(self, query: str, *, k: int = 5, user: UserContext | None = None) -> list[SearchHit]:
        self.queries.append(query)
        chunk = Chunk(
            chunk_id="r::0",
            doc_id="r",
            chunk_index=0,
            text=ENGLISH,
            title="Data retention",
            section_path=("Data retention", "Support tickets"),
            page=None,
            source="retention.md",
            start=0,
            end=len(ENGLISH),
            content_hash="h",
            doc_type="text",
        )
        return [SearchHit(chunk=chunk, score=1.0, relevance=0.3)]


def agent(replies: list[Any], retrieval: Any) -> Agent:
    return Agent(
        model=ScriptedModel(replies),
        toolkit=Toolkit([make_retrieve_tool(RetentionPolicy())]),
        retrieval=retrieval,
        answer_check=AnswerCheck(),
    )


@pytest.mark.parametrize("retrieval", ["context", "both"])
async def test_a_declined_chinese_question_is_answered_from_the_english_passage(
    retrieval: Any,
) -> None:
    result = await agent([text(DECLINE)], retrieval).run(QUESTION)
    assert result.extractive and result.fallback_reason == "refusal"
    assert result.output.splitlines() == ["摘自文档：", f"- {ENGLISH} [1]"]
    assert result.messages[-1].text == result.output  # the conversation remembers it


async def test_not_when_the_model_searched_with_words_of_its_own() -> None:
    """The passages of a model's own search have its query's relevance, not the question's."""
    replies = [tool_call("retrieve", {"query": "attachment retention"}), text(DECLINE)]
    result = await agent(replies, "tool").run(QUESTION)
    assert not result.extractive and "2 years" not in result.output


async def test_not_with_the_question_rewritten_from_the_conversation() -> None:
    history = [Message.user("客服工单怎么提交？"), Message.assistant("在客服系统中提交 [1]。")]
    model = ScriptedModel([text("客服工单 附件 保存期限"), text(DECLINE)])

    rewritten = Agent(
        model=model,
        toolkit=Toolkit([make_retrieve_tool(RetentionPolicy())]),
        retrieval="context",
        rewriter=QueryRewriter(model),
        answer_check=AnswerCheck(),
    )
    result = await rewritten.run("那附件呢？", history=history)
    assert not result.extractive and "2 years" not in result.output


async def test_an_answer_the_model_wrote_from_it_stands() -> None:
    """A Chinese answer from the English passage cannot be compared with it word for word; it
    is not replaced by the passage (flagged as before)."""
    result = await agent([text("工单附件在工单关闭后保存两年 [1]。")], "context").run(QUESTION)
    assert not result.extractive and result.output == "工单附件在工单关闭后保存两年 [1]。"
