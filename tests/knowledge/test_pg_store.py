"""What is specific to the PostgreSQL store: BM25 equal to the embedded index's, filtered
vector search that still fills k, concurrent writers, pg-import, provider modes and outages.
(The behaviour both stores share is tested on both: ``open_stack`` in conftest.py.)"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.core.settings import Settings
from shelfhand.dev.services import LocalPostgres, free_port
from shelfhand.knowledge.analysis import tokenize_query
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import open_embedded_store, open_pg_store
from shelfhand.knowledge.stores.pg import PgKeywordIndex
from shelfhand.knowledge.stores.pg.transfer import import_workspace
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

TEXTS = [
    ("warranty.md", "# Warranty\n\nThe projector warranty lasts twelve months from purchase."),
    ("returns.md", "Unopened items may be returned within seven days of purchase."),
    ("errors.md", "## E-203\n\nError E-203 means the lamp is overheating; clean the filter."),
    ("lamp.md", "Replace the lamp every 3000 hours. The lamp lamp lamp wears out."),
    ("保修.md", "# 保修政策\n\n投影仪保修期为12个月，人为损坏不在保修范围内。"),
    ("退货.md", "拆封后7天内可退货，保修期内免费维修。"),
    ("sku.md", "SKU2024-011 is the ceiling mount; SKU2024-012 the wall mount."),
]


def docs() -> list[Document]:
    return [
        Document(
            doc_id=name,
            source=name,
            title=name.split(".")[0],
            doc_type="markdown",
            sections=(Section(text=text),),
            content_hash=hashlib.sha256(text.encode()).hexdigest(),
            permission_tags=("sales",) if name == "sku.md" else (),
        )
        for name, text in TEXTS
    ]


def router() -> EmbeddingRouter:
    return EmbeddingRouter({"any": HashingEmbedder()})


@pytest.mark.parametrize(
    "query", ["projector warranty", "lamp", "保修期多久", "E-203 overheating", "purchase days"]
)
def test_bm25_in_sql_ranks_and_scores_like_the_embedded_index(
    pg_url: str, tmp_path: Path, query: str
) -> None:
    embedded = open_embedded_store(tmp_path, None)
    pg = open_pg_store(pg_url, None)
    for stack in (embedded, pg):
        stack.ingestor.ingest_documents(docs())
    tokens = tokenize_query(query)
    admin = Scope(tenant_id="default", roles=["admin"])
    want = embedded.keyword.search(tokens, 10, scope=admin)
    got = pg.keyword.search(tokens, 10, scope=admin)
    source = {r: c.source for r, c in embedded.store.chunk_map([r for r, _ in want]).items()}
    pg_source = {r: c.source for r, c in pg.store.chunk_map([r for r, _ in got]).items()}
    assert [pg_source[r] for r, _ in got] == [source[r] for r, _ in want]
    # tantivy stores field lengths in one byte (rounded): scores agree to a few percent
    for (_, a), (_, b) in zip(want, got, strict=True):
        assert b == pytest.approx(a, rel=0.05)
    assert pg.keyword.doc_freqs(tokens) == embedded.keyword.doc_freqs(tokens)
    embedded.close()
    pg.close()


def test_exact_identifier_lookup_honours_the_acl(pg_url: str) -> None:
    kb = open_pg_store(pg_url, router())
    kb.ingestor.ingest_documents(docs())
    anyone = kb.retriever.search("SKU2024-011 mount", k=3)
    assert all(h.chunk.source != "sku.md" for h in anyone)
    sales = UserContext(tenant_id="default", user_id="u", roles=["sales"])
    [first, *_] = kb.retriever.search("SKU2024-011 mount", k=3, user=sales)
    assert first.chunk.source == "sku.md" and first.exact
    kb.close()


def test_a_selective_filter_still_fills_k_from_the_vector_index(pg_url: str) -> None:
    kb = open_pg_store(pg_url, None)
    rng = np.random.default_rng(7)
    for i in range(300):
        tags = ("rare",) if i % 50 == 0 else ("common",)
        text = f"passage {i} about topic {i % 17}"
        doc = Document(
            doc_id=f"d{i}",
            source=f"d{i}",
            title="",
            doc_type="markdown",
            sections=(Section(text=text),),
            content_hash=str(i),
            permission_tags=tags,
        )
        chunk = Chunk(
            chunk_id=f"d{i}::0",
            doc_id=f"d{i}",
            chunk_index=0,
            text=text,
            title="",
            section_path=(),
            page=None,
            source=f"d{i}",
            start=0,
            end=len(text),
            content_hash=str(i),
            doc_type="markdown",
            permission_tags=tags,
        )
        vec = rng.normal(size=(1, 16)).astype(np.float32)
        kb.store.upsert_document(doc, [chunk], {"s": ([0], vec / np.linalg.norm(vec))})
    query = rng.normal(size=16).astype(np.float32)
    hits = kb.vectors.search("s", query, 5, scope=Scope(roles=["rare"]))
    assert len(hits) == 5  # 6 rare chunks: the filter hides 98% of the graph
    rare = kb.store.allowed_rowids(Scope(roles=["rare"])).tolist()
    assert {r for r, _ in hits} <= set(rare)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    kb.close()


def test_concurrent_writers_keep_the_statistics_exact(pg_url: str) -> None:
    stacks = [open_pg_store(pg_url, None) for _ in range(3)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(10):
                text = f"shared words and own words w{n}x{i} 保修"
                stacks[n].ingestor.ingest_documents(
                    [
                        Document(
                            doc_id=f"{n}-{i}",
                            source=f"{n}-{i}",
                            title="",
                            doc_type="markdown",
                            sections=(Section(text=text),),
                            content_hash=text,
                        )
                    ]
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    n, [df_shared, df_own] = stacks[0].keyword.doc_freqs(["share", "w1x3"])
    assert (n, df_shared, df_own) == (30, 30, 1)
    stacks[0].ingestor.forget("1-3")
    assert stacks[1].keyword.doc_freqs(["share", "w1x3"]) == (29, [29, 0])
    for s in stacks:
        s.close()


def test_pg_import_moves_a_workspace_without_re_embedding(pg_url: str, tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    embedded = open_embedded_store(tmp_path, EmbeddingRouter({"any": embedder}))
    embedded.ingestor.ingest_documents(docs())
    embedded.store.set_root_path("manuals", "/srv/manuals")
    want = [h.chunk.chunk_id for h in embedded.retriever.search("保修期多久", k=2)]
    embedded.close()

    class Counting(HashingEmbedder):
        documents = 0

        def embed(self, texts: list[str]) -> np.ndarray:  # type: ignore[override]
            self.documents += len(texts)
            return super().embed(texts)

        def embed_query(self, text: str) -> np.ndarray:  # type: ignore[override]
            return super().embed([text])[0]

    counting = Counting()
    pg = open_pg_store(pg_url, EmbeddingRouter({"any": counting}))
    report = import_workspace(tmp_path, pg.store)  # type: ignore[arg-type]
    assert (report.documents, report.chunks, report.vectors, report.skipped) == (7, 7, 7, 0)
    again = import_workspace(tmp_path, pg.store)  # type: ignore[arg-type]
    assert (again.documents, again.chunks, again.skipped) == (0, 0, 7)  # never duplicates
    assert pg.store.count_chunks() == pg.store.count_vectors() == 7
    assert pg.store.count_pending() == 0
    assert pg.store.root_path("manuals") == "/srv/manuals"
    got = [h.chunk.chunk_id for h in pg.retriever.search("保修期多久", k=2)]
    assert got == want
    # incremental: unchanged documents are skipped (the hashes came along)
    assert len(pg.ingestor.ingest_documents(docs()).unchanged) == 7
    assert counting.documents == 0  # nothing was embedded again
    pg.close()


def test_pg_import_command(pg_url: str, tmp_path: Path) -> None:
    embedded = open_embedded_store(tmp_path / "ws", None)
    embedded.ingestor.ingest_documents(docs())
    embedded.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(tmp_path / "ws"), SHELFHAND_DATABASE_URL=pg_url)
    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "pg-import"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "imported 7 documents, 7 chunks, 0 vectors" in out.stdout
    env["SHELFHAND_RETRIEVAL_MODE"] = "keyword"
    status = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    info = json.loads(status.stdout)
    assert info["store"].startswith("postgresql (") and info["chunks"] == 7


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing", **env})


def test_provider_modes_choose_the_store(pg_url: str, tmp_path: Path) -> None:
    with App(settings=settings(tmp_path, SHELFHAND_DATABASE_URL=pg_url)).open_knowledge() as kb:
        assert kb.store_kind == "postgresql" and not kb.keyword_only  # auto: pg when set
        kb.ingest_documents(docs())
        assert kb.status().store == "postgresql"
    keyword = settings(tmp_path, SHELFHAND_DATABASE_URL=pg_url, SHELFHAND_RETRIEVAL_MODE="keyword")
    with App(settings=keyword).open_knowledge() as kb:
        assert kb.store_kind == "postgresql" and kb.keyword_only  # keyword: PG keywords only
        assert kb.search("保修期", k=1)[0].chunk.source == "保修.md"
    strict = settings(tmp_path, SHELFHAND_DATABASE_URL=pg_url, SHELFHAND_RETRIEVAL_MODE="pg")
    with App(settings=strict).open_knowledge() as kb:
        assert kb.store_kind == "postgresql" and kb.count_chunks() == 7
    with App(settings=settings(tmp_path)).open_knowledge() as kb:  # auto without a URL
        assert kb.store_kind == "embedded" and kb.count_chunks() == 0


@pytest.mark.parametrize("mode", ["pg", "auto"])
def test_an_unreachable_database_fails_at_start_up(tmp_path: Path, mode: str) -> None:
    url = f"postgresql://app:s3cret@127.0.0.1:{free_port()}/shelf"
    app = App(
        settings=settings(tmp_path, SHELFHAND_DATABASE_URL=url, SHELFHAND_RETRIEVAL_MODE=mode)
    )
    with pytest.raises(ConfigurationError, match="unreachable") as err:
        app.open_knowledge()
    assert "s3cret" not in str(err.value)
    assert not (tmp_path / "knowledge.db").exists()  # never a local stand-in


def test_searches_raise_dependency_unavailable_while_the_server_is_down(
    pg_url: str, pg_server: LocalPostgres
) -> None:
    kb = open_pg_store(pg_url, None, timeout=2)
    kb.ingestor.ingest_documents(docs())
    pg_server.stop()
    try:
        with pytest.raises(DependencyUnavailableError) as err:
            kb.retriever.search("warranty", k=3, mode="keyword")
        assert err.value.dependency == "postgresql"
        with pytest.raises(DependencyUnavailableError):
            kb.store.count_chunks()
    finally:
        pg_server.start()
    assert kb.retriever.search("warranty", k=1, mode="keyword")[0].chunk.source == "warranty.md"
    kb.close()


def assert_same_ranking(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """The same ranking up to the last bits of the scores (two SQL plans may add a chunk's
    term scores in different orders): equal scores place by place, the same chunks in each
    group of equal scores (but the last, which ``k`` may cut between different members)."""
    assert len(got) == len(want)
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert math.isclose(a, b, rel_tol=1e-9), (got, want)
    start = 0
    while start < len(want):
        end = start + 1
        while end < len(want) and math.isclose(want[end][1], want[start][1], rel_tol=1e-9):
            end += 1
        if end < len(want):  # a whole group inside the top k
            assert {c for c, _ in got[start:end]} == {c for c, _ in want[start:end]}, (got, want)
        start = end


def test_rare_terms_first_pruning_returns_the_full_scoring_top_k(pg_url: str) -> None:
    kb = open_pg_store(pg_url, None)
    common = ["lamp projector manual", "投影仪 说明书 灯泡"]
    docs = []
    for i in range(120):
        text = f"{common[i % 2]} page {i}" + (f" rare{i % 7} 稀有{i % 5}" if i % 3 == 0 else "")
        docs.append(
            Document(
                doc_id=f"p{i}",
                source=f"p{i}",
                title="",
                doc_type="markdown",
                sections=(Section(text=text),),
                content_hash=text,
                permission_tags=("sales",) if i % 4 == 0 else (),
            )
        )
    kb.ingestor.ingest_documents(docs)
    # every term ranks: this is the exact pruning on its own
    full = PgKeywordIndex(kb.store.db, common_share=1.0)  # type: ignore[attr-defined]
    pruned = PgKeywordIndex(kb.store.db, rare_share=0.1, common_share=1.0)  # type: ignore[attr-defined]
    callers = [Scope(tenant_id="default", roles=r) for r in (["admin"], [], ["sales"])]
    for query in ["lamp rare3", "projector rare1 rare2 manual", "灯泡 稀有2", "说明书 稀有4 page"]:
        for k in (1, 3, 10, 60):
            for acl in callers:
                tokens = tokenize_query(query)
                assert_same_ranking(
                    pruned.search(tokens, k, scope=acl), full.search(tokens, k, scope=acl)
                )
    assert pruned.paths["pruned"] > 0 and pruned.paths["full"] > 0  # both paths ran
    kb.close()
