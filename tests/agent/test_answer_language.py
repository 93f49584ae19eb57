"""What shelfhand itself writes in an answer (the extractive answer's lead line, "the
documents do not cover this") is in the language the question is asked in."""

from __future__ import annotations

import pytest

from shelfhand.agent.answer_check import poses_as_quoted
from shelfhand.agent.extractive import LEAD, LEAD_ZH, extractive_answer
from shelfhand.agent.fallbacks import NOT_COVERED, NOT_COVERED_ZH, in_chinese, not_covered
from shelfhand.core.messages import Citation
from shelfhand.evals.answers import says_not_found

LAMP = Citation(
    index=1,
    source="manual.md",
    text="E-203 Lamp overheating / 灯泡过热. The lamp temperature is above the safe limit.",
)


@pytest.mark.parametrize(
    ("question", "chinese"),
    [
        ("E-203 是什么故障？", True),
        ("Lumen X1 的亮度是多少？", True),
        ("保修期多久", True),
        ("What does E-203 mean?", False),
        ("Is 年假 paid?", False),
        ("What does 灯泡过热 mean?", False),
        ("E-203?", False),
        ("", False),
    ],
)
def test_a_question_is_chinese_when_a_third_of_its_letters_are(
    question: str, chinese: bool
) -> None:
    assert in_chinese(question) is chinese
    assert not_covered(question) == (NOT_COVERED_ZH if chinese else NOT_COVERED)


@pytest.mark.parametrize(
    ("question", "lead"), [("E-203 是什么故障？", LEAD_ZH), ("What is E-203?", LEAD)]
)
def test_the_extractive_answer_leads_in_the_question_s_language(question: str, lead: str) -> None:
    found = extractive_answer(question, [LAMP])

    assert found is not None and found.text.splitlines()[0] == lead and "E-203" in found.text


@pytest.mark.parametrize("lead", [LEAD, LEAD_ZH])
def test_a_model_answer_opening_with_either_lead_poses_as_quoted(lead: str) -> None:
    assert poses_as_quoted(f"  {lead}\n- 保修维修需要 6 个月 [1]")
    assert not poses_as_quoted(f"保修维修需要 6 个月 [1]。{lead}")


@pytest.mark.parametrize("text", [NOT_COVERED, NOT_COVERED_ZH])
def test_the_eval_counts_either_language_as_not_found(text: str) -> None:
    assert says_not_found(text)
