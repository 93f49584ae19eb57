"""The optional rerank-endpoint check: a rerank model scores each sentence of an answer
against its passages; the best passage's score decides, except that a number no passage holds
stays unsupported; when the endpoint fails, hangs or answers garbage, the lexical check stands
with a note. Against a real HTTP server on 127.0.0.1 speaking the rerank wire format."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
from shelfhand.agent.extractive import LEAD_ZH
from shelfhand.agent.rerank_check import RerankJudge
from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.results import RunResult
from shelfhand.core.settings import Settings
from shelfhand.knowledge.retrieval.rerank import HttpReranker
from shelfhand.testing import ScriptedModel, text
from support.knowledge import sample_kb
from support.rerank_server import Answer, RerankServer

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
WARRANTY = "投影仪的保修期是多久？"
IN_ENGLISH = "The whole projector is under warranty for two years."  # no shared words


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def scoring(score: Callable[[str, str], float]) -> Answer:
    """An endpoint scoring each document with ``score(query, document)`` (Cohere's shape)."""

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        docs = body["documents"]
        ranked = sorted(
            ((i, score(body["query"], d)) for i, d in enumerate(docs)), key=lambda p: -p[1]
        )
        return 200, {"results": [{"index": i, "relevance_score": s} for i, s in ranked]}

    return answer


def backs_the_24_months(query: str, document: str) -> float:
    """A cross-encoder's view, scripted: the 24-month passage backs "two years"."""
    return 0.92 if "two years" in query and "24 个月" in document else 0.08


def judge_at(url: str, *, timeout: float = 5.0, http_timeout: float = 5.0) -> RerankJudge:
    return RerankJudge(scorer=HttpReranker(url, timeout=http_timeout), timeout=timeout)


async def ask(kb: KnowledgeBase, answer: str, judge: RerankJudge | None) -> RunResult:
    agent = Agent(
        model=ScriptedModel([text(answer)]),
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=AnswerCheck(scaffolds=AGENT_SCAFFOLDS, judge=judge),
    )
    return await agent.run(WARRANTY, context=ACME)


async def test_a_high_score_keeps_a_faithful_answer_the_words_alone_would_replace(
    kb: KnowledgeBase, rerank_endpoint: Callable[[Answer], RerankServer]
) -> None:
    server = rerank_endpoint(scoring(backs_the_24_months))

    lexical = await ask(kb, IN_ENGLISH, None)
    judged = await ask(kb, IN_ENGLISH, judge_at(server.url))

    assert lexical.extractive  # English over Chinese passages: no shared words
    assert not judged.extractive and judged.output == IN_ENGLISH
    assert judged.grounding is not None and judged.grounding.method == "rerank"
    assert judged.grounding.grounded
    query = server.requests[0][2]["query"]
    assert query == IN_ENGLISH  # the sentence, without citation markers, is the query


async def test_a_low_score_replaces_an_answer_the_words_alone_would_pass(
    kb: KnowledgeBase, rerank_endpoint: Callable[[Answer], RerankServer]
) -> None:
    server = rerank_endpoint(scoring(lambda query, document: 0.1))

    result = await ask(kb, "2025 年起购买的投影仪整机保修期为 24 个月。", judge_at(server.url))

    assert result.extractive and result.fallback_reason == "ungrounded"
    assert result.output.startswith(LEAD_ZH)


async def test_a_number_no_passage_holds_stays_unsupported_whatever_the_score(
    kb: KnowledgeBase, rerank_endpoint: Callable[[Answer], RerankServer]
) -> None:
    server = rerank_endpoint(scoring(lambda query, document: 0.99))

    result = await ask(kb, "整机保修期为 36 个月 [1]。", judge_at(server.url))

    assert result.extractive and "36" not in result.output


async def test_a_cited_sentence_is_scored_against_the_passages_it_cites(
    kb: KnowledgeBase, rerank_endpoint: Callable[[Answer], RerankServer]
) -> None:
    server = rerank_endpoint(scoring(backs_the_24_months))

    await ask(kb, "The whole projector is under warranty for two years [1].", judge_at(server.url))

    (_, _, body) = server.requests[0]
    assert len(body["documents"]) == 1 and body["query"].endswith("two years .")


@pytest.mark.parametrize(
    ("answer", "note"),
    [
        (lambda body: (500, {"error": "overloaded"}), "failed (RerankError)"),
        (lambda body: (200, b"<html>not json</html>"), "failed (RerankError)"),
        (lambda body: (200, {"results": []}), "failed (RerankError)"),
        (lambda body: (200, "HANG"), "took over"),
    ],
    ids=["http-500", "garbage", "no-scores", "hangs"],
)
async def test_an_endpoint_that_cannot_say_leaves_the_lexical_check_with_a_note(
    kb: KnowledgeBase, rerank_endpoint: Callable[[Answer], RerankServer], answer: Answer, note: str
) -> None:
    server = rerank_endpoint(answer)

    # The HTTP client waits 5 s and the judge 0.5 s: the judge's deadline is what a hang meets
    # (with both at 0.5 s, a loaded machine let either fire first).
    with anyio.fail_after(30):
        result = await ask(kb, IN_ENGLISH, judge_at(server.url, timeout=0.5))

    assert result.grounding is not None and result.grounding.method == "lexical"
    assert note in result.grounding.note and result.extractive  # as without a judge


async def test_a_closed_port_leaves_the_lexical_check(kb: KnowledgeBase) -> None:
    result = await ask(kb, IN_ENGLISH, judge_at("http://127.0.0.1:9"))

    assert result.grounding is not None and "failed (RerankError)" in result.grounding.note


async def test_two_tenants_checked_at_once_each_get_their_own_verdict(
    tmp_path: Path, rerank_endpoint: Callable[[Answer], RerankServer]
) -> None:
    server = rerank_endpoint(scoring(backs_the_24_months))
    judge = judge_at(server.url)
    results: dict[str, RunResult] = {}
    with sample_kb(tmp_path / "a") as a, sample_kb(tmp_path / "b", tenant_id="globex") as b:

        async def run(name: str, kb: KnowledgeBase, user: UserContext, answer: str) -> None:
            agent = Agent(
                model=ScriptedModel([text(answer)]),
                toolkit=Toolkit([retrieve_tool(kb)]),
                retrieval="context",
                answer_check=AnswerCheck(judge=judge),
            )
            results[name] = await agent.run(WARRANTY, context=user)

        globex = UserContext(tenant_id="globex", user_id="u2")
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "acme", a, ACME, IN_ENGLISH)
                tg.start_soon(run, "globex", b, globex, "The warranty is three weeks long.")

    assert not results["acme"].extractive
    assert results["globex"].extractive


def test_the_setting_wires_the_rerank_endpoint_and_needs_its_url(tmp_path: Path) -> None:
    env = {"SHELFHAND_ANSWER_JUDGE": "rerank", "SHELFHAND_RERANK_URL": "http://127.0.0.1:8080"}
    app = App(
        settings=Settings.load(
            tmp_path / "a", env={**env, "SHELFHAND_ANSWER_JUDGE_MIN_SCORE": "0.3"}
        )
    )

    check = app.answer_check(None)
    assert check is not None and isinstance(check.judge, RerankJudge)
    assert check.judge.min_score == 0.3
    with pytest.raises(ConfigurationError, match="answer_judge = rerank needs a rerank endpoint"):
        Settings.load(tmp_path / "b", env={"SHELFHAND_ANSWER_JUDGE": "rerank"})
