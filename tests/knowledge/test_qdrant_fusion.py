"""The ``rrf`` fusion choice on Qdrant: the server fuses the whole hybrid search in one request
(prefetch + weighted RRF), and the hits equal those of the same RRF computed here from the two
sides' separate queries, on both backends (Qdrant Edge in process, qdrant-client's local mode),
for English, Chinese and identifier queries, callers of two tenants, and two vector spaces of
different weights. Convex fusion stays the default and is not fused by the server."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_qdrant import doc

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, KnowledgeError
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.router import EmbeddingRouter, Vectors
from shelfhand.knowledge.ingest.ingestor import Ingestor
from shelfhand.knowledge.protocols import FusedSearch, KeywordIndex
from shelfhand.knowledge.retrieval.fusion import rrf, weighted_rrf
from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
from shelfhand.knowledge.stores.qdrant import QdrantIndex, QdrantKeywordSearch, QdrantVectorSearch
from shelfhand.knowledge.stores.qdrant.edge import EdgeBackend
from shelfhand.knowledge.stores.qdrant.server import ServerBackend
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.types import Scope, SearchHit, SearchOptions
from shelfhand.testing import HashingEmbedder

pytest.importorskip("qdrant_edge")


CORPUS = [
    doc("faults.md", "Fault codes", "E-203 means the lamp is overheating; clean the filter."),
    doc("fan.md", "Fan", "The fan runs faster when the lamp is hot; E-204 is a fan fault."),
    doc("filter.md", "Filter", "Clean the filter every month so the lamp stays cool."),
    doc("lamp.md", "Lamp", "A lamp that flickers needs a new ballast, not a new filter."),
    doc("bridge.md", "桥梁", "长江大桥是一座公路铁路两用桥。", "南京的长江大桥建成于 1968 年。"),
    doc("river.md", "河流", "长江是中国最长的河流，大桥很多。"),
    doc("rain.md", "天气", "长江流域夏季多雨，洪水季节桥梁要检查。"),
    doc("other.md", "Fault codes", "E-203 at globex means the pump is dry.", tenant="globex"),
    doc("pump.md", "Pump", "A dry pump overheats; E-205 is the pump's own code.", tenant="globex"),
]
QUERIES = ["What does E-203 mean?", "lamp filter overheating", "长江大桥", "长江 洪水 桥梁"]
CALLERS = [
    UserContext(tenant_id="acme", user_id="u1"),
    UserContext(tenant_id="globex", user_id="u2"),
]


class Distinct(HashingEmbedder):
    """Hashing vectors nudged by a text-seeded direction: no two passages tie on cosine
    (Qdrant orders the ties of one side as it finds them, this module by rowid)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        base = np.asarray(super().embed(texts), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode()).digest()[:4], "big")
            base[i] += 0.05 * np.random.default_rng(seed).standard_normal(self.dim)
        return base / np.maximum(np.linalg.norm(base, axis=1, keepdims=True), 1e-9)


class ClientSide:
    """The same keyword index without its server-side fusion: the retriever fuses here."""

    def __init__(self, inner: QdrantKeywordSearch) -> None:
        self.inner = inner
        self.common_share = inner.common_share

    def num_docs(self) -> int:
        return self.inner.num_docs()

    def search(self, *args: object, **kw: object) -> list[tuple[int, float]]:
        return self.inner.search(*args, **kw)  # type: ignore[arg-type]

    def search_exact(self, *args: object, **kw: object) -> list[tuple[int, float]]:
        return self.inner.search_exact(*args, **kw)  # type: ignore[arg-type]

    def doc_freqs(
        self, query_tokens: Sequence[str], scope: Scope | None = None
    ) -> tuple[int, list[int]]:
        return self.inner.doc_freqs(query_tokens, scope)


@pytest.fixture
def indexes(
    tmp_path: Path,
) -> Iterator[tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]]]:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    edge = QdrantIndex(EdgeBackend(tmp_path / "edge"))
    local = QdrantIndex(ServerBackend(":memory:", collection="fusion"))
    store.attach(edge, local)
    # two spaces: the one the query's language routes to weighs 1, the other 0.5
    router = EmbeddingRouter({"en": Distinct(64), "zh": Distinct(48)})
    Ingestor(store, router).ingest_documents(CORPUS)
    yield store, router, [edge, local]
    store.close()


def retriever(
    store: SqliteKnowledgeStore, router: EmbeddingRouter, index: QdrantIndex, *, server: bool
) -> HybridRetriever:
    keyword = QdrantKeywordSearch(index, exact=True)
    side: KeywordIndex = keyword if server else ClientSide(keyword)
    return HybridRetriever(
        store, side, QdrantVectorSearch(index, exact=True), router, fusion="rrf", overlap_workers=0
    )


def summary(hits: Sequence[SearchHit]) -> list[tuple[str, int | None, int | None, bool]]:
    return [(h.chunk.chunk_id, h.keyword_rank, h.vector_rank, h.exact) for h in hits]


def test_qdrant_fuses_a_hybrid_search_as_the_same_rrf_computed_here(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, backends = indexes
    results: list[list[list[SearchHit]]] = []
    for index in backends:
        server = retriever(store, router, index, server=True)
        client = retriever(store, router, index, server=False)
        assert isinstance(server.keyword_index, FusedSearch)
        assert not isinstance(client.keyword_index, FusedSearch)
        per_backend = []
        for query in QUERIES:
            for user in CALLERS:
                fused = server.search(query, k=4, user=user)
                here = client.search(query, k=4, user=user)
                assert summary(fused) == summary(here), (query, user)
                assert [h.score for h in fused] == pytest.approx([h.score for h in here])
                assert [h.relevance for h in fused] == pytest.approx(
                    [h.relevance for h in here], abs=1e-5
                )
                assert {h.chunk.tenant_id for h in fused} <= {user.tenant_id}
                per_backend.append(fused)
        results.append(per_backend)
    edge, local = results  # the two translations agree with each other
    assert [summary(h) for h in edge] == [summary(h) for h in local]
    found = {h.chunk.doc_id for hits in edge for h in hits}
    assert {"faults.md", "bridge.md", "other.md"} <= found


def test_an_identifier_goes_first_and_the_threshold_holds_with_server_side_fusion(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, (edge, _) = indexes
    search = retriever(store, router, edge, server=True)
    acme = CALLERS[0]
    hits = search.search("the fan: what does E-204 mean?", k=3, user=acme)
    assert hits[0].chunk.doc_id == "fan.md" and hits[0].exact
    loose = search.search("lamp filter overheating", k=4, user=acme)
    strengths = [h.relevance or 0.0 for h in loose]
    cut = (min(strengths) + max(strengths)) / 2
    assert min(strengths) < cut < max(strengths)
    options = SearchOptions(fusion="rrf", min_relevance=cut)
    strict = search.search_result("lamp filter overheating", k=4, user=acme, options=options)
    # the same hits, in the same order, less those under the threshold
    assert summary(strict.hits) == summary([h for h in loose if (h.relevance or 0.0) >= cut])


def test_convex_stays_the_default_and_an_unknown_fusion_is_refused(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, (edge, _) = indexes
    search = HybridRetriever(store, QdrantKeywordSearch(edge), QdrantVectorSearch(edge), router)
    assert search.options.fusion == "convex"
    convex = search.search("lamp filter overheating", k=4, user=CALLERS[0])
    rrf_hits = search.search_result(
        "lamp filter overheating", k=4, user=CALLERS[0], options=SearchOptions(fusion="rrf")
    ).hits
    assert {h.chunk.doc_id for h in convex} == {h.chunk.doc_id for h in rrf_hits}
    assert [h.score for h in convex] != pytest.approx([h.score for h in rrf_hits])
    with pytest.raises(KnowledgeError, match="unknown fusion 'max'"):
        SearchOptions(fusion="max")  # type: ignore[arg-type]


def test_weighted_rrf_is_rrf_at_weight_one_and_drops_a_list_of_weight_zero() -> None:
    lists = [[3, 1, 2], [1, 4]]
    same, classic = weighted_rrf(lists, [1.0, 1.0]), rrf(lists, k=60)
    assert [r for r, _ in same] == [r for r, _ in classic] == [1, 3, 4, 2]
    assert [s for _, s in same] == pytest.approx([s for _, s in classic])
    assert [r for r, _ in weighted_rrf(lists, [1.0, 0.0])] == [3, 1, 2]
    # a list of weight 0.5 counts a rank r as 2r: its first equals the other's second
    assert weighted_rrf([[7], [8, 9]], [0.5, 1.0])[1:] == [(7, 1 / 62), (9, 1 / 62)]


def test_the_fusion_setting_reaches_the_app_s_searches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELFHAND_FUSION", "rrf")
    settings = Settings.load(tmp_path / "ws")
    assert settings.fusion == "rrf"
    kb = App(replace(settings, qdrant_url=str(tmp_path / "q"))).open_knowledge(embed=False)
    try:
        assert kb._stack.retriever.options.fusion == "rrf"
    finally:
        kb.close()
    monkeypatch.setenv("SHELFHAND_FUSION", "max")
    with pytest.raises(ConfigurationError, match="SHELFHAND_FUSION"):
        Settings.load(tmp_path / "ws")


def test_two_tenants_fused_by_qdrant_at_once_each_get_what_they_get_alone(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, (edge, _) = indexes
    search = retriever(store, router, edge, server=True)
    alone = {u.tenant_id: summary(search.search("E-203 lamp pump", k=4, user=u)) for u in CALLERS}
    together: dict[str, list[Any]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(CALLERS) * 2)

    def run(user: UserContext) -> None:
        try:
            start.wait(timeout=10)
            for _ in range(5):
                hits = search.search("E-203 lamp pump", k=4, user=user)
                assert {h.chunk.tenant_id for h in hits} == {user.tenant_id}
                together.setdefault(user.tenant_id, []).append(summary(hits))
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(u,)) for u in CALLERS * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    for tenant, runs in together.items():
        assert len(runs) == 10 and all(r == alone[tenant] for r in runs)


def test_a_one_sided_search_keeps_its_own_scores_whatever_the_fusion(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, (edge, _) = indexes
    search = retriever(store, router, edge, server=True)
    for mode in ("keyword", "vector"):
        args: dict[str, Any] = {"k": 3, "user": CALLERS[0], "mode": mode}
        rrf_hits = search.search_result("lamp filter", **args).hits
        convex = search.search_result("lamp filter", options=SearchOptions(), **args).hits
        assert summary(rrf_hits) == summary(convex) and rrf_hits
        assert [h.score for h in rrf_hits] == [h.score for h in convex]


def test_an_exact_search_keeps_its_dense_stages_exact_when_qdrant_fuses_them(
    indexes: tuple[SqliteKnowledgeStore, EmbeddingRouter, list[QdrantIndex]],
) -> None:
    store, router, backends = indexes
    edge = backends[0]
    sent: list[Any] = []
    real = edge.backend.query_fused

    def recording(fused: Any, also: Any) -> Any:
        sent.append(fused)
        return real(fused, also)

    edge.backend.query_fused = recording  # type: ignore[method-assign]
    try:
        for exact in (True, False):
            keyword = QdrantKeywordSearch(edge, exact=exact)
            vectors = QdrantVectorSearch(edge, exact=exact)
            search = HybridRetriever(store, keyword, vectors, router, fusion="rrf")
            assert search.search("长江大桥", k=3, user=CALLERS[0])
            dense = [q for q in sent[-1].stages if q.using != "keyword"]
            assert dense and all(q.exact is exact for q in dense)
    finally:
        del edge.backend.query_fused
