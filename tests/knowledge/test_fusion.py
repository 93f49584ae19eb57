"""Convex fusion, per-query weights, relevance and the ``min_relevance`` cut."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError, KnowledgeError
from shelfhand.core.settings import (
    DEFAULT_KEYWORD_COMMON_SHARE,
    DEFAULT_MIN_RELEVANCE,
    Settings,
)
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.retrieval.fusion import convex_fusion
from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
from shelfhand.knowledge.scoring import bm25_idf, keyword_evidence, ranking_terms, relevance
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.types import Document
from support.embedders import BagEmbedder
from support.knowledge import text_document


def doc(doc_id: str, text: str) -> Document:
    return text_document(doc_id, text)


CORPUS = [
    doc("warranty.md", "The projector warranty lasts twenty-four months from the purchase date."),
    doc("returns.md", "Unopened items may be returned within thirty days for a full refund."),
    doc("errors.md", "Error E-203 means the lamp is overheating; clean the air filter."),
    doc("lens.md", "Clean the lens with a dry microfibre cloth; never use alcohol."),
    doc("保修.md", "投影仪整机保修期为24个月，光源保修12个月，人为损坏不在保修范围内。"),
    doc("退货.md", "未拆封商品30天内可以退货，退款在7个工作日内到账。"),
    doc("风扇.md", "风扇不转时请先断电，清理进风口的灰尘后再开机。"),
]

UNRELATED = [
    "What is the capital of France?",
    "How do I bake sourdough bread?",
    "今天北京的天气怎么样？",
    "红烧肉怎么做才好吃？",
]
RELATED = {
    "How long is the projector warranty?": "warranty.md",
    "How do I clean the lens?": "lens.md",
    "保修期多久？": "保修.md",
    "退款多久到账？": "退货.md",
}


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[EmbeddedKnowledge]:
    kb = open_embedded_store(
        tmp_path, EmbeddingRouter({"default": BagEmbedder(dim=1024)}), min_relevance=0.25
    )
    kb.ingestor.ingest_documents(CORPUS)
    yield kb
    kb.close()


# -- fusion math ----------------------------------------------------------------------------


def test_convex_fusion_scales_bm25_by_the_best_score_and_adds_weighted_cosines() -> None:
    fused = dict(
        convex_fusion(
            [("a", 10.0), ("b", 5.0)],
            [({"b": 0.8, "c": 0.6}, 1.0), ({"a": 0.4}, 0.5)],
            alpha=0.4,
        )
    )
    assert fused["a"] == pytest.approx(0.4 * 1.0 + 0.6 * 0.5 * 0.4)
    assert fused["b"] == pytest.approx(0.4 * 0.5 + 0.6 * 0.8)
    assert fused["c"] == pytest.approx(0.6 * 0.6)


def test_convex_fusion_ranks_what_both_sides_like_above_a_one_sided_top_hit() -> None:
    ranked = convex_fusion([("kw-only", 9.0), ("both", 7.0)], [({"both": 0.7}, 1.0)], alpha=0.4)
    assert [key for key, _ in ranked] == ["both", "kw-only"]


def test_negative_cosines_never_lower_a_keyword_hit() -> None:
    fused = dict(convex_fusion([("a", 2.0)], [({"a": -0.3}, 1.0)], alpha=0.5))
    assert fused["a"] == pytest.approx(0.5)


def test_keyword_evidence_is_the_share_of_query_idf_covered() -> None:
    rare, common = bm25_idf(1, 1000), bm25_idf(500, 1000)
    assert rare > common > 0
    assert keyword_evidence(rare, rare + common) == pytest.approx(rare / (rare + common))
    assert keyword_evidence(50.0, rare) == 1.0
    assert keyword_evidence(0.0, rare) == 0.0
    assert keyword_evidence(3.0, 0.0) == 0.0


def test_relevance_is_the_stronger_signal_clipped_to_0_1() -> None:
    assert relevance(0.3, 0.6) == 0.6
    assert relevance(0.7, None) == 0.7
    assert relevance(None, None) == 0.0
    assert relevance(-0.2, None) == 0.0
    assert relevance(1.3, 0.1) == 1.0


# -- the cut on a real workspace ---------------------------------------------------------------


@pytest.mark.parametrize("query", UNRELATED)
def test_a_question_the_documents_do_not_answer_finds_nothing(
    kb: EmbeddedKnowledge, query: str
) -> None:
    for mode in ("hybrid", "keyword", "vector"):
        assert kb.retriever.search(query, k=5, mode=mode) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(("query", "source"), RELATED.items())
def test_an_answerable_question_keeps_its_relevant_hit_first(
    kb: EmbeddedKnowledge, query: str, source: str
) -> None:
    for mode in ("hybrid", "keyword", "vector"):
        hits = kb.retriever.search(query, k=5, mode=mode)  # type: ignore[arg-type]
        assert hits and hits[0].chunk.source == source, mode
        assert all(h.relevance is not None and h.relevance >= 0.25 for h in hits)


def test_without_a_threshold_the_unrelated_query_gets_weak_hits(
    kb: EmbeddedKnowledge,
) -> None:
    keep_all = replace(kb.retriever.options, min_relevance=0.0)
    hits = kb.retriever.search("How do I bake sourdough bread at home?", k=3, options=keep_all)
    assert all((h.relevance or 0.0) < 0.25 for h in hits)


class TableEmbedder:
    """Fixed vectors per text: the query points along x, each passage at a chosen cosine."""

    name = "table"
    dim = 3

    def __init__(self, table: dict[str, tuple[float, float, float]]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray([1.0, 0.0, 0.0], dtype=np.float32)


def test_a_keyword_hit_outside_the_vector_top_list_gets_its_exact_cosine(
    tmp_path: Path,
) -> None:
    # One candidate per side: the keyword side finds only "a" (cosine 0.6), the vector side's
    # top one is "b" (cosine 0.9). Scored with nothing for "a"'s vector, "b" would win
    # (0.4 * 0 + 0.6 * 0.9 > 0.4 * 1); with "a"'s exact cosine, "a" wins.
    texts = {"a": "lamp overheating", "b": "fan noise", "c": "remote control"}
    embedder = TableEmbedder(
        {texts["a"]: (0.6, 0.8, 0.0), texts["b"]: (0.9, 0.43589, 0.0), texts["c"]: (0, 0, 1)}
    )
    kb = open_embedded_store(tmp_path, EmbeddingRouter({"t": embedder}))
    try:
        kb.ingestor.ingest_documents([doc(name, text) for name, text in texts.items()])
        retriever = kb.retriever
        one = replace(retriever.options, candidates_factor=1)
        retriever.keyword_weight = 0.4
        [hit] = retriever.search("overheating", k=1, options=one)
        assert hit.chunk.source == "a"
        assert hit.vector_rank is None and hit.keyword_rank == 1
        assert hit.score == pytest.approx(0.4 + 0.6 * 0.6, abs=1e-4)
        [vector_hit] = retriever.search("overheating", k=1, mode="vector", options=one)
        assert vector_hit.chunk.source == "b"
        assert vector_hit.relevance == pytest.approx(0.9, abs=1e-4)
    finally:
        kb.close()


def test_out_of_range_thresholds_are_refused(kb: EmbeddedKnowledge) -> None:
    with pytest.raises(KnowledgeError, match="min_relevance"):
        HybridRetriever(kb.store, kb.keyword, kb.vectors, None, min_relevance=1.5)
    with pytest.raises(KnowledgeError, match="keyword_weight"):
        HybridRetriever(kb.store, kb.keyword, kb.vectors, None, keyword_weight=-0.1)


def test_a_fixed_keyword_weight_overrides_the_per_query_choice(kb: EmbeddedKnowledge) -> None:
    kb.retriever.keyword_weight = 1.0
    hybrid = kb.retriever.search("lens cloth", k=3)
    keyword = kb.retriever.search("lens cloth", k=3, mode="keyword")
    assert [h.chunk.source for h in hybrid][: len(keyword)] == [h.chunk.source for h in keyword]


# -- keyword-only workspaces and settings ------------------------------------------------------


def test_a_keyword_only_knowledge_base_applies_the_same_cut(tmp_path: Path) -> None:
    with KnowledgeBase(tmp_path, None, mode="keyword", min_relevance=0.25) as kb:
        kb.ingest_documents(CORPUS)
        for query in UNRELATED:
            assert kb.search(query, k=5) == []
        for query, source in RELATED.items():
            hits = kb.search(query, k=5)
            assert hits[0].chunk.source == source
            assert hits[0].relevance is not None and 0.25 <= hits[0].relevance <= 1.0


def test_min_relevance_comes_from_env_then_file_then_the_calibrated_default(
    tmp_path: Path,
) -> None:
    assert Settings.load(tmp_path, env={}).min_relevance == DEFAULT_MIN_RELEVANCE
    (tmp_path / "shelfhand.toml").write_text("[shelfhand]\nmin_relevance = 0.4\n")
    assert Settings.load(tmp_path, env={}).min_relevance == 0.4
    env = {"SHELFHAND_MIN_RELEVANCE": "0"}
    assert Settings.load(tmp_path, env=env).min_relevance == 0.0


@pytest.mark.parametrize("value", ["1.5", "-0.1", "high", "nan"])
def test_a_bad_min_relevance_fails_at_start_up(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigurationError, match=r"min_relevance|invalid number"):
        Settings.load(tmp_path, env={"SHELFHAND_MIN_RELEVANCE": value})


def test_relevance_is_comparable_across_queries(kb: EmbeddedKnowledge) -> None:
    keep_all = replace(kb.retriever.options, min_relevance=0.0)
    # The same passage: fully matched by one query, a quarter matched by the other.
    strong = kb.retriever.search("lamp overheating", k=1, options=keep_all)[0]
    weak = kb.retriever.search("lamp sourdough bread baking", k=1, options=keep_all)[0]
    assert strong.chunk.source == weak.chunk.source == "errors.md"
    assert strong.relevance is not None and weak.relevance is not None
    assert strong.relevance > 0.5 > weak.relevance
    assert not math.isnan(weak.relevance)


@pytest.mark.parametrize("hnsw_threshold", [1_000, 2])
def test_similarities_read_indexed_vectors_exact_or_hnsw(
    tmp_path: Path, hnsw_threshold: int
) -> None:
    texts = {"a": "lamp overheating", "b": "fan noise", "c": "remote control"}
    embedder = TableEmbedder(
        {texts["a"]: (0.6, 0.8, 0.0), texts["b"]: (0.9, 0.43589, 0.0), texts["c"]: (0, 0, 1)}
    )
    kb = open_embedded_store(
        tmp_path, EmbeddingRouter({"t": embedder}), hnsw_threshold=hnsw_threshold
    )
    try:
        kb.ingestor.ingest_documents([doc(name, text) for name, text in texts.items()])
        rowid = {c.chunk.source: c.rowid for c in kb.store.iter_chunks()}
        assert kb.vectors.space("t").mode == ("hnsw" if hnsw_threshold == 2 else "exact")  # type: ignore[union-attr]
        sims = kb.vectors.similarities(
            "t", np.asarray([1.0, 0.0, 0.0], dtype=np.float32), [rowid["a"], rowid["c"], 10**9]
        )
        assert sims == {rowid["a"]: pytest.approx(0.6), rowid["c"]: pytest.approx(0.0)}
        assert kb.vectors.similarities("nope", np.zeros(3, dtype=np.float32), [rowid["a"]]) == {}
    finally:
        kb.close()


def test_common_terms_do_not_rank_when_a_rarer_term_does() -> None:
    terms = ["cell", "activ", "telomer", "xyz"]
    dfs = [500, 150, 3, 0]
    assert ranking_terms(terms, dfs, 1000, 0.1) == ["telomer", "xyz"]
    assert ranking_terms(terms, dfs, 1000, 0.2) == ["activ", "telomer", "xyz"]
    assert ranking_terms(terms, dfs, 1000, 1.0) == terms  # off
    # no rarer term found in the index: every term ranks
    assert ranking_terms(["cell", "xyz"], [500, 0], 1000, 0.1) == ["cell", "xyz"]
    assert ranking_terms(["cell", "activ"], [500, 150], 1000, 0.1) == ["cell", "activ"]
    assert ranking_terms(["cell"], [5], 0, 0.1) == ["cell"]  # empty index
    # the limit is inclusive
    assert ranking_terms(["a", "b"], [100, 1], 1000, 0.1) == ["a", "b"]


def test_keyword_common_share_comes_from_env_then_file_and_reaches_the_index(
    tmp_path: Path,
) -> None:
    assert Settings.load(tmp_path, env={}).keyword_common_share == DEFAULT_KEYWORD_COMMON_SHARE
    (tmp_path / "shelfhand.toml").write_text("[shelfhand]\nkeyword_common_share = 0.3\n")
    assert Settings.load(tmp_path, env={}).keyword_common_share == 0.3
    env = {"SHELFHAND_KEYWORD_COMMON_SHARE": "1", "SHELFHAND_RETRIEVAL_MODE": "keyword"}
    settings = Settings.load(tmp_path, env=env)
    assert settings.keyword_common_share == 1.0
    with App(settings).open_knowledge(embed=False) as kb:
        assert kb._stack.keyword.common_share == 1.0


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "most", "nan"])
def test_a_bad_keyword_common_share_fails_at_start_up(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigurationError, match=r"keyword_common_share|invalid number"):
        Settings.load(tmp_path, env={"SHELFHAND_KEYWORD_COMMON_SHARE": value})
