"""A Chinese word jieba's dictionary lacks (年假, 工牌) is cut into characters when texts are
compared; the extractive answer counts it as one word, held only by a passage that holds it
whole. Before, "公司的年假政策是什么？" quoted the warranty policy: its "2025 年" and "政策" held
half the question's words."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shelfhand import KnowledgeBase, UserContext
from shelfhand.agent.extractive import ASKING, LEAD_ZH, extractive_answer
from shelfhand.agent.fallbacks import NOT_COVERED_ZH
from shelfhand.agent.retrieve import KnowledgeAgent
from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import unknown_words
from support.knowledge import sample_kb

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
POLICY = Citation(
    index=1,
    source="warranty-policy.md",
    title="保修政策",
    text="2025 年 1 月 1 日及之后购买的投影仪，整机保修期为 24 个月。本政策自发布之日起执行。",
)
LEAVE = Citation(
    index=2,
    source="handbook.md",
    title="员工手册",
    text="员工入职满一年后享有 5 天带薪年假，年假政策以人事部公告为准。",
)


@pytest.mark.parametrize(
    ("question", "wholes"),
    [
        ("公司的年假政策是什么？", ["年假"]),
        ("工牌丢了怎么办？", ["工牌丢"]),
        ("E-203 是什么故障？", []),
        ("保修期多久？", []),
        ("Is 年假 paid?", ["年假"]),
        ("退款需要多长时间？", []),
    ],
)
def test_words_the_dictionary_lacks_are_found_whole(question: str, wholes: list[str]) -> None:
    assert unknown_words(question, dropped=ASKING) == wholes


def test_a_passage_holding_the_characters_apart_is_not_about_the_word() -> None:
    assert extractive_answer("公司的年假政策是什么？", [POLICY]) is None


def test_a_passage_holding_the_word_whole_answers() -> None:
    found = extractive_answer("公司的年假政策是什么？", [POLICY, LEAVE])

    assert found is not None and found.passages == (2,) and "5 天带薪年假" in found.text


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path_factory.mktemp("kb")) as base:
        yield base


@pytest.mark.parametrize("question", ["公司的年假政策是什么？", "工牌丢了怎么办？"])
def test_the_sample_documents_do_not_cover_annual_leave(kb: KnowledgeBase, question: str) -> None:
    assert kb.search("公司的年假政策是什么？", k=5, user=ACME)  # 政策, 年: the warranty policy

    text = KnowledgeAgent(kb, extractive=True).run_sync(question, context=ACME).output

    assert text == NOT_COVERED_ZH


def test_a_question_the_samples_cover_is_still_answered(kb: KnowledgeBase) -> None:
    text = KnowledgeAgent(kb, extractive=True).run_sync("保修期多久？", context=ACME).output

    assert text.startswith(LEAD_ZH) and "个月" in text
