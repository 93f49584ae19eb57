"""The answer check on agent runs: answers against their passages are flagged, and an answer
that cannot be trusted becomes the passages' own sentences, for each cause; concurrent runs of
two tenants each get the check of their own answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import (
    AGENT_SCAFFOLDS,
    REASONS_ZH,
    REPLACED_NOTICE_ZH,
    AnswerCheck,
)
from shelfhand.agent.extractive import LEAD, LEAD_ZH
from shelfhand.agent.fallbacks import NOT_COVERED, NOT_COVERED_ZH
from shelfhand.core.events import AnswerReplaced, Final, TextDelta
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.knowledge.evidence.citations import NOTHING_FOUND
from shelfhand.providers.tool_modes import PROMPT_TEXTS
from shelfhand.testing import ScriptedModel, hashing_router, text, tool_call
from support.answers import CHECK, VPN_FAQ
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
GLOBEX = UserContext(tenant_id="globex", user_id="u2", roles=["user"])
WARRANTY = "投影仪的保修期是多久？"
E203 = "What does error code E-203 mean and how do I fix it?"


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def agent(kb: KnowledgeBase, *turns: object, **options: object) -> Agent:
    return Agent(
        model=ScriptedModel(list(turns)),  # type: ignore[arg-type]
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=CHECK,
        **options,  # type: ignore[arg-type]
    )


async def test_a_grounded_answer_is_kept_with_its_check(kb: KnowledgeBase) -> None:
    result = await agent(kb, text("2025 年起购买的投影仪整机保修期为 24 个月。")).run(
        WARRANTY, context=ACME
    )

    assert not result.extractive and result.fallback_reason == ""
    assert result.output.startswith("2025 年起")
    assert result.grounding is not None and result.grounding.grounded


async def test_an_answer_with_a_number_not_in_the_evidence_is_replaced_by_the_passages(
    kb: KnowledgeBase,
) -> None:
    result = await agent(kb, text("整机保修期为 36 个月 [1]。")).run(WARRANTY, context=ACME)

    assert result.extractive and result.fallback_reason == "ungrounded"
    assert result.output.startswith(LEAD_ZH) and "24 个月" in result.output
    assert "36" not in result.output
    assert result.grounding is not None and result.grounding.grounded


async def test_with_flags_only_the_unsupported_sentence_is_flagged_not_replaced(
    kb: KnowledgeBase,
) -> None:
    model = ScriptedModel([text("整机保修期为 36 个月 [1]。")])
    flagging = Agent(
        model=model,
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=AnswerCheck(fallback=False),
    )
    result = await flagging.run(WARRANTY, context=ACME)

    assert result.output == "整机保修期为 36 个月 [1]。" and not result.extractive
    assert result.grounding is not None
    assert [s.missing for s in result.grounding.unsupported] == [("36",)]


async def test_a_refusal_while_the_passages_answer_is_replaced(kb: KnowledgeBase) -> None:
    result = await agent(kb, text("抱歉，我无法协助完成这个请求。")).run(WARRANTY, context=ACME)

    assert result.extractive and result.fallback_reason == "refusal"
    assert "24 个月" in result.output


async def test_an_apology_before_a_negative_answer_is_the_answer_not_a_refusal(
    kb: KnowledgeBase,
) -> None:
    """Polite Chinese service writes a "no" after an apology; before, 抱歉 alone made the
    answer a refusal, and the passages replaced it."""
    answer = "抱歉，已激活的延保服务卡不支持退货 [1]。"
    model = agent(kb, tool_call("retrieve", {"query": "延保服务卡 退货"}), text(answer))
    result = await model.run("延保服务卡激活后还能退吗？", context=ACME)

    assert result.fallback_reason == "" and not result.extractive
    assert result.output == answer


async def test_a_calculator_number_for_a_document_question_is_replaced(kb: KnowledgeBase) -> None:
    result = await agent(kb, text("3507.3")).run("我的投影仪显示 E-310，怎么办？", context=ACME)

    assert result.extractive and result.fallback_reason == "ungrounded"
    assert "E-310" in result.output and "3507.3" not in result.output


@pytest.mark.parametrize("scaffold", AGENT_SCAFFOLDS + PROMPT_TEXTS)
async def test_no_prompt_template_reaches_the_answer(kb: KnowledgeBase, scaffold: str) -> None:
    echo = f"{scaffold} [1]"
    result = await agent(kb, text(echo)).run(E203, context=ACME)

    assert result.fallback_reason == "prompt_echo"
    assert scaffold not in result.output
    assert result.output.startswith(LEAD) and "E-203" in result.output


async def test_a_prompt_echo_for_a_question_the_documents_do_not_cover_says_so(
    kb: KnowledgeBase,
) -> None:
    echo = "From the knowledge base, for the question below (cite the passages you use by [1])"
    result = await agent(kb, text(echo)).run("What is the weather in Paris today?", context=ACME)

    assert result.output == NOT_COVERED and result.fallback_reason == "prompt_echo"


@pytest.mark.parametrize(
    ("question", "answer", "told"),
    [
        ("年假有几天？", NOTHING_FOUND, NOT_COVERED_ZH),
        ("How many days of annual leave do I get?", NOTHING_FOUND, NOT_COVERED),
        (
            "明天上海的天气怎么样？",
            "The documents do not cover this instead of guessing.",
            NOT_COVERED_ZH,
        ),
    ],
)
async def test_the_instruction_of_a_search_that_found_nothing_never_reaches_the_user(
    kb: KnowledgeBase, question: str, answer: str, told: str
) -> None:
    # the local model answered "年假有几天？" with retrieve's instruction to it, word for word,
    # and "明天上海的天气怎么样？" with its end
    searched = agent(kb, tool_call("retrieve", {"query": question}), text(answer))

    result = await searched.run(question, context=GLOBEX)  # globex has no documents

    assert result.output == told and result.fallback_reason == "prompt_echo"


@pytest.mark.parametrize(
    ("question", "query", "own"),
    [
        (
            "How many days of annual leave?",
            "annual leave",
            "The documents do not cover annual leave.",
        ),
        # naming only what the question names (its code): no guess of its own
        ("What does error E-999 mean?", "E-999", "The documents do not mention error E-999."),
    ],
)
async def test_a_model_saying_the_documents_do_not_cover_it_in_its_words_stands(
    kb: KnowledgeBase, question: str, query: str, own: str
) -> None:
    searched = agent(kb, tool_call("retrieve", {"query": query}), text(own))

    result = await searched.run(question, context=GLOBEX)

    assert result.output == own and result.fallback_reason == ""


@pytest.mark.parametrize(
    ("question", "answer", "told"),
    [
        (
            "公司的年假政策是什么？",
            "文档中没有相关信息。不过一般公司年假是 15 天。",
            NOT_COVERED_ZH,
        ),
        (
            "What is the annual leave policy?",
            "The documents do not cover this. Usually employees get 25 days of leave.",
            NOT_COVERED,
        ),
    ],
)
@pytest.mark.parametrize("caller", [GLOBEX, ACME], ids=["no documents", "none about it"])
async def test_a_guess_beside_the_documents_do_not_cover_it_is_not_shown(
    kb: KnowledgeBase, question: str, answer: str, told: str, caller: UserContext
) -> None:
    """A refusal that goes on with an amount no passage or tool holds: the amount is the
    model's guess, read by the user as the company's. Before, the answer stood with its
    guess (a refusal was not checked; with passages found, none about the question, it was
    replaced by nothing better and stood)."""
    searched = agent(kb, tool_call("retrieve", {"query": question}), text(answer))

    result = await searched.run(question, context=caller)  # globex has no documents

    assert result.output.startswith(told) and result.fallback_reason == "ungrounded"
    assert "15" not in result.output and "25" not in result.output


@pytest.mark.parametrize(
    ("question", "answer", "told"),
    [
        ("E-203 是什么故障？", "抱歉，我无法协助完成这个请求。", NOT_COVERED_ZH),
        ("What does E-203 mean?", "I'm sorry, but I can't assist with that request.", NOT_COVERED),
    ],
)
async def test_a_refusal_after_a_search_that_found_nothing_says_the_documents_lack_it(
    kb: KnowledgeBase, question: str, answer: str, told: str
) -> None:
    """Qwen2.5-Coder-0.5B answered "E-203 是什么故障？" in a tenant with no documents with a
    refusal to help: the user is told the documents do not cover it, the truth the refusal
    hid. Before, the refusal stood."""
    searched = agent(kb, tool_call("retrieve", {"query": question}), text(answer))

    result = await searched.run(question, context=GLOBEX)  # globex has no documents

    assert result.output.startswith(told) and result.fallback_reason == "declined"


@pytest.mark.parametrize(
    ("question", "answer", "told"),
    [
        ("公司有健身房吗？", "抱歉，我无法协助完成这个请求。", NOT_COVERED_ZH),
        ("Is there a gym at the office?", "I'm sorry, but I can't assist with that.", NOT_COVERED),
    ],
)
async def test_a_refusal_over_passages_about_something_else_says_the_documents_lack_it(
    kb: KnowledgeBase, question: str, answer: str, told: str
) -> None:
    """The search found the shop's documents, none about a gym. Qwen2.5-Coder-0.5B refused to
    help without saying why, and the refusal stood (flagged): the user is told the documents
    do not cover it, as when the search finds nothing."""
    searched = agent(kb, tool_call("retrieve", {"query": question}), text(answer))

    result = await searched.run(question, context=ACME)

    assert result.citations  # passages were found
    assert result.output.startswith(told) and result.fallback_reason == "declined"


async def test_a_refusal_over_passages_in_the_other_language_stands(tmp_path: Path) -> None:
    """A Chinese passage may answer an English question in none of its words: the check
    cannot tell it is about something else, and does not say the documents lack it."""
    refusal = "I'm sorry, but I can't assist with that."
    handbook = "# 员工手册\n\n出差住宿标准：一线城市每晚不超过 600 元，其他城市每晚不超过 400 元。"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "hr.md").write_text(handbook, encoding="utf-8")
    with KnowledgeBase(tmp_path / "ws", hashing_router()) as base:
        base.ingest([tmp_path / "docs"], tenant_id="acme")
        question = "What is the hotel limit on business trips?"
        searched = agent(base, tool_call("retrieve", {"query": question}), text(refusal))
        result = await searched.run(question, context=ACME)

    assert result.citations
    assert result.output == refusal and result.fallback_reason == ""


@pytest.mark.parametrize(
    ("question", "answer", "told"),
    [
        (
            "公司有健身房吗？",
            "The documents do not cover the question '公司有健身房吗？'.",
            NOT_COVERED_ZH,
        ),
        ("Is there a gym at the office?", "文档中没有关于健身房的信息。", NOT_COVERED),
    ],
)
@pytest.mark.parametrize("caller", [ACME, GLOBEX], ids=["unrelated-passages", "found-nothing"])
async def test_a_refusal_in_the_other_language_is_said_in_the_questions(
    kb: KnowledgeBase, question: str, answer: str, told: str, caller: UserContext
) -> None:
    """Qwen2.5-Coder-0.5B answered "公司有健身房吗？" with "The documents do not cover the
    question…": the user asked in Chinese and read English. What it says, that the documents
    do not cover it, is said in the question's language, whether the search found passages
    about something else (acme) or nothing (globex has no documents)."""
    searched = agent(kb, tool_call("retrieve", {"query": question}), text(answer))

    result = await searched.run(question, context=caller)

    assert result.output.startswith(told) and result.fallback_reason == "declined"


async def test_a_refusal_that_says_why_or_made_without_a_search_stands(kb: KnowledgeBase) -> None:
    says_why = "抱歉，文档中没有相关信息。"  # the documents: it says so already
    result = await agent(kb, text(says_why)).run("E-203 是什么故障？", context=GLOBEX)
    assert result.output == says_why and result.fallback_reason == ""

    refusal = "抱歉，我无法协助完成这个请求。"  # nothing was searched: not ours to say why
    unsearched = Agent(model=ScriptedModel([text(refusal)]), answer_check=CHECK)
    result = await unsearched.run("帮我写一段破解软件的代码", context=GLOBEX)
    assert result.output == refusal and result.fallback_reason == ""


async def test_a_loop_guard_stop_ends_with_the_passages_sentences(kb: KnowledgeBase) -> None:
    call = tool_call("http_get", {"url": "https://errors.example/E-203"})
    result = await agent(kb, call, call, call).run(E203, context=ACME)

    assert result.stop_reason == "repeated_call"
    assert result.extractive and result.fallback_reason == "repeated_call"
    assert result.output.startswith(LEAD) and "E-203" in result.output


async def test_max_iters_ends_with_the_passages_sentences(kb: KnowledgeBase) -> None:
    calls = [tool_call("retrieve", {"query": f"E-203 {i}"}) for i in range(3)]
    result = await agent(kb, *calls, max_iters=2).run(E203, context=ACME)

    assert result.stop_reason == "max_iters"
    assert result.extractive and "E-203" in result.output


async def test_a_blank_answer_ends_with_the_passages_sentences(kb: KnowledgeBase) -> None:
    result = await agent(kb, text(""), text(" ")).run(E203, context=ACME)

    assert result.stop_reason == "empty"
    assert result.extractive and result.fallback_reason == "empty"


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        (E203, "The answer to the user is:"),
        ("E-203 是什么错误？", "答案是："),
        ("E-203 是什么错误？", "根据文档 [1]："),
    ],
)
async def test_an_answer_that_only_announces_one_ends_with_the_passages_sentences(
    kb: KnowledgeBase, question: str, answer: str
) -> None:
    """Qwen2.5-Coder-0.5B wrote "The answer to the user is: " until its reply was stopped as a
    loop: one round of it was the answer, and it was shown as one."""
    result = await agent(kb, text(answer)).run(question, context=ACME)

    assert result.extractive and result.fallback_reason == "empty"
    assert "E-203" in result.output


async def test_an_answer_with_its_items_under_a_colon_stands(kb: KnowledgeBase) -> None:
    own = "E-203 means the lamp is overheating [1]. To fix it:\n- clean the air filter [1]"
    result = await agent(kb, text(own)).run(E203, context=ACME)

    assert result.fallback_reason != "empty" and result.output == own


async def test_a_stream_says_the_answer_was_replaced_then_ends_with_the_checked_result(
    kb: KnowledgeBase,
) -> None:
    events = [
        e
        async for e in agent(kb, text("整机保修期为 36 个月 [1]。")).stream(WARRANTY, context=ACME)
    ]
    finals = [e.result for e in events if isinstance(e, Final)]

    assert len(finals) == 1 and finals[0].extractive
    assert "24 个月" in finals[0].output
    replaced = events[-2]
    assert isinstance(replaced, AnswerReplaced) and replaced.reason == "ungrounded"
    assert replaced.output == finals[0].output
    # a Chinese question: the notice is Chinese, the reason code stays the same for programs
    assert replaced.reason == "ungrounded"
    assert replaced.notice == REPLACED_NOTICE_ZH.format(reason=REASONS_ZH["ungrounded"])
    assert "36" in "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_a_stream_whose_answer_stands_has_no_replaced_event(kb: KnowledgeBase) -> None:
    answer = text("2025 年起购买的投影仪整机保修期为 24 个月。")
    events = [e async for e in agent(kb, answer).stream(WARRANTY, context=ACME)]

    assert isinstance(events[-1], Final) and not events[-1].result.extractive
    assert not any(isinstance(e, AnswerReplaced) for e in events)


async def test_an_answer_without_passages_is_not_checked(kb: KnowledgeBase) -> None:
    model = ScriptedModel([text("Hello! How can I help?")])
    plain = Agent(model=model, toolkit=Toolkit(), answer_check=CHECK)
    result = await plain.run("Hello!", context=ACME)

    assert result.output == "Hello! How can I help?" and result.grounding is None


async def test_two_tenants_at_once_each_get_the_check_of_their_own_answer(
    tmp_path: Path,
) -> None:
    with (
        sample_kb(tmp_path / "acme") as acme_kb,
        sample_kb(tmp_path / "globex", tenant_id="globex") as globex_kb,
    ):
        good = agent(acme_kb, text("整机保修期为 24 个月。"))
        bad = agent(globex_kb, text("整机保修期为 36 个月 [1]。"))
        results: dict[str, RunResult] = {}

        async def ask(name: str, who: Agent, user: UserContext) -> None:
            results[name] = await who.run(WARRANTY, context=user)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "acme", good, ACME)
                tg.start_soon(ask, "globex", bad, GLOBEX)

    assert not results["acme"].extractive and "24 个月" in results["acme"].output
    assert results["globex"].extractive and "36" not in results["globex"].output


async def test_an_answer_citing_passages_when_the_search_found_none_says_not_covered(
    tmp_path: Path,
) -> None:
    with sample_kb(tmp_path, tenant_id="globex") as other_tenants_kb:
        answer = "It is sunny in Paris today, 24 °C [1]."
        result = await agent(other_tenants_kb, text(answer)).run(
            "What is the weather in Paris today?", context=ACME
        )

    assert result.citations == ()  # acme sees none of globex's documents
    assert result.output == NOT_COVERED and result.fallback_reason == "ungrounded"


async def test_a_refusal_over_passages_only_loosely_about_the_question_is_kept(
    kb: KnowledgeBase,
) -> None:
    refusal = "Sorry, the documents do not mention gaming laptops."
    result = await agent(kb, text(refusal)).run("Do you sell gaming laptops?", context=ACME)

    assert result.citations  # passages came back: the model was not overruled by them
    assert result.output == refusal and not result.extractive


async def test_an_answer_that_is_only_a_passage_heading_is_replaced(kb: KnowledgeBase) -> None:
    # the 0.5B model's answer to this question: the heading of the first passage
    result = await agent(kb, text("未拆封商品")).run("开封后的投影仪可以退货吗？", context=ACME)

    assert result.extractive and result.fallback_reason == "heading_echo"
    assert "7 天" in result.output


async def test_an_answer_naming_a_heading_in_a_sentence_is_kept(kb: KnowledgeBase) -> None:
    answer = "已拆封商品自签收之日起 7 天内可申请退货。"
    result = await agent(kb, text(answer)).run("开封后的投影仪可以退货吗？", context=ACME)

    assert not result.extractive and result.output == answer


@pytest.mark.parametrize(
    ("question", "answer", "reason", "shown"),
    [
        # its number, the passage's: borne out
        ("VPN 老是断线怎么办？", "请把 GlobalProtect 客户端升级到 6.2 或更高版本 [1]。", "", "6.2"),
        # no number: not borne out; the passage its VPN names is quoted
        ("VPN 老是断线怎么办？", "请重新安装客户端。", "ungrounded", "version 6.2 or later"),
        # nothing to tell the passage is about it by: the answer stands, flagged, and it is
        # not "the documents do not cover this", which words cannot tell either
        ("客户端老是断线怎么办？", "请重新安装客户端。", "ungrounded", "请重新安装客户端。"),
        # a number the passage does not hold: not borne out, whatever the language
        ("客户端老是断线怎么办？", "请把客户端升级到 7.1 版本。", "ungrounded", NOT_COVERED_ZH),
    ],
    ids=["its-number", "no-number", "no-name", "wrong-number"],
)
def test_an_answer_over_passages_all_in_the_other_language(
    question: str, answer: str, reason: str, shown: str
) -> None:
    """ "VPN 老是断线怎么办？" finds the English IT FAQ by its VPN. A Chinese answer shares none
    of its words: before, every such answer became "the documents do not cover this"."""
    result = RunResult(
        output=answer,
        messages=(Message.user(question), Message.assistant(answer)),
        citations=(VPN_FAQ,),
    )

    checked = CHECK.apply(result, question)

    assert checked.fallback_reason == reason and shown in checked.output
    assert checked.extractive == (shown == "version 6.2 or later")
