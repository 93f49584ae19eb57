"""The grounding check reads prose by its sentences: a number with its unit ("3 天") that the
passages state only in a sentence about something else, while the sentence about what the
answer names states another amount of that unit, is said of another thing ("产假的天数是 3
天。" over "享有婚假 3 天。女员工生育享受 158 天产假。", Qwen2.5-Coder-0.5B). Chinese and
English, and the answer check's fallback end to end."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.extractive import LEAD_ZH
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.core.messages import Citation
from shelfhand.testing import ScriptedModel, hashing_router, text, tool_call
from support.answers import CHECK

LEAVE = Citation(
    index=1,
    source="hr.md",
    title="员工手册",
    section="员工手册 > 婚假与产假",
    text="员工依法办理结婚登记的，享有婚假 3 天。女员工生育享受 158 天产假。",
)
WARRANTY = Citation(
    index=1,
    source="warranty.md",
    text="2025 年 1 月 1 日及之后购买的投影仪，整机保修期为自购买之日起 24 个月。"
    "光源保修 6 个月或累计使用 1000 小时，以先到者为准。",
)
RETURNS = Citation(
    index=1,
    source="returns.md",
    text="Unopened items can be returned within 30 days of delivery. "
    "Refunds are issued within 7 days after the returned item is inspected.",
)


def said_of_another(answer: str, passage: Citation) -> tuple[str, ...]:
    (sentence,) = check_grounding(answer, [passage]).sentences
    assert sentence.supported == (not sentence.misplaced and not sentence.missing)
    return sentence.misplaced


@pytest.mark.parametrize(
    ("answer", "passage", "number"),
    [
        ("产假的天数是 3 天。", LEAVE, "3"),
        ("女员工享有 3 天产假 [1]。", LEAVE, "3"),
        ("整机保修期为 6 个月 [1]。", WARRANTY, "6"),
        ("光源保修 24 个月。", WARRANTY, "24"),
        ("Refunds are issued within 30 days.", RETURNS, "30"),
    ],
)
def test_a_number_said_of_another_thing_is_misplaced(
    answer: str, passage: Citation, number: str
) -> None:
    assert said_of_another(answer, passage) == (number,)


@pytest.mark.parametrize(
    ("answer", "passage"),
    [
        ("产假是 158 天。", LEAVE),
        ("婚假 3 天 [1]。", LEAVE),
        ("产假 158 天，婚假 3 天。", LEAVE),
        ("整机保修 24 个月，光源保修 6 个月 [1]。", WARRANTY),
        ("Unopened items can be returned within 30 days [1].", RETURNS),
        ("You have 30 days to send an unopened item back.", RETURNS),  # no rival names it
        ("3 天。", LEAVE),  # names nothing: left to the other checks
    ],
)
def test_a_number_said_of_what_its_sentence_is_about_is_not(answer: str, passage: Citation) -> None:
    assert said_of_another(answer, passage) == ()


def test_the_question_s_own_number_is_not_checked() -> None:
    grounding = check_grounding("产假不是 3 天。", [LEAVE], question="产假是 3 天吗？")
    assert grounding.sentences[0].misplaced == ()


@pytest.mark.anyio
async def test_the_answer_check_replaces_it_with_the_sentence_about_what_was_asked(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "hr.md").write_text(
        "# 员工手册\n\n## 婚假与产假\n\n" + LEAVE.text, encoding="utf-8"
    )
    question = "产假多少天？"
    with KnowledgeBase(tmp_path / "ws", hashing_router()) as kb:
        kb.ingest([tmp_path / "docs"], tenant_id="acme")
        agent = Agent(
            model=ScriptedModel(
                [
                    tool_call("retrieve", {"query": question}),
                    text("根据查询结果，产假的天数是 3 天。"),
                ]
            ),
            toolkit=Toolkit([retrieve_tool(kb)]),
            retrieval="context",
            answer_check=CHECK,
        )
        result = await agent.run(question, context=UserContext(tenant_id="acme", user_id="u1"))

    assert result.fallback_reason == "ungrounded" and result.extractive
    assert result.output.startswith(LEAD_ZH) and "158 天产假" in result.output


ONCALL = Citation(
    index=1,
    source="oncall.md",
    title="值班与事故处理规范",
    section="值班与事故处理规范 > 值班安排",
    text="每个值班周期由一名主值班和一名副值班组成，主值班须在 15 分钟内响应告警。"
    "值班期间外出不得超过 30 分钟车程。",
)
LEVELS = Citation(
    index=2,
    source="oncall.md",
    title="值班与事故处理规范",
    section="值班与事故处理规范 > 事故等级",
    text="P0：核心业务全部不可用。须在 5 分钟内响应，1 小时内恢复。",
)
ON_CALL_QUESTION = "值班多久要响应告警？"


def misplaced_for(answer: str, question: str, passages: list[Citation]) -> set[str]:
    """The numbers of ``answer`` found said of another thing, in any of its sentences."""
    checked = check_grounding(answer, passages, question=question).sentences
    return {number for s in checked for number in s.misplaced}


def test_an_amount_the_question_s_own_sentence_states_otherwise_is_misplaced() -> None:
    """Copied word for word from the incident levels (Qwen2.5-Coder-0.5B): every word of it is
    held, but the on-call rule's sentence holds what the question names (值班, 响应, 告警)."""
    answer = "The answer to the user's question is: 须在 5 分钟内响应，1 小时内恢复。"
    assert misplaced_for(answer, ON_CALL_QUESTION, [ONCALL, LEVELS]) == {"5"}
    # the sentence that answers it, and the same sentence for the question it answers
    answered = "主值班须在 15 分钟内响应告警。"
    assert misplaced_for(answered, ON_CALL_QUESTION, [ONCALL, LEVELS]) == set()
    assert misplaced_for(answer, "P0 事故多久要响应？", [ONCALL, LEVELS]) == set()
    # a question not asking how long or how much is left to the other checks
    assert misplaced_for(answer, "值班要响应告警吗？", [ONCALL, LEVELS]) == set()


def test_the_sentences_around_the_answer_are_not() -> None:
    """The extractive answer quotes the sentence stating 15 分钟 and the one after it (30 分钟
    of 车程): the answer states the rival amount itself. A sentence naming nothing the
    question names (晚婚另加 7 天) tells more than was asked."""
    quoted = "主值班须在 15 分钟内响应告警。值班期间外出不得超过 30 分钟车程。"
    assert misplaced_for(quoted, ON_CALL_QUESTION, [ONCALL, LEVELS]) == set()
    leave = Citation(index=1, source="hr.md", text="享有婚假 3 天；晚婚另加 7 天。产假 158 天。")
    assert misplaced_for("婚假 3 天；晚婚另加 7 天。", "婚假有几天？", [leave]) == set()


def test_a_version_that_disagrees_is_not_a_rival() -> None:
    """Two versions of a policy state their own amounts; the conflict note says which is
    newer, and the older one's sentence is not said of another thing."""
    old = Citation(
        index=1, source="warranty-v1.md", text="整机保修期为自购买之日起 12 个月。",
        conflicts_with=(2,),
    )  # fmt: skip
    new = Citation(
        index=2, source="warranty-v2.md",
        text="2025 年 1 月 1 日及之后购买的投影仪，整机保修期为自购买之日起 24 个月。",
        conflicts_with=(1,),
    )  # fmt: skip
    question = "投影仪的保修期是多久？"
    assert misplaced_for("整机保修期为自购买之日起 12 个月。", question, [old, new]) == set()
    apart = [replace(old, conflicts_with=()), replace(new, conflicts_with=())]
    assert misplaced_for("整机保修期为自购买之日起 12 个月。", question, apart) == {"12"}


def test_a_rival_that_times_another_doing_is_not_one() -> None:
    """ "P0 事故多久要恢复？": the incident levels give the time within which it is restored ("1
    小时内恢复"); the postmortem rule names P0, 事故 and 恢复 too, but its 24 小时 is the time to
    hand in a report after the restoring. A rival that gives the time of the doing asked
    about still counts."""
    levels = Citation(
        index=1, source="oncall.md", section="值班与事故处理规范 > 事故等级",
        text="P0：核心业务全部不可用。须在 5 分钟内响应，1 小时内恢复。",
    )  # fmt: skip
    review = Citation(
        index=2, source="oncall.md", section="值班与事故处理规范 > 复盘",
        text="P0 事故须在恢复后 24 小时内提交复盘报告。",
    )  # fmt: skip
    question = "P0 事故多久要恢复？"
    assert misplaced_for("P0 事故须在 1 小时内恢复。", question, [levels, review]) == set()
    rival = replace(review, text="P0 事故须在 2 小时内完成恢复并通报。")
    assert misplaced_for("P0 事故须在 1 小时内恢复。", question, [levels, rival]) == {"1"}


def test_a_duration_that_is_not_the_time_of_the_doing_asked_about_is_misplaced() -> None:
    """ "保修维修需要多长时间？" answered with the warranty period, copied word for word
    (Qwen2.5-Coder-0.5B): the policy gives the time within which repairs are done, 7 个工作日,
    and 12 个月 is not it. The sentence giving that time, or an answer stating it too, is
    fine; so is any duration when no passage times the doing."""
    period = Citation(
        index=1, source="warranty.md", section="保修政策 > 保修期",
        text="整机保修期为自购买之日（以发票或订单日期为准）起 12 个月。",
    )  # fmt: skip
    repairs = Citation(
        index=2, source="warranty.md", section="保修政策 > 维修时效",
        text="我们在收到产品后 7 个工作日内完成检测和维修。",
    )  # fmt: skip
    question = "保修维修需要多长时间？"
    copied = "整机保修期为自购买之日（以发票或订单日期为准）起 12 个月。"
    assert misplaced_for(copied, question, [period, repairs]) == {"12"}
    assert misplaced_for(repairs.text, question, [period, repairs]) == set()
    both = "整机保修期为 12 个月，维修在 7 个工作日内完成。"
    assert misplaced_for(both, question, [period, repairs]) == set()
    assert misplaced_for(copied, question, [period]) == set()
    assert misplaced_for(copied, "保修期有多长？", [period, repairs]) == set()


def test_the_time_of_a_doing_is_read_within_its_clause() -> None:
    """ "紧急工单多久要响应？" answered "4 小时内给出解决方案。", copied from the sentence whose first
    clause gives the time of the response, "30 分钟内首次响应" (Qwen2.5-Coder-0.5B,
    bench/handbooks/support t4). The asking for a return counts in its clause: "30 天内可申请无
    理由退货" is the time of 退货."""
    levels = Citation(
        index=1, source="service.md", section="客服服务规范 > 工单优先级",
        text="紧急：影响客户正常营业的故障。客服须在 30 分钟内首次响应，4 小时内给出解决方案。",
    )  # fmt: skip
    assert misplaced_for("4 小时内给出解决方案。", "紧急工单多久要响应？", [levels]) == {"4"}
    assert misplaced_for("客服须在 30 分钟内首次响应。", "紧急工单多久要响应？", [levels]) == set()
    returns = Citation(
        index=1, source="returns.md",
        text="未拆封的商品，自签收之日起 30 天内可申请无理由退货。已拆封的商品，7 天内可申请退货。",
    )  # fmt: skip
    unopened = "未拆封的商品自签收之日起 30 天内可申请无理由退货。"
    assert misplaced_for(unopened, "未拆封的商品多少天内可以退货？", [returns]) == set()
