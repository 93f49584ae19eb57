"""A sentence naming the code the question asks about must rest on a passage about that code:
a manual's entry for another code says the same kind of thing (switch off, wait, replace a
part), and the question's code, which every passage was taken to hold, carried such a
sentence through the check."""

from __future__ import annotations

import asyncio

from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult

E203 = Citation(
    index=1,
    source="manual.pdf",
    text=(
        "灯泡过热（E-203）：灯泡温度超过安全上限，常见原因是防尘网堵塞。请不要在风扇运转时拔掉电源；"
        "等待 30 分钟让灯泡冷却；清洁防尘网。如果一小时内再次出现 E-203，请停止使用并联系售后检测。"
    ),
)
E105 = Citation(
    index=2,
    source="manual.pdf",
    text=(
        "请关机并拔下电源，检查进风口和出风口是否被遮挡，5 分钟后重新开机。如果仍然显示 E-105，"
        "需要更换风扇，请联系售后申请保修。"
    ),
)
GENERAL = Citation(
    index=3,
    source="manual.pdf",
    text="联系售后时请提供订单号、机身序列号和错误代码。",
)
QUESTION = "E-203 怎么修？"
# Qwen2.5-Coder-0.5B's answer, word for word: E-105's steps under E-203
ANSWER = (
    "E-203 的维修步骤如下：\n\n"
    "1. 关机并拔下电源，检查进风口和出风口是否被遮挡，5 分钟后重新开机。\n"
    "2. 如果 E-203 返回，需要更换风扇，请联系售后申请保修。\n\n"
    "E-203 的故障代码是 E-105，风扇故障需要更换。"
)


def test_a_sentence_telling_another_code_s_entry_under_the_asked_code_is_unsupported() -> None:
    found = check_grounding(ANSWER, [E203, E105, GENERAL], question=QUESTION)

    told = next(s for s in found.sentences if "返回" in s.text)
    assert not told.supported and told.passage == 2 and "e203" in told.misplaced


def test_the_answer_is_replaced_by_the_asked_code_s_entry() -> None:
    citations = (E203, E105, GENERAL)
    result = RunResult(
        output=ANSWER,
        messages=(Message.user(QUESTION), Message.assistant(ANSWER, citations=citations)),
        citations=citations,
    )
    checked = AnswerCheck().apply(result, QUESTION)

    assert checked.fallback_reason == "ungrounded", checked.output
    assert "30 分钟" in checked.output and "E-105" not in checked.output


def test_a_sentence_on_the_asked_code_s_own_entry_or_a_general_passage_stands() -> None:
    own = check_grounding(
        "如果一小时内再次出现 E-203，请停止使用并联系售后检测。", [E203, E105], question=QUESTION
    )
    assert own.grounded
    # a passage naming no code of its own (general advice, or a chunk of the entry) is fine
    general = check_grounding(
        "联系售后时请提供订单号、机身序列号和错误代码 E-203。", [E203, GENERAL], question=QUESTION
    )
    assert general.grounded
    # no passage holds the code asked about: nothing better to rest on
    alone = check_grounding(
        "如果仍然显示 E-203，需要更换风扇，请联系售后申请保修。", [E105], question=QUESTION
    )
    assert alone.sentences[0].misplaced == ()


def test_concurrent_checks_of_two_codes_each_rest_on_their_own_entry() -> None:
    async def both() -> list[bool]:
        async def one(question: str, answer: str) -> bool:
            await asyncio.sleep(0)
            found = await asyncio.to_thread(
                check_grounding, answer, [E203, E105], question=question
            )
            return found.grounded

        return await asyncio.gather(
            one("E-203 怎么修？", "如果 E-203 返回，需要更换风扇，请联系售后申请保修。"),
            one("E-105 怎么修？", "如果仍然显示 E-105，需要更换风扇，请联系售后申请保修。"),
        )

    assert asyncio.run(both()) == [False, True]
