"""Query rewrite: a follow-up message becomes a self-contained query for the up-front
retrieval; model failures, slow models and absurd answers keep the message, with the reason."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, Toolkit
from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.grounding import REWRITE, UPFRONT
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.agent.rewrite import QueryRewriter
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.types import SearchHit
from shelfhand.models.base import ToolSchema
from shelfhand.testing import FunctionModel, ScriptedModel, failure, text, tool_call

pytestmark = pytest.mark.anyio

HISTORY_EN = [
    Message.user("What is the warranty of the Lumen X1 projector?"),
    Message.assistant("The Lumen X1 has a 24-month warranty [1]."),
]
HISTORY_ZH = [
    Message.user("Lumen X1 投影仪的保修期多久？"),
    Message.assistant("Lumen X1 保修 24 个月 [1]。"),
]


@pytest.mark.parametrize(
    ("history", "message", "answer", "query"),
    [
        (HISTORY_EN, "and the price?", "Lumen X1 price", "Lumen X1 price"),
        (
            HISTORY_EN,
            "and the price?",
            'Query: "Lumen X1 projector price"',
            "Lumen X1 projector price",
        ),
        (HISTORY_ZH, "那价格呢？", "Lumen X1 投影仪 价格\n", "Lumen X1 投影仪 价格"),
        (HISTORY_ZH, "那价格呢？", "查询：Lumen X1 价格", "Lumen X1 价格"),
        (HISTORY_ZH, "那价格呢？", "Lumen X1 [1] 价格", "Lumen X1 价格"),
        (HISTORY_ZH, "要手续费吗？", "Acme Z9 printer 退货手续费", "退货手续费"),
        (
            [Message.user("Does the Acme Z9 printer fit?"), Message.assistant("Yes.")],
            "and the weight?",
            "Acme Z9 printer weight",
            "Acme Z9 printer weight",
        ),
    ],
)
async def test_a_follow_up_is_rewritten_with_the_history(
    history: list[Message], message: str, answer: str, query: str
) -> None:
    model = ScriptedModel([text(answer)])
    result = await QueryRewriter(model).rewrite(message, history)
    assert (result.query, result.rewritten, result.reason) == (query, True, None)
    assert result.original == message
    prompt = model.requests[0][-1].text
    assert history[0].text in prompt and history[1].text in prompt and message in prompt


async def test_without_history_the_model_is_not_asked() -> None:
    model = ScriptedModel([])
    result = await QueryRewriter(model).rewrite("What is error E-203?", [])
    assert result.query == "What is error E-203?" and result.reason is None
    assert model.requests == []  # cheap: no call at all
    # tool exchanges alone are no history either
    only_tools = [Message.assistant(tool_calls=()), Message.tool([])]
    assert (await QueryRewriter(model).rewrite("x", only_tools)).query == "x"
    assert model.requests == []


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (failure("provider", "model not loaded", status_code=503), "model not loaded"),
        (failure("timeout"), "ModelTimeoutError"),
        (text("   "), "empty"),
        (text('{"query": "Lumen X1 price"}'), "not a query"),
        (text("```\nLumen X1 price\n```"), "not a query"),
        (text("The Lumen X1 costs 4,999 yuan. " * 12), "far longer"),
        (tool_call("retrieve", {"query": "price"}), "tool call"),
        (text("Reply with the query only."), "repeated its instructions"),
        (text("Acme Z9 printer weight"), "example"),
        (text("[1]"), "not a query"),
        (text("Acme Z9 printer"), "example"),
    ],
)
async def test_unusable_answers_keep_the_message_with_the_reason(turn: Any, reason: str) -> None:
    result = await QueryRewriter(ScriptedModel([turn])).rewrite("那价格呢？", HISTORY_ZH)
    assert result.query == "那价格呢？" and not result.rewritten
    assert result.reason is not None and reason in result.reason


async def test_a_short_query_that_shares_words_with_the_instructions_is_kept() -> None:
    result = await QueryRewriter(ScriptedModel([text("error codes")])).rewrite(
        "and the codes?", HISTORY_EN
    )
    assert (result.query, result.reason) == ("error codes", None)


async def test_a_slow_model_keeps_the_message() -> None:
    async def slow(messages: list[Message], tools: list[ToolSchema]) -> str:
        await asyncio.sleep(30)
        return "Lumen X1 price"

    result = await QueryRewriter(FunctionModel(slow), timeout=0.2).rewrite(
        "and the price?", HISTORY_EN
    )
    assert result.query == "and the price?"
    assert result.reason is not None and "within 0.2 s" in result.reason


# --- in the agent's up-front retrieval ------------------------------------------------------
class RecordingSearcher:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def search(self, query: str, *, k: int = 5, user: UserContext | None = None) -> list[SearchHit]:
        self.queries.append(query)
        return []


def answering(rewrite: str | None) -> FunctionModel:
    """The rewrite prompt gets ``rewrite`` (``None``: a failure), everything else an answer."""

    def turn(messages: list[Message], tools: list[ToolSchema]) -> Any:
        if messages[0].role == "system" and "search query" in messages[0].text:
            if rewrite is None:
                raise RuntimeError("rewrite model down")
            return rewrite
        return "The documents do not say."

    return FunctionModel(turn)


@pytest.mark.parametrize("mode", ["context", "both"])
async def test_the_up_front_retrieval_searches_with_the_rewrite(mode: Any) -> None:
    searcher = RecordingSearcher()
    model = answering("Lumen X1 price")
    agent = Agent(
        model=model,
        toolkit=Toolkit([make_retrieve_tool(searcher)]),
        retrieval=mode,
        rewriter=QueryRewriter(model),
    )
    result = await agent.run("and the price?", history=HISTORY_EN)

    assert searcher.queries == ["Lumen X1 price"]
    upfront = next(m for m in result.messages if m.metadata.get(UPFRONT))
    assert upfront.metadata[REWRITE] == {"original": "and the price?", "query": "Lumen X1 price"}
    assert result.messages[0].text == "and the price?"  # the user's words stay in the transcript
    assert result.output == "The documents do not say."


async def test_a_failed_rewrite_searches_with_the_message_and_records_why() -> None:
    searcher = RecordingSearcher()
    model = answering(None)
    agent = Agent(
        model=model,
        toolkit=Toolkit([make_retrieve_tool(searcher)]),
        retrieval="context",
        rewriter=QueryRewriter(model),
    )
    result = await agent.run("保修怎么申请？", history=HISTORY_ZH)
    assert searcher.queries == ["保修怎么申请？"]
    upfront = next(m for m in result.messages if m.metadata.get(UPFRONT))
    assert "rewrite model down" in upfront.metadata[REWRITE]["reason"]

    # a message pointing back ("那…呢？") is searched with the question before it instead
    pointing = await agent.run("那价格呢？", history=HISTORY_ZH)
    assert searcher.queries[-1] == "Lumen X1 投影仪的保修期多久？ 那价格呢？"
    upfront = next(m for m in pointing.messages if m.metadata.get(UPFRONT))
    assert upfront.metadata[REWRITE]["carried"] is True
    assert "rewrite model down" in upfront.metadata[REWRITE]["reason"]


async def test_first_turn_and_no_rewriter_search_with_the_message() -> None:
    searcher = RecordingSearcher()
    model = answering("SHOULD NOT BE USED")
    kit = Toolkit([make_retrieve_tool(searcher)])
    first = Agent(model=model, toolkit=kit, retrieval="context", rewriter=QueryRewriter(model))
    await first.run("What is error E-203?")
    off = Agent(model=model, toolkit=kit, retrieval="context")
    await off.run("Is the warranty transferable?", history=HISTORY_EN)
    assert searcher.queries == ["What is error E-203?", "Is the warranty transferable?"]
    assert len(model.requests) == 2  # the two answers; no rewrite was asked


async def test_app_gives_the_chat_agent_a_rewriter_only_when_enabled(tmp_path: Path) -> None:
    off = App(settings=Settings.load(tmp_path, env={}))
    on = App(settings=Settings.load(tmp_path, env={"SHELFHAND_QUERY_REWRITE": "on"}))
    assert off.query_rewriter(ScriptedModel([])) is None
    kb = KnowledgeBase(tmp_path / "ws", None, mode="keyword")
    try:
        kb.ingest([sample_corpus()])
        model = ScriptedModel([text("E-203 故障"), text("灯泡过热 [1]。")])
        agent = on.chat_agent(model, kb, retrieval="context")
        result = await agent.run("那这个呢？", history=[Message.user("E-203 是什么？")])
    finally:
        kb.close()
    upfront = next(m for m in result.messages if m.metadata.get(UPFRONT))
    assert upfront.metadata[REWRITE]["query"] == "E-203 故障"
    assert result.citations and "E-203" in result.citations[0].text


async def test_app_gives_the_supervisor_the_same_rewriter(tmp_path: Path) -> None:
    from shelfhand.agent.subagents import Subagent

    on = App(settings=Settings.load(tmp_path, env={"SHELFHAND_QUERY_REWRITE": "on"}))
    kb = KnowledgeBase(tmp_path / "ws", None, mode="keyword")
    try:
        kb.ingest([sample_corpus()])
        model = ScriptedModel([text("E-203 故障"), text("灯泡过热 [1]。")])
        helper = Subagent("helper", "Answers nothing here.", tools=[])
        supervisor = on.supervisor(model, kb, subagents=[helper])
        result = await supervisor.run("那这个呢？", history=[Message.user("E-203 是什么？")])
    finally:
        kb.close()
    upfront = next(m for m in result.messages if m.metadata.get(UPFRONT))
    assert upfront.metadata[REWRITE]["query"] == "E-203 故障"


@pytest.mark.parametrize(
    ("rewriter", "query"),
    [
        (True, "Lumen X1 price"),
        # no model to rewrite it: "and …?" points back, the question before it is carried
        (False, "What is the warranty of the Lumen X1 projector? and the price?"),
    ],
)
async def test_the_search_for_a_guessed_answer_searches_with_the_rewrite(
    rewriter: bool, query: str
) -> None:
    # `tool` mode: nothing is searched up front; the model's first answer states a price
    # nothing gave (a guess), so the loop searches for the follow-up, rewritten with the
    # conversation as the up-front search would be (it searched the bare follow-up before)
    searcher = RecordingSearcher()
    answers = iter(["It costs 499 dollars.", "The documents do not say."])

    def turn(messages: list[Message], tools: list[ToolSchema]) -> Any:
        if messages[0].role == "system" and "search query" in messages[0].text:
            return "Lumen X1 price"
        return next(answers)

    model = FunctionModel(turn)
    agent = Agent(
        model=model,
        toolkit=Toolkit([make_retrieve_tool(searcher)]),
        retrieval="tool",
        rewriter=QueryRewriter(model) if rewriter else None,
        answer_check=AnswerCheck(),
    )
    result = await agent.run("and the price?", history=HISTORY_EN)

    assert searcher.queries == [query]
    assert "499" not in result.output


# --- follow-ups without a model ---------------------------------------------------------------
@pytest.mark.parametrize(
    "message",
    [
        "它的光源能用多久？",
        "那价格呢？",
        "那 X1 Pro 呢？",
        "这款支持 HDR 吗？",
        "and its price?",
        "How heavy is it?",
        "What about the Mini M2?",
        # naming nothing of its own once what only asks is off (the subject left out)
        "多少钱？",
        "怎么修？",
        "有货吗？",
        "多重？",
    ],
)
def test_a_message_pointing_back_is_searched_with_the_question_before_it(message: str) -> None:
    from shelfhand.agent.rewrite import carried, points_back

    history = [Message.user("Lumen Mini M2 多少钱？"), Message.assistant("1,999 元 [1]。")]

    found = carried(message, history)

    assert points_back(message)
    assert found is not None and found.carried and found.rewritten
    assert found.query == f"Lumen Mini M2 多少钱？ {message}" and found.original == message


@pytest.mark.parametrize(
    "message",
    [
        "拆封后还能退货吗？",
        "E-203 是什么故障？",
        "Can I return an opened projector?",
        "保修多久？",
        "Is it possible to return an opened projector?",  # an "it" of its own
        "退货要手续费吗？",
        "你好",  # not a question
        "怎么清洁？",  # two characters of its own: its own question
    ],
)
def test_a_new_question_is_searched_as_typed(message: str) -> None:
    from shelfhand.agent.rewrite import carried

    history = [Message.user("Lumen Mini M2 多少钱？"), Message.assistant("1,999 元 [1]。")]

    assert carried(message, history) is None
    assert carried("它有多重？", []) is None  # nothing before it to point back to
    assert carried("它有多重？", [Message.assistant("你好！")]) is None


def test_a_chain_of_follow_ups_keeps_the_subject_and_is_bounded() -> None:
    from shelfhand.agent.rewrite import CARRY_CHARS, carried

    history = [
        Message.user("Lumen Mini M2 多少钱？"),
        Message.assistant("1,999 元 [1]。"),
        Message.user("它的光源能用多久？"),
        Message.assistant("30,000 小时 [1]。"),
    ]

    found = carried("那 X1 Pro 呢？", history)

    assert found is not None
    assert found.query == "Lumen Mini M2 多少钱？ 它的光源能用多久？ 那 X1 Pro 呢？"
    long = carried("它呢？", [Message.user("Lumen X1 " + "很长的问题" * 200)])
    assert long is not None and len(long.query) == CARRY_CHARS + len(" 它呢？")


async def test_the_up_front_search_carries_the_question_and_records_it() -> None:
    searcher = RecordingSearcher()
    agent = Agent(
        model=answering("NOT ASKED"),
        toolkit=Toolkit([make_retrieve_tool(searcher)]),
        retrieval="context",
    )

    result = await agent.run("它的光源能用多久？", history=HISTORY_ZH)

    assert searcher.queries == ["Lumen X1 投影仪的保修期多久？ 它的光源能用多久？"]
    upfront = next(m for m in result.messages if m.metadata.get(UPFRONT))
    assert upfront.metadata[REWRITE] == {
        "original": "它的光源能用多久？",
        "query": "Lumen X1 投影仪的保修期多久？ 它的光源能用多久？",
        "carried": True,
    }
