"""What shelfhand itself writes in an answer (the extractive answer's lead line, "the
documents do not cover this") is in the language the question is asked in."""

from __future__ import annotations

import pytest

from shelfhand.agent.answer_check import (
    REASONS_ZH,
    WITHDRAWN_NOTICE,
    WITHDRAWN_NOTICE_ZH,
    poses_as_quoted,
    replacement_notice,
    withdrawal_notice,
)
from shelfhand.agent.extractive import LEAD, LEAD_ZH, extractive_answer
from shelfhand.agent.fallbacks import NOT_COVERED, NOT_COVERED_ZH, in_chinese, not_covered
from shelfhand.agent.streaming import REPETITION_NOTICE, REPETITION_NOTICE_ZH, withdrawn_rounds
from shelfhand.cli.answers import REASONS
from shelfhand.core.events import TextWithdrawn
from shelfhand.core.messages import Citation
from shelfhand.evals.answers import says_not_found
from shelfhand.service.completions import replaced_notice, sources_text

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
        # a Chinese question about a product named in English: the names' letters not counted
        ("Lumen X1 Pro 多少钱？", True),
        ("Lumen X1 Pro 支持 HDR 吗？", True),
        ("How long is the 保修期 of Lumen X1 Pro?", False),
        ("Is the 明光 Lumen X1 Pro in stock?", False),
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


MANUAL = Citation(
    index=1,
    source="manual.pdf",
    text=(
        "E-203 Lamp overheating / 灯泡过热\nThe lamp temperature is above the safe limit. "
        "Wait 30 minutes until the lamp has cooled down.\n"
        "灯泡过热（E-203）：灯泡温度超过安全上限。等待 30 分钟让灯泡冷却。"
    ),
)


@pytest.mark.parametrize(
    ("question", "first", "absent"),
    [
        ("E-203 是什么故障？", "灯泡过热（E-203）", "The lamp temperature"),
        ("What does error code E-203 mean?", "E-203 Lamp overheating", "灯泡温度超过"),
    ],
)
def test_a_passage_in_both_languages_is_quoted_in_the_question_s(
    question: str, first: str, absent: str
) -> None:
    found = extractive_answer(question, [MANUAL])

    assert found is not None
    # (after the entry's heading, "E-203 Lamp overheating / 灯泡过热", which is in both)
    lines = found.text.splitlines()[1:3]
    assert any(line.startswith(f"- {first}") for line in lines) and absent not in found.text


def test_what_a_stream_tells_people_is_in_the_question_s_language() -> None:
    assert replacement_notice("off_topic", "E-203 是什么故障？") == (
        "上面的回答经与文档核对后已被替换（回答的不是所问的内容）"
    )
    assert replacement_notice("off_topic", "What is E-203?") == (
        "The answer above was replaced after checking it against the documents "
        "(the model's answer was about something the question did not ask)"
    )
    assert withdrawal_notice("保修期多久？") == WITHDRAWN_NOTICE_ZH
    assert withdrawal_notice("How long is the warranty?") == WITHDRAWN_NOTICE
    (zh,) = withdrawn_rounds(
        ["保修 12 个月。保修 12 个月。"],
        "保修 12 个月。保修 12 个月。",
        "保修 12 个月。",
        "保修期多久？",
    )
    (en,) = withdrawn_rounds(
        ["12 months. 12 months."], "12 months. 12 months.", "12 months.", "How long?"
    )
    assert isinstance(zh, TextWithdrawn) and zh.notice == REPETITION_NOTICE_ZH
    assert isinstance(en, TextWithdrawn) and en.notice == REPETITION_NOTICE


def test_every_reason_an_answer_is_replaced_for_has_chinese_words() -> None:
    assert set(REASONS) <= set(REASONS_ZH)


def test_an_append_only_stream_says_it_in_the_answer_s_language() -> None:
    zh = {"type": "answer_replaced", "notice": replacement_notice("ungrounded", "保修期多久？")}
    en = {"type": "answer_replaced", "notice": replacement_notice("ungrounded", "How long?")}
    assert replaced_notice(zh, "保修 36 个月。").endswith("（文档不支持这个回答）：\n\n")
    assert replaced_notice(en, "36 months.").endswith(
        "(the model's answer was not supported by the passages):\n\n"
    )
    assert sources_text([LAMP], "灯泡过热 [1]。").startswith("\n\n来源：\n[1] ")
    assert sources_text([LAMP], "The lamp is overheating [1].").startswith("\n\nSources:\n[1] ")
