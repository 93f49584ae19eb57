"""Bridge spaces: a monolingual space's chunks embedded by a multilingual embedder too, so
that a question in another language finds them (a Chinese question, an English passage);
on every store of ``STORE_KINDS``."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from shelfhand import KnowledgeAgent
from shelfhand.core.context import UserContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.messages import Citation
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.knowledge.embeddings.local import default_router
from shelfhand.knowledge.embeddings.router import EmbeddingRouter, bridge_space
from shelfhand.knowledge.ingest.reports import IngestEvent
from shelfhand.knowledge.retrieval.hybrid import own_language_first
from shelfhand.knowledge.stack import EmbeddedKnowledge
from shelfhand.knowledge.types import Chunk, Document, SearchHit, Section
from support.embedders import BagEmbedder

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)

GLOSS = {"工单": "ticket", "附件": "attachment", "保存": "kept", "退货": "return", "天": "day"}


class GlossEmbedder(BagEmbedder):
    """A bag of words that reads the Chinese words of :data:`GLOSS` as their English ones: a
    multilingual space, as USE is one."""

    multilingual = True

    def __init__(self) -> None:
        super().__init__("gloss", dim=96)
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        glossed = []
        for text in texts:
            for zh, en in GLOSS.items():
                text = text.replace(zh, f" {en} ")
            glossed.append(text)
        return super().embed(glossed)


def doc(doc_id: str, text: str) -> Document:
    return Document(
        doc_id=doc_id,
        source=doc_id,
        title="",
        doc_type="markdown",
        sections=(Section(text=text),),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )


ENGLISH = doc("retention.md", "Each support ticket attachment is kept for two years.")
OTHER = doc("backups.md", "Database backups are encrypted in a second region.")
CHINESE = doc("退货.md", "退货须在七天内申请，商品须保持完好。")
QUESTION = "工单附件保存多久？"  # (no word of it in the English passage)


def router(*, bridge: bool, gloss: GlossEmbedder | None = None) -> EmbeddingRouter:
    return EmbeddingRouter(
        {"en": BagEmbedder("en-bag"), "zh": gloss or GlossEmbedder()},
        bridges={"en": "zh"} if bridge else None,
    )


def top(kb: EmbeddedKnowledge, query: str, mode: str = "hybrid") -> list[str]:
    hits = kb.retriever.search(query, k=3, mode=mode)  # type: ignore[arg-type]
    return [h.chunk.source for h in hits if h.relevance >= 0.3]


def test_a_bridge_names_two_different_spaces() -> None:
    r = router(bridge=True)
    assert r.spaces == ("en", "zh", "en_via_zh") and r.routed_spaces == ("en", "zh")
    assert r.bridge_for("en") == bridge_space("en", "zh") == "en_via_zh"
    assert r.bridged_from("en_via_zh") == "en" and r.bridged_from("zh") is None
    assert r.embedder("en_via_zh") is r.embedder("zh")
    with pytest.raises(InvalidArgumentError, match="two different spaces"):
        EmbeddingRouter({"en": BagEmbedder()}, bridges={"en": "en"})
    with pytest.raises(InvalidArgumentError, match="two different spaces"):
        EmbeddingRouter({"en": BagEmbedder()}, bridges={"en": "zh"})


def test_a_chinese_question_finds_an_english_passage_through_the_bridge(
    open_stack: OpenStack,
) -> None:
    kb = open_stack(router(bridge=True))
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    assert kb.store.count_vectors("en_via_zh") == kb.store.count_vectors("en") == 2
    assert kb.store.count_vectors("zh") == 1
    for mode in ("hybrid", "vector"):
        assert top(kb, QUESTION, mode)[:1] == ["retention.md"], mode
    # English questions leave the bridge alone: their own space serves them
    embedded, _ = kb.retriever._embed("How long is a ticket attachment kept?")
    assert embedded is not None and set(embedded) == {"en", "zh"}
    embedded, _ = kb.retriever._embed(QUESTION)
    assert embedded is not None and set(embedded) == {"en", "zh", "en_via_zh"}
    assert embedded["zh"] is embedded["en_via_zh"]  # (one embedding for both)
    kb.close()


def test_the_bridge_keeps_each_tenant_to_its_own_passages(open_stack: OpenStack) -> None:
    kb = open_stack(router(bridge=True))
    acme = dataclasses.replace(ENGLISH, tenant_id="acme")
    kb.ingestor.ingest_documents([acme, CHINESE])
    found = {
        tenant: [
            h.chunk.source
            for h in kb.retriever.search(
                QUESTION, k=3, mode="vector", user=UserContext(tenant_id=tenant, user_id="u")
            )
        ]
        for tenant in ("acme", "globex")
    }
    assert found["acme"][:1] == ["retention.md"]
    assert "retention.md" not in found["globex"]
    kb.close()


def test_without_the_bridge_the_chinese_question_misses_it(open_stack: OpenStack) -> None:
    kb = open_stack(router(bridge=False))
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    assert "retention.md" not in top(kb, QUESTION)
    kb.close()


def test_a_bridge_turned_off_is_left_alone_quietly(
    open_stack: OpenStack, caplog: pytest.LogCaptureFixture
) -> None:
    kb = open_stack(router(bridge=True))
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    kb.close()
    kb = open_stack(router(bridge=False))  # (cross_language = false: its vectors stay unused)
    with caplog.at_level(logging.WARNING):
        assert "retention.md" not in top(kb, QUESTION)
        assert top(kb, "How long is a support ticket attachment kept?")[:1] == ["retention.md"]
    assert not [r for r in caplog.records if "no embedder configured" in r.getMessage()]
    kb.close()


def test_a_workspace_embedded_before_the_bridge_is_filled_by_the_next_run(
    open_stack: OpenStack,
) -> None:
    kb = open_stack(router(bridge=False))
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    kb.close()
    gloss = GlossEmbedder()
    kb = open_stack(router(bridge=True, gloss=gloss))
    assert kb.store.count_vectors("en_via_zh") == 0
    # an ingest embeds its own new chunks in the bridge, and leaves the old ones to `embed`
    kb.ingestor.ingest_documents([doc("laptops.md", "Laptops are replaced every four years.")])
    assert kb.store.count_vectors("en_via_zh") == 1 and gloss.texts == 1
    events: list[IngestEvent] = []
    report = kb.ingestor.embed_pending(progress=events.append)
    assert report.error is None and report.pending_chunks == 0
    assert (report.embedded_chunks, report.bridged_chunks) == (0, 2)
    assert kb.store.count_vectors("en_via_zh") == 3 and gloss.texts == 3
    assert [(e.phase, e.done, e.total) for e in events] == [("embed", 2, 2)]
    kb.store.sync()
    assert top(kb, QUESTION)[:1] == ["retention.md"]
    before = gloss.texts
    kb.ingestor.embed_pending()  # filled: nothing is embedded again
    assert gloss.texts == before
    kb.close()


def test_a_failing_bridge_keeps_the_chunks_own_vectors_and_is_filled_later(
    open_stack: OpenStack,
) -> None:
    gloss = GlossEmbedder()
    kb = open_stack(router(bridge=True, gloss=gloss))
    kb.ingestor.ingest_documents([CHINESE])
    gloss.fail = True
    report = kb.ingestor.ingest_documents([ENGLISH])
    assert kb.store.count_pending() == 0  # English chunks embedded in their own space
    assert kb.store.count_vectors("en") == 1 and kb.store.count_vectors("en_via_zh") == 0
    assert report is not None
    assert top(kb, "How long is a support ticket attachment kept?")[:1] == ["retention.md"]
    failed = kb.ingestor.embed_pending()
    assert failed.error is not None and "bridge space" in failed.error
    assert "quota exceeded" in failed.error
    gloss.fail = False
    assert kb.ingestor.embed_pending().error is None
    assert kb.store.count_vectors("en_via_zh") == 1
    kb.store.sync()
    assert top(kb, QUESTION)[:1] == ["retention.md"]
    kb.close()


def test_filling_a_bridge_leaves_the_chunks_own_space_alone(
    open_stack: OpenStack, store_kind: str
) -> None:
    if store_kind != "embedded":
        pytest.skip("the vectors are searched in PostgreSQL or Qdrant")
    kb = open_stack(router(bridge=False), hnsw_threshold=1)
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    kb.close()
    kb = open_stack(router(bridge=True), hnsw_threshold=1)
    en = kb.vectors.space("en")  # type: ignore[attr-defined]
    version = en.version
    kb.ingestor.embed_pending()  # (the bridge's vectors alone: a change of their own)
    kb.store.sync()
    # (re-reading the chunks' own vectors with the bridge's would remove and add every
    # one of them again: at scale, rebuilding the space's HNSW graph once a batch)
    assert en.version == version and (en.live_count, en.n) == (2, 2)
    bridge = kb.vectors.space("en_via_zh")  # type: ignore[attr-defined]
    assert bridge.mode == "hnsw" and bridge.live_count == 2
    kb.close()


def hit(doc_id: str, text: str, n: int) -> SearchHit:
    chunk = Chunk(
        chunk_id=f"{doc_id}::{n}", doc_id=doc_id, chunk_index=n, text=text, title="",
        section_path=(), page=None, source=doc_id, start=0, end=len(text),
        content_hash=f"{doc_id}{n}", doc_type="markdown",
    )  # fmt: skip
    return SearchHit(chunk=chunk, score=1.0 - n / 10, relevance=0.5)


def test_a_passage_in_another_language_follows_its_documents_own_language_passages() -> None:
    hits = [
        hit("returns.md", "未拆封商品 30 天内可申请无理由退货。", 0),
        hit("returns.md", "Unopened items can be returned within 30 days.", 1),
        hit("retention.md", "Support tickets are kept for 2 years.", 2),
        hit("returns.md", "申请退货时请提供订单号。", 3),
        hit("faq.md", "退货运费由客户承担。", 4),
    ]
    ids = [h.chunk.chunk_id for h in own_language_first(hits, "怎么退货？")]
    # the English section of the bilingual policy after its Chinese ones; an English
    # document of its own keeps its place
    assert ids == [
        "returns.md::0", "retention.md::2", "returns.md::3", "returns.md::1", "faq.md::4",
    ]  # fmt: skip
    assert own_language_first(hits[1:3], "怎么退货？") == hits[1:3]
    # an English question: the Chinese sections of the same document go after the English one
    english = [h.chunk.chunk_id for h in own_language_first(hits[:2], "How do I return it?")]
    assert english == ["returns.md::1", "returns.md::0"]


@pytest.mark.anyio
async def test_without_a_model_a_chinese_question_is_answered_from_the_english_passage(
    open_stack: OpenStack,
) -> None:
    kb = open_stack(router(bridge=True), min_relevance=0.25)
    kb.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    result = await KnowledgeAgent(kb.retriever, extractive=True).run(QUESTION)
    assert result.extractive and result.fallback_reason == "no_model"
    assert result.output.splitlines() == [
        "摘自文档：",
        "- Each support ticket attachment is kept for two years. [1]",
    ]
    assert result.grounding is not None and result.grounding.grounded
    passage = result.citations[0]  # (its relevance kept where a session stores it)
    assert passage.relevance is not None and passage.relevance >= 0.25
    assert Citation.from_dict(passage.to_dict()) == passage
    # a question the English passages do not answer is still not covered
    result = await KnowledgeAgent(kb.retriever, extractive=True).run("退货运费谁出？")
    assert not result.extractive and result.output.startswith("文档中没有这方面的内容")


@pytest.mark.slow
def test_with_the_packaged_embedders_a_translation_does_not_take_a_passages_place(
    tmp_path: Path,
) -> None:
    # the samples' returns policy: its rules in Chinese and a summary in English, which the
    # bridge lifted into the top five of "怎么退货？" in place of the section on 订单号
    kb = KnowledgeBase(tmp_path / "ws", default_router())
    try:
        kb.ingest([sample_corpus()])
        hits = kb.search("怎么退货？", k=5)
        assert len(hits) == 5
        assert all(h.chunk.source == "projector/returns-policy.md" for h in hits)
        assert not [h.chunk.text for h in hits if "Unopened items" in h.chunk.text]
        assert any("订单号" in h.chunk.text for h in hits)
        # the summary is found by an English question, and by a Chinese one past the five
        english = [h.chunk.text for h in kb.search("How do I return an item?", k=5)]
        assert any("Unopened items" in text for text in english)
        assert any("Unopened items" in h.chunk.text for h in kb.search("怎么退货？", k=8))
    finally:
        kb.close()


def test_status_counts_the_bridge_vectors_apart(tmp_path: Path) -> None:
    """``vectors`` counts one vector a chunk per space it was embedded into for its own
    language, and the bridge's apart: 2 English chunks and 1 Chinese give 3 and 2."""
    kb = KnowledgeBase(tmp_path / "ws", router(bridge=True))
    try:
        kb._stack.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
        status = kb.status()
        assert (status.chunks, status.vectors, status.bridge_vectors) == (3, 3, 2)
    finally:
        kb.close()
    bridgeless = KnowledgeBase(tmp_path / "ws2", router(bridge=False))
    try:
        bridgeless._stack.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
        assert (bridgeless.status().vectors, bridgeless.status().bridge_vectors) == (3, 0)
    finally:
        bridgeless.close()


def test_the_qdrant_client_backend_searches_the_bridge(tmp_path: Path) -> None:
    """The ``qdrant-client`` backend (the one for a Qdrant server; its local mode here) holds
    the bridge as a named vector as Qdrant Edge does, tenant by tenant."""
    from shelfhand.knowledge.stack import open_embedded_store

    kb = open_embedded_store(tmp_path / "ws", router(bridge=True), qdrant_url=":memory:")
    try:
        acme = dataclasses.replace(ENGLISH, tenant_id="acme")
        kb.ingestor.ingest_documents([acme, OTHER, CHINESE])
        for mode in ("hybrid", "vector"):
            hits = kb.retriever.search(
                QUESTION, k=3, mode=mode, user=UserContext(tenant_id="acme", user_id="u")
            )
            found = [h.chunk.source for h in hits if h.relevance >= 0.3]  # (not by chance)
            assert found[:1] == ["retention.md"], mode
        other = kb.retriever.search(
            QUESTION, k=3, mode="vector", user=UserContext(tenant_id="globex", user_id="u")
        )
        assert "retention.md" not in [h.chunk.source for h in other]
    finally:
        kb.close()


@pytest.mark.parametrize("bulk", [True, False])
def test_an_import_into_postgresql_carries_the_bridge(
    pg_url: str, tmp_path: Path, bulk: bool
) -> None:
    """``shelfhand pg-import``'s copy of a workspace holds the bridge's vectors too: the
    Chinese question finds the English passage in PostgreSQL as it did in the workspace."""
    from shelfhand.knowledge.stack import open_embedded_store, open_pg_store
    from shelfhand.knowledge.stores.pg.transfer import import_workspace

    local = open_embedded_store(tmp_path / "ws", router(bridge=True))
    local.ingestor.ingest_documents([ENGLISH, OTHER, CHINESE])
    local.close()
    pg = open_pg_store(pg_url, router(bridge=True))
    try:
        import_workspace(tmp_path / "ws", pg.store, bulk=bulk)  # type: ignore[arg-type]
        assert pg.store.count_vectors("en_via_zh") == pg.store.count_vectors("en") == 2
        assert pg.store.count_pending() == 0
        assert top(pg, QUESTION, "vector")[:1] == ["retention.md"]
        # and the English chunks keep their own space: an English question finds them there
        english = "How long is a support ticket attachment kept?"
        assert top(pg, english, "vector")[:1] == ["retention.md"]
    finally:
        pg.close()
