"""The optional model-based check: the chat model judges each sentence against its passages;
its verdict decides, except that a number no passage holds stays unsupported; when the judge
fails, times out or cannot be read, the lexical check stands with a note. A scripted judge,
and the real openai SDK against a chat-completions server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
from shelfhand.agent.extractive import LEAD_ZH
from shelfhand.agent.model_check import JUDGE_INSTRUCTIONS, ModelJudge, parse_verdicts
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.core.settings import Settings
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import FunctionModel, ScriptedModel, text
from support.chat_server import ChatServer, Reply, completion
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
WARRANTY = "投影仪的保修期是多久？"
IN_ENGLISH = "The whole projector is under warranty for two years."  # no shared words


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def judged_by(verdict: Any) -> ModelJudge:
    """A judge answering ``verdict`` (a reply text, or a function of the request)."""
    reply = verdict if callable(verdict) else (lambda messages, tools: verdict)
    return ModelJudge(model=FunctionModel(reply), timeout=5)


async def ask(kb: KnowledgeBase, answer: str, judge: ModelJudge | None) -> RunResult:
    agent = Agent(
        model=ScriptedModel([text(answer)]),
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=AnswerCheck(scaffolds=AGENT_SCAFFOLDS, judge=judge),
    )
    return await agent.run(WARRANTY, context=ACME)


async def test_the_lexical_check_alone_replaces_a_faithful_answer_in_another_language(
    kb: KnowledgeBase,
) -> None:
    result = await ask(kb, IN_ENGLISH, None)

    assert result.extractive and result.grounding is not None
    assert result.grounding.method == "lexical"


async def test_the_model_s_yes_keeps_it_and_says_which_check_decided(kb: KnowledgeBase) -> None:
    asked: list[list[Message]] = []

    def judge(messages: list[Message], tools: Any) -> str:
        asked.append(messages)
        return "1: yes"

    result = await ask(kb, IN_ENGLISH, judged_by(judge))

    assert not result.extractive and result.output == IN_ENGLISH
    assert result.grounding is not None and result.grounding.method == "model"
    assert result.grounding.grounded
    request = asked[0][-1].text
    assert asked[0][0].text == JUDGE_INSTRUCTIONS
    assert "1. " + IN_ENGLISH in request and "24 个月" in request  # sentences and passages


async def test_the_model_s_no_replaces_an_answer_the_words_alone_would_pass(
    kb: KnowledgeBase,
) -> None:
    result = await ask(kb, "2025 年起购买的投影仪整机保修期为 24 个月。", judged_by("1: no"))

    assert result.extractive and result.fallback_reason == "ungrounded"
    assert result.output.startswith(LEAD_ZH)


async def test_a_number_no_passage_holds_stays_unsupported_whatever_the_model_says(
    kb: KnowledgeBase,
) -> None:
    result = await ask(kb, "整机保修期为 36 个月 [1]。", judged_by("1: yes"))

    assert result.extractive and "36" not in result.output


@pytest.mark.parametrize(
    ("verdict", "note"),
    [
        ("The answer looks fine to me.", "no verdict for every sentence"),
        (RuntimeError("judge down"), "failed (RuntimeError)"),
    ],
    ids=["unreadable", "failing"],
)
async def test_a_judge_that_cannot_say_leaves_the_lexical_check_with_a_note(
    kb: KnowledgeBase, verdict: Any, note: str
) -> None:
    def judge(messages: list[Message], tools: Any) -> str:
        if isinstance(verdict, Exception):
            raise verdict
        return str(verdict)

    result = await ask(kb, IN_ENGLISH, judged_by(judge))

    assert result.grounding is not None and result.grounding.method == "lexical"
    assert note in result.grounding.note and result.extractive  # as without a judge


async def test_a_judge_that_hangs_is_given_up_after_its_timeout(kb: KnowledgeBase) -> None:
    never = anyio.Event()

    async def judge(messages: list[Message], tools: Any) -> str:
        await never.wait()
        return "1: yes"

    with anyio.fail_after(30):
        result = await ask(kb, IN_ENGLISH, ModelJudge(model=FunctionModel(judge), timeout=0.2))

    assert result.grounding is not None and "took over 0.2s" in result.grounding.note


def test_verdicts_are_read_per_sentence_number() -> None:
    assert parse_verdicts("1: yes\n2：否\n3) No", 3) == [True, False, False]
    assert parse_verdicts("[2]: no\n[1]: yes", 2) == [True, False]
    assert parse_verdicts("1: yes", 2) is None


async def test_the_configured_openai_compatible_model_judges_over_http(kb: KnowledgeBase) -> None:
    server = ChatServer()
    server.start()
    try:
        server.add(Reply(body=completion("1: yes")))
        judge = ModelJudge(
            model=OpenAIChatModel("judge", base_url=server.url, api_key="k", max_retries=0)
        )
        result = await ask(kb, IN_ENGLISH, judge)
    finally:
        server.stop()

    assert not result.extractive and result.grounding is not None
    assert result.grounding.method == "model"
    assert server.requests[0].body["messages"][0]["content"] == JUDGE_INSTRUCTIONS


async def test_two_tenants_checked_at_once_each_get_their_own_verdict(tmp_path: Path) -> None:
    def judge(messages: list[Message], tools: Any) -> str:
        return "1: yes" if "two years" in messages[-1].text else "1: no"

    results: dict[str, RunResult] = {}
    with sample_kb(tmp_path / "a") as a, sample_kb(tmp_path / "b", tenant_id="globex") as b:

        async def run(name: str, kb: KnowledgeBase, user: UserContext, answer: str) -> None:
            agent = Agent(
                model=ScriptedModel([text(answer)]),
                toolkit=Toolkit([retrieve_tool(kb)]),
                retrieval="context",
                answer_check=AnswerCheck(judge=judged_by(judge)),
            )
            results[name] = await agent.run(WARRANTY, context=user)

        globex = UserContext(tenant_id="globex", user_id="u2")
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "acme", a, ACME, IN_ENGLISH)
                tg.start_soon(run, "globex", b, globex, "整机保修期为 24 个月。")

    assert not results["acme"].extractive
    assert results["globex"].extractive


def test_the_setting_wires_the_chat_model_as_judge_and_is_off_by_default(tmp_path: Path) -> None:
    model = FunctionModel(lambda messages, tools: "ok")
    plain = App(settings=Settings.load(tmp_path / "a", env={}), model=model)
    judged = App(
        settings=Settings.load(tmp_path / "b", env={"SHELFHAND_ANSWER_JUDGE": "model"}),
        model=model,
    )

    off, on = plain.answer_check(model), judged.answer_check(model)
    assert off is not None and off.judge is None
    assert on is not None and on.judge is not None and on.judge.model is model


async def test_the_judges_call_is_in_the_runs_usage_and_its_trace(kb: KnowledgeBase) -> None:
    # the judge asks a model after the loop has summed the run's usage: its call is added,
    # traced as a chat span and counted, like the loop's own
    from shelfhand.core.tracing import Tracer
    from support.spans import ListProcessor

    spans = ListProcessor()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    judge = judged_by("1: yes")
    with Tracer([spans]).root("turn", trace_id=trace_id):
        result = await ask(kb, IN_ENGLISH, judge)
    assert result.grounding is not None and result.grounding.method == "model"
    assert result.usage.model_calls == 2  # the answer and the judge's verdict
    chats = [s for s in spans.spans if s.kind == "chat"]
    assert len(chats) == 2
    assert result.usage.output_tokens == sum(
        s.attributes["gen_ai.usage.output_tokens"] for s in chats
    )
