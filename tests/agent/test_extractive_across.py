"""The extractive answer across the languages: a Chinese question whose passages hold none of
its words, but the search found an English one by its meaning (the bridge space of
USE-embedded English chunks), quotes that passage, only when the passages were searched for
the question itself (``across``) and the passage's relevance says the search found it."""

from __future__ import annotations

from shelfhand.agent.extractive import ACROSS_RELEVANCE, extractive_answer
from shelfhand.core.messages import Citation

QUESTION = "工单附件保存多久？"
ENGLISH = (
    "Support tickets matter to us. Their attachments are kept for 2 years after the ticket "
    "is closed. Ask the support lead for an export."
)


def passages(relevance: float | None) -> list[Citation]:
    return [
        Citation(index=1, source="rules.md", text="退货须在七天内申请。", relevance=0.6),
        Citation(index=2, source="retention.md", text=ENGLISH, relevance=relevance),
    ]


def test_a_chinese_question_quotes_the_english_passage_the_search_found() -> None:
    extract = extractive_answer(QUESTION, passages(0.3), across=True)
    assert extract is not None
    # an amount is asked: from the first sentence that gives a number
    assert extract.text.splitlines() == [
        "摘自文档：",
        "- Their attachments are kept for 2 years after the ticket is closed. [2]",
        "- Ask the support lead for an export. [2]",
    ]
    what = extractive_answer("工单附件有什么规定？", passages(0.3), across=True)
    assert what is not None and what.sentences[0] == ("Support tickets matter to us.", 2)


def test_not_without_the_search_relevance_or_across() -> None:
    assert extractive_answer(QUESTION, passages(0.3)) is None  # (a model's own searches)
    assert extractive_answer(QUESTION, passages(None), across=True) is None  # not searched
    weak = ACROSS_RELEVANCE - 0.01
    assert extractive_answer(QUESTION, passages(weak), across=True) is None


def test_not_for_an_english_question_nor_one_naming_an_identifier() -> None:
    chinese = [Citation(index=1, source="rules.md", text="附件保存两年。", relevance=0.6)]
    assert extractive_answer("How long are attachments kept?", chinese, across=True) is None
    assert extractive_answer("E-203 工单附件保存多久？", passages(0.3), across=True) is None


def test_a_passage_holding_the_words_is_quoted_as_before() -> None:
    held = [
        Citation(index=1, source="rules.md", text="工单附件保存两年。", relevance=0.6),
        Citation(index=2, source="retention.md", text=ENGLISH, relevance=0.9),
    ]
    extract = extractive_answer(QUESTION, held, across=True)
    assert extract is not None and extract.sentences == (("工单附件保存两年。", 1),)
