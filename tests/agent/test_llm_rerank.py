"""LLM-as-reranker: the chat model orders the fused candidates; loose answers from weak models
are read leniently, and garbage, errors and slow models keep the fused order with the reason."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from shelfhand.agent.llm_rerank import LlmReranker, parse_ranking
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.retrieval.rerank import RerankError
from shelfhand.knowledge.types import Document, SearchHit, Section
from shelfhand.models.base import ToolSchema
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import FunctionModel, ScriptedModel, failure, text
from support.chat_server import ChatServer, Reply, completion

DOCS = {
    "warranty-v1.md": "Warranty v1: the projector warranty lasts 12 months from purchase.",
    "warranty-v2.md": "Warranty v2: from 2025 the projector warranty lasts 24 months. " + "x" * 900,
    "warranty-faq.md": "Warranty FAQ: keep the receipt; warranty claims need the serial number.",
    "errors.md": "Error E-203: the lamp overheats. Clean the filter and restart the projector.",
    "保修-v1.md": "保修政策 第一版：投影仪保修期为 12 个月，自购买之日起计算。",
    "保修-v2.md": "保修政策 第二版：自 2025 年起，投影仪保修期延长为 24 个月。",
    "保修-范围.md": "保修范围：灯泡和遥控器不在保修范围内，人为损坏不保修。",
}


def document(name: str, body: str) -> Document:
    return Document(
        doc_id=name,
        source=name,
        title=name.rsplit(".", 1)[0],
        doc_type="markdown",
        sections=(Section(text=body),),
        content_hash=str(hash(body)),
    )


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[KnowledgeBase]:
    kb = KnowledgeBase(tmp_path / "plain", None, mode="keyword")
    kb.ingest_documents(document(n, t) for n, t in DOCS.items())
    yield kb
    kb.close()


def with_reranker(path: Path, reranker: LlmReranker, candidates: int = 4) -> KnowledgeBase:
    kb = KnowledgeBase(path, None, mode="keyword", reranker=reranker, rerank_candidates=candidates)
    kb.ingest_documents(document(n, t) for n, t in DOCS.items())
    return kb


def sources(hits: Sequence[SearchHit]) -> list[str]:
    return [h.chunk.source for h in hits]


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("projector warranty", "[3, 1]"),
        ("projector warranty", '```json\n{"ranking": [3, 1]}\n```'),
        ("projector warranty", "Passage 3 is the most relevant, then passage 1."),
        ("投影仪保修期", "[3][1]"),
        ("投影仪保修期", '[{"id": 1, "score": 0.2}, {"id": 3, "score": 0.9}]'),
    ],
)
def test_the_models_order_comes_first_then_the_rest_in_fused_order(
    tmp_path: Path, plain: KnowledgeBase, query: str, answer: str
) -> None:
    model = ScriptedModel([text(answer)])
    reranker = LlmReranker(model, timeout=5, max_passage_chars=120)
    kb = with_reranker(tmp_path / "ws", reranker)
    try:
        found = kb.search_result(query, k=4)
        hits, timings = list(found.hits), found.timings
    finally:
        kb.close()

    fused = sources(plain.search(query, k=4))
    assert len(fused) >= 3
    assert sources(hits) == [
        fused[2],
        fused[0],
        *[s for s in fused if s not in (fused[0], fused[2])],
    ]
    assert timings.rerank_reason is None
    prompt = model.requests[0][-1].text
    assert query in prompt and "[1] " in prompt and f"[{len(fused)}] " in prompt
    assert "x" * 200 not in prompt  # passages are cut
    assert model.tool_schemas[0] == []  # no tools offered


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        (text("I think the warranty is 24 months."), "named no passage"),
        (text(""), "named no passage"),
        (text("[42, 0, -1]"), "named no passage"),
        (failure("provider", "model not loaded", status_code=503), "model not loaded"),
        (failure("timeout"), "timed out"),
    ],
)
def test_garbage_or_a_failing_model_keeps_the_fused_order(
    tmp_path: Path, plain: KnowledgeBase, turn: Any, expected: str
) -> None:
    kb = with_reranker(tmp_path / "ws", LlmReranker(ScriptedModel([turn]), timeout=5))
    try:
        found = kb.search_result("投影仪保修期", k=3)
        hits, timings = list(found.hits), found.timings
    finally:
        kb.close()
    assert sources(hits) == sources(plain.search("投影仪保修期", k=3))
    assert timings.rerank_reason is not None and expected in timings.rerank_reason
    assert "llm:scripted" in timings.rerank_reason


def test_a_slow_model_is_abandoned_after_the_timeout(tmp_path: Path, plain: KnowledgeBase) -> None:
    async def slow(messages: list[Message], tools: list[ToolSchema]) -> str:
        await asyncio.sleep(30)
        return "[2, 1]"

    kb = with_reranker(tmp_path / "ws", LlmReranker(FunctionModel(slow), timeout=0.3))
    try:
        found = kb.search_result("projector warranty", k=3)
        hits, timings = list(found.hits), found.timings
    finally:
        kb.close()
    assert sources(hits) == sources(plain.search("projector warranty", k=3))
    assert timings.rerank_reason is not None and "within 0.3 s" in timings.rerank_reason


def test_through_the_openai_sdk_against_a_loopback_server(
    tmp_path: Path, plain: KnowledgeBase
) -> None:
    server = ChatServer()
    server.start()
    server.add(Reply(body=completion("[2]")), Reply(status=500, body={"error": {"message": "x"}}))
    model = OpenAIChatModel("local", base_url=server.url, api_key="k", timeout=5)
    kb = with_reranker(tmp_path / "ws", LlmReranker(model, timeout=5))
    try:
        found = kb.search_result("projector warranty", k=3)
        hits, timings = list(found.hits), found.timings
        found = kb.search_result("projector warranty", k=3)
        again, failed = list(found.hits), found.timings
    finally:
        kb.close()
        server.stop()
    fused = sources(plain.search("projector warranty", k=3))
    assert sources(hits) == [fused[1], fused[0], fused[2]] and timings.rerank_reason is None
    assert sources(again) == fused and failed.rerank_reason is not None
    assert server.requests[0].path.endswith("/chat/completions")


def test_parse_ranking_is_lenient_but_keeps_to_the_range() -> None:
    assert parse_ranking("[2, 2, 5, 1]", 3) == [2, 1]
    assert parse_ranking('["3", "1"]', 3) == [3, 1]
    assert parse_ranking('{"order": [{"passage": 2}, {"passage": 1}]}', 3) == [2, 1]
    assert parse_ranking("最相关的是 [2]，其次是 [1]。", 3) == [2, 1]
    assert parse_ranking("3.5 stars", 3) == []
    assert parse_ranking("none of them", 3) == []


def test_reranker_raises_rerank_error_itself() -> None:
    reranker = LlmReranker(ScriptedModel([text("no idea")]), timeout=5)
    try:
        with pytest.raises(RerankError):
            reranker.rerank("q", [_hit()], 1)
    finally:
        reranker.close()


def _hit() -> SearchHit:
    from shelfhand.knowledge.types import Chunk

    chunk = Chunk(
        chunk_id="a::0",
        doc_id="a",
        chunk_index=0,
        text="t",
        title="a",
        section_path=(),
        page=None,
        source="a",
        start=0,
        end=1,
        content_hash="h",
        doc_type="text",
    )
    return SearchHit(chunk=chunk, score=1.0)


def test_app_builds_the_llm_reranker_over_the_chat_model(tmp_path: Path) -> None:
    env = {"SHELFHAND_RETRIEVAL_MODE": "keyword", "SHELFHAND_RERANK": "llm"}
    model = ScriptedModel([text("[2, 1]")])
    app = App(settings=Settings.load(tmp_path, env=env), model=model)
    kb = app.open_knowledge()
    try:
        assert kb.rerank_stage is not None
        assert isinstance(kb.rerank_stage.reranker, LlmReranker)
        kb.ingest_documents(document(n, t) for n, t in DOCS.items())
        found = kb.search_result("warranty", k=2)
        _, timings = list(found.hits), found.timings
        assert timings.rerank_reason is None and len(model.requests) == 1
    finally:
        kb.close()
