"""Two ways a small model's wrong answer passed the lexical check over Chinese encyclopedia
passages (Qwen2.5-Coder-0.5B over CMRC 2018; the fixtures are written after its answers):

- the question's words said again carried a claim no passage makes: "《安般守意经》论述了佛教的
  出家人制度。" holds the sutra's name and 论述 from the question, so half of its words were in the
  sutra's passage, which teaches watching the breath;
- a whole passage about something else, copied: a samurai's biography for a question about a
  game, which its passage (by its title and text) holds most of."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext
from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.answer_topic import rests_elsewhere
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult
from shelfhand.testing import FunctionModel

SUTRA_Q = "《安般守意经》论述了什么方法？"
SUTRA = Citation(
    index=1, source="wiki/sutra.md", title="安般守意经",
    text="《安般守意经》是东汉安世高所译的坐禅佛典，论述以观察呼吸作为修习禅定的方法。",
)  # fmt: skip
VINAYA = Citation(
    index=2, source="wiki/vinaya.md", title="律藏",
    text="律藏记载佛教出家人的生活制度与戒律，由历代僧团传承。",
)  # fmt: skip
GAME_Q = "《战国无双3》是由哪两个公司合作开发的？"
GAME = Citation(
    index=1, source="wiki/game.md", title="战国无双3",
    text="《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作，以三大故事为主轴。",
)  # fmt: skip
SAMURAI = Citation(
    index=2, source="wiki/samurai.md", title="阿部正丰",
    text="阿部正丰是日本战国时代的武将，三河松平氏家臣，阿部定吉的长子，通称弥七郎。",
)  # fmt: skip


def supported(answer: str, passages: list[Citation], question: str = SUTRA_Q) -> bool:
    return check_grounding(answer, passages, question=question).grounded


def test_a_claim_carried_by_the_question_s_words_is_not_supported() -> None:
    assert not supported("《安般守意经》论述了佛教的出家人制度。", [SUTRA])
    # what the passage says, in the answer's words
    assert supported("《安般守意经》论述了以观察呼吸修习禅定的方法 [1]。", [SUTRA])
    # a sentence telling one word of its own is read as before
    assert supported("《安般守意经》论述了观察呼吸。", [SUTRA])
    # with no question, the share of all its words, as before
    assert supported("《安般守意经》论述了佛教的出家人制度。", [SUTRA], question="")


def test_a_passage_telling_the_claim_but_not_enough_of_the_sentence_is_no_support() -> None:
    grounding = check_grounding(
        "《安般守意经》论述了佛教的出家人制度。", [SUTRA, VINAYA], question=SUTRA_Q
    )
    (sentence,) = grounding.sentences
    assert not sentence.supported and sentence.passage == 1  # its best passage, still shown
    # a passage telling it and holding enough of the sentence supports it
    assert supported("律藏记载佛教出家人的生活制度 [2]。", [SUTRA, VINAYA], "律藏记载什么？")


@pytest.mark.parametrize(
    ("answer", "elsewhere"),
    [(SAMURAI.text, True), ("《战国无双3》由光荣和ω-force开发 [1]。", False)],
    ids=["copied", "right"],
)
def test_a_passage_about_another_topic_copied_rests_elsewhere(answer: str, elsewhere: bool) -> None:
    # the game's passage holds five of the question's eight words, not all: a question
    # written from a passage rarely says all of it again
    grounding = check_grounding(answer, [GAME, SAMURAI], question=GAME_Q)
    assert grounding.grounded
    assert rests_elsewhere(GAME_Q, grounding, [GAME, SAMURAI]) is elsewhere


@pytest.mark.parametrize(
    ("question", "answer", "passages", "quoted"),
    [
        (SUTRA_Q, "《安般守意经》论述了佛教的出家人制度。", [SUTRA, VINAYA], "观察呼吸"),
        (GAME_Q, SAMURAI.text, [GAME, SAMURAI], "光荣和ω-force"),
    ],
    ids=["sutra", "game"],
)
def test_such_an_answer_becomes_the_passages_sentences(
    question: str, answer: str, passages: list[Citation], quoted: str, tmp_path: Path
) -> None:
    result = RunResult(
        output=answer,
        messages=(Message.user(question), Message.assistant(answer)),
        citations=tuple(passages),
    )
    checked = AnswerCheck().apply(result, question)

    assert checked.extractive and checked.fallback_reason in ("ungrounded", "off_topic")
    assert quoted in checked.output


FLAX_Q = "亚麻适宜生活在什么气候？"
FLAX = Citation(
    index=1, source="wiki/flax.md", title="亚麻",
    text="亚麻是一年生草本植物，花为蓝色或白色，喜凉爽湿润气候。",
)  # fmt: skip
TOWN = Citation(
    index=2, source="wiki/town.md", title="阿贝歇 (乍得)",
    text="阿贝歇位于撒哈拉沙漠南缘，属热带沙漠气候，适宜骆驼生活。",
)  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "grounded"),
    [
        # flax, named, with the town's climate: the passage about flax says another
        ("亚麻适宜生活在热带沙漠气候。", False),
        ("亚麻喜凉爽湿润气候 [1]。", True),
        # the town named (its title without the qualifier) with its own climate
        ("阿贝歇属热带沙漠气候。", True),
    ],
    ids=["transplanted", "flax", "town"],
)
def test_a_claim_about_a_passage_s_subject_taken_from_another_document(
    answer: str, grounded: bool
) -> None:
    assert supported(answer, [FLAX, TOWN], FLAX_Q) is grounded


def test_two_passages_of_one_document_are_one_subject() -> None:
    # the same claim over two passages of one article about flax: nothing was moved
    climate = Citation(
        index=2, source="wiki/flax.md", title="亚麻 (气候)",
        text="亚麻在热带沙漠气候的绿洲也有少量种植，生活期短。",
    )  # fmt: skip
    assert supported("亚麻适宜生活在热带沙漠气候。", [FLAX, climate], FLAX_Q)


def test_a_fact_with_cannot_in_it_is_not_a_refusal_and_an_answer_of_the_question_is_none() -> None:
    from shelfhand.agent.answer_check import is_refusal, repeats_question
    from shelfhand.core.citations import announces_only

    # a passage the model quoted: it cannot be bought at other times
    assert not is_refusal("武穴酥糖一般只在春节时期生产销售，其他时间无法买到。")
    for refusal in ("抱歉，我无法回答。", "我无法在文档中找到相关信息。", "我无法确认 X1 的价格。"):
        assert is_refusal(refusal)
    for refusal in (
        "抱歉，这个问题我帮不了您。",
        "我不清楚。",
        "抱歉，我也不知道。",
        "文档中不清楚。",
    ):
        assert is_refusal(refusal), refusal
    # sent to the manual for more information (Qwen2.5-Coder-0.5B, for "What should I do if
    # the projector shows E-310?", with the E-310 entry found): the manual is what to say
    for deflection in (
        "The projector does not show E-310. Please check the manual for more information.",
        "请参考说明书以获取更多信息。",
    ):
        assert is_refusal(deflection), deflection
    # a passage's own pointer to another policy is a fact, not a refusal
    assert not is_refusal("Opened items can be returned within 7 days; see the returns policy.")
    # an apology before a negative answer, and 不清楚 said of the user: answers, not refusals
    assert not is_refusal("抱歉，拆封超过七天的商品不能退货 [1]。")
    assert not is_refusal("如果您不清楚型号，请查看机身标签上的 SKU [1]。")
    assert repeats_question("艾努语使用的地区是哪里? [1]", "艾努语使用的地区是哪里？")
    assert not repeats_question("艾努语使用于北海道 [1]。", "艾努语使用的地区是哪里？")
    # asked back in other words (Qwen2.5-Coder-0.5B, with the overheating passages found)
    overheating = "My projector keeps overheating. What can I do?"
    assert repeats_question("The projector keeps overheating. What can I do?", overheating)
    assert repeats_question("投影仪一直过热，我能做什么？", "我的投影仪一直过热，我能做什么？")
    # asked back with its yes turned into a no (Qwen2.5-Coder-0.5B, the USB-stick rule found)
    assert repeats_question("U盘不能用吗？", "U盘可以用吗？")
    assert repeats_question("Can't I use a USB stick?", "Can I use a USB stick?")
    assert not repeats_question("U盘不能用。", "U盘可以用吗？")  # a "no": an answer
    # after a lead-in announcing the answer, with another number (Qwen2.5-Coder-0.5B)
    approval = "3000 元的报销谁审批？"
    assert repeats_question("The answer to the user's question is: 5000 元的报销谁审批?", approval)
    assert repeats_question("答案是：3000 元的报销谁审批？", approval)
    assert not repeats_question("The answer is: 部门总监审批。", approval)
    assert not repeats_question("注意：5000 元以上的报销谁审批？", approval)  # not a lead-in
    # the number an answer states is its own: "There are 12 left." says how many
    assert not repeats_question("There are 12 Lumen X1 units left.", "How many Lumen X1 are left?")
    assert not repeats_question("您是指哪种 U 盘？", "U盘可以用吗？")  # asks what it needs
    assert is_refusal("文档中没有关于健身房的信息。")  # the documents hold nothing of it
    # the question's words and nothing else, but not a question: a "yes" is an answer
    assert not repeats_question("Yes, the Lumen X1 supports HDR.", "Does the Lumen X1 support HDR?")
    assert not repeats_question("Is it overheating? Clean the air filter.", overheating)
    # a long answer cut by max_tokens after "例如:" has said something before it
    assert not announces_only("单星是不和任何其他同类星体组成聚星系统的单一天体。例如:")


@pytest.mark.parametrize(
    ("question", "answer", "reason"),
    [
        (FLAX_Q, FLAX_Q, "empty"),  # the question said again
        (FLAX_Q, "亚麻喜凉爽湿润气候。例如:", ""),  # cut after its answer: it stands
        ("亚麻在什么时候开花？", "亚麻在夏季开花，其他时间无法见到花。", "ungrounded"),
    ],
    ids=["echo", "cut", "cannot"],
)
def test_what_the_check_makes_of_them(question: str, answer: str, reason: str) -> None:
    result = RunResult(
        output=answer,
        messages=(Message.user(question), Message.assistant(answer)),
        citations=(FLAX, TOWN),
    )
    assert AnswerCheck().apply(result, question).fallback_reason == reason


@pytest.mark.anyio
async def test_two_callers_at_once_each_get_their_own_passages_in_place_of_a_moved_claim(
    tmp_path: Path,
) -> None:
    """Two tenants' encyclopedias, one agent, both asked at once: each wrong answer is read
    against its own caller's passages and replaced by them (the check's state is per call)."""
    docs = {
        "acme": {"亚麻.md": ("亚麻", FLAX.text), "阿贝歇.md": ("阿贝歇", TOWN.text)},
        "globex": {"安般守意经.md": ("安般守意经", SUTRA.text), "律藏.md": ("律藏", VINAYA.text)},
    }
    wrong = {
        FLAX_Q: "亚麻适宜生活在热带沙漠气候。",
        SUTRA_Q: "《安般守意经》论述了佛教的出家人制度。",
    }

    def turn(messages: list[Message], tools: object) -> str:
        asked = next(m.text for m in messages if m.role == "user")  # (passages, then it)
        return next(answer for question, answer in wrong.items() if question in asked)

    kb = KnowledgeBase(tmp_path / "ws", None)  # keyword search only
    try:
        for tenant, files in docs.items():
            folder = tmp_path / tenant
            folder.mkdir()
            for name, (title, text) in files.items():
                (folder / name).write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
            kb.ingest([folder], tenant_id=tenant)
        agent = Agent(
            model=FunctionModel(turn),  # type: ignore[arg-type]
            toolkit=Toolkit([make_retrieve_tool(kb)]),
            retrieval="context",
            answer_check=AnswerCheck(),
        )
        answers: dict[str, str] = {}

        async def ask(question: str, who: UserContext) -> None:
            answers[who.tenant_id] = (await agent.run(question, context=who)).output

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, FLAX_Q, UserContext(tenant_id="acme", user_id="a", roles=["user"]))
            tg.start_soon(
                ask, SUTRA_Q, UserContext(tenant_id="globex", user_id="g", roles=["user"])
            )
    finally:
        kb.close()

    assert "凉爽湿润" in answers["acme"] and "观察呼吸" not in answers["acme"]
    assert "观察呼吸" in answers["globex"] and "凉爽湿润" not in answers["globex"]


def test_the_passages_sentences_come_from_the_passage_about_what_is_asked() -> None:
    """The town's passage holds more of the question's other words (适宜, 生活, 气候) and came
    first in the search; the question names flax, whose passage is quoted."""
    from dataclasses import replace

    from shelfhand.agent.extractive import extractive_answer

    town, flax = replace(TOWN, index=1), replace(FLAX, index=2)
    answer = extractive_answer(FLAX_Q, [town, flax])
    assert answer is not None and answer.passages == (2,)
    # a question naming no passage's subject reads them as before
    other = extractive_answer("什么植物喜凉爽湿润气候？", [town, flax])
    assert other is not None and 2 in other.passages


@pytest.mark.parametrize(
    ("answer", "question", "repeats"),
    [
        # Qwen2.5-Coder-0.5B's first sentence for it, alone: the premise denied, nothing said
        ("The projector does not show E-310.", "What should I do if the projector shows E-310?",
         True),
        ("投影仪没有显示 E-310。", "投影仪显示 E-310 怎么办？", True),
        ("E-203 故障 [1]。", "E-203 是什么故障？", True),
        # a word of its own: an answer
        ("E-203 是灯泡过热故障 [1]。", "E-203 是什么故障？", False),
        # a yes-or-no question, and a choice the question offers, are answered in its words
        ("The Lumen X1 supports HDR.", "Does the Lumen X1 support HDR?", False),
        ("The Cinema C4K.", "Which is brighter, the X1 Pro or the Cinema C4K?", False),
        ("Lumen X1 更便宜。", "Lumen X1 和 Lumen X1 Pro 哪个更便宜？", False),
        # how many of what it names: "all" is a stop word to the comparison, and an answer
        ("All models support HDR.", "Which models support HDR?", False),
        ("型号都支持 HDR。", "哪些型号支持 HDR？", False),
    ],
    ids=[
        "premise-en", "premise-zh", "code-zh", "answer", "yes-no", "choice-en", "choice-zh",
        "all-en", "all-zh",
    ],
)  # fmt: skip
def test_an_answer_of_the_questions_own_words_says_nothing(
    answer: str, question: str, repeats: bool
) -> None:
    from shelfhand.agent.answer_check import repeats_question

    assert repeats_question(answer, question) is repeats
