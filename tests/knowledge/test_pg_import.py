"""``pg-import``'s bulk path (COPY, set-based statistics, indexes built after the load) against
the row-by-row path: the same database content, and an interrupted import that resumes
without duplicating or losing rows."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from shelfhand.core.context import UserContext
from shelfhand.dev.services import LocalPostgres
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import open_embedded_store, open_pg_store
from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
from shelfhand.knowledge.stores.pg.store import GIN_INDEXES
from shelfhand.knowledge.stores.pg.transfer import import_workspace
from shelfhand.knowledge.types import Document, Section

TEXTS = [
    ("warranty.md", "# Warranty\n\nThe projector warranty lasts twelve months from purchase."),
    ("returns.md", "Unopened items may be returned within seven days of purchase."),
    ("errors.md", "## E-203\n\nError E-203 means the lamp is overheating; clean the filter."),
    ("lamp.md", "Replace the lamp every 3000 hours. The lamp lamp lamp wears out."),
    ("保修.md", "# 保修政策\n\n投影仪保修期为12个月，人为损坏不在保修范围内。"),
    ("退货.md", "拆封后7天内可退货，保修期内免费维修。\n\n## 运费\n\n退货运费由买家承担。"),
    ("sku.md", "SKU2024-011 is the ceiling mount; SKU2024-012 the wall mount."),
    ("long.md", "\n\n".join(f"## Part {i}\n\nThe lamp part {i} of the manual." for i in range(9))),
]
QUERIES = ["projector warranty", "lamp overheating", "保修期多久", "退货运费", "SKU2024-011 mount"]


def documents(texts: list[tuple[str, str]] = TEXTS) -> list[Document]:
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
        for name, text in texts
    ]


def router() -> EmbeddingRouter:
    return EmbeddingRouter({"any": HashingEmbedder(dim=32)})


@pytest.fixture
def second_url(pg_server: LocalPostgres) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


def workspace(path: Path, texts: list[tuple[str, str]] = TEXTS) -> Path:
    kb = open_embedded_store(path, router(), max_tokens=24, overlap_tokens=4)
    kb.ingestor.ingest_documents(documents(texts))
    kb.store.set_root_path("manuals", "/srv/manuals")
    kb.close()
    return path


def content(url: str) -> dict[str, Any]:
    """Everything a search reads, keyed by ids (rowids are the database's own)."""
    with psycopg.connect(url) as conn:
        spaces = conn.execute("SELECT id, space, embedder, dim FROM knowledge_pg_spaces").fetchall()
        vectors = {}
        for sid, space, _, _ in spaces:
            vectors[space] = sorted(
                (c, t, tags, dt, src, str(e))
                for c, t, tags, dt, src, e in conn.execute(
                    "SELECT c.chunk_id, v.tenant_id, v.permission_tags, v.doc_type, v.source,"
                    f" v.embedding::text FROM knowledge_pg_vec_{sid} v JOIN knowledge_pg_chunks c"
                    " USING (rowid)"
                )
            )
        return {
            "documents": sorted(
                conn.execute(
                    "SELECT doc_id, source, title, doc_type, content_hash, tenant_id,"
                    " permission_tags, updated_at, metadata::text, chunk_count, embed_state,"
                    " embed_error FROM knowledge_pg_documents"
                ).fetchall()
            ),
            "chunks": sorted(
                conn.execute(
                    "SELECT chunk_id, doc_id, chunk_index, text, title, section_path, page, source,"
                    " start_, end_, content_hash, doc_type, permission_tags, tenant_id, updated_at,"
                    " language, space, body::text, head::text, codes::text, body_len, head_len,"
                    " codes_len FROM knowledge_pg_chunks"
                ).fetchall()
            ),
            "terms": sorted(
                conn.execute(
                    "SELECT tenant_id, field, term, df FROM knowledge_pg_tenant_terms WHERE df <> 0"
                )
            ),
            "field_stats": sorted(conn.execute("SELECT * FROM knowledge_pg_field_stats")),
            "tenant_stats": sorted(
                conn.execute(
                    "SELECT * FROM knowledge_pg_tenant_stats WHERE docs <> 0 OR tokens <> 0"
                )
            ),
            "sources": sorted(
                conn.execute("SELECT source, content_hash, doc_type FROM knowledge_pg_sources")
            ),
            "roots": sorted(conn.execute("SELECT name, path FROM knowledge_pg_roots")),
            "spaces": sorted((s, e, d) for _, s, e, d in spaces),
            "vectors": vectors,
        }


def index_names(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {
            str(r[0])
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'knowledge_pg_%'"
            )
        }


def searches(url: str) -> list[list[tuple[str, float]]]:
    """Hits per query, mode and caller; the chunks tied at the last score (which of them
    makes the cut depends on rowids, the database's own) are named by score only."""
    kb = open_pg_store(url, router())
    sales = UserContext(tenant_id="default", user_id="u", roles=["sales"])
    out = []
    for query in QUERIES:
        for mode in ("keyword", "vector", "hybrid"):
            for user in (None, sales):
                hits = kb.retriever.search(query, k=4, mode=mode, user=user)  # type: ignore[arg-type]
                last = min((h.score for h in hits), default=0.0)
                out.append(
                    [(h.chunk.chunk_id if h.score > last else "", round(h.score, 6)) for h in hits]
                )
    kb.close()
    return out


def test_bulk_import_writes_what_the_row_by_row_import_writes(
    pg_url: str, second_url: str, tmp_path: Path
) -> None:
    ws = workspace(tmp_path / "ws")
    pg = open_pg_store(pg_url, None)
    bulk = import_workspace(ws, pg.store, batch_documents=3, workers=2)  # type: ignore[arg-type]
    pg.close()
    rows = open_pg_store(second_url, None)
    one_by_one = import_workspace(ws, rows.store, batch_documents=3, bulk=False)  # type: ignore[arg-type]
    rows.close()
    assert (bulk.documents, bulk.chunks, bulk.vectors) == (8, one_by_one.chunks, bulk.chunks)
    assert bulk.chunks > 8  # several chunks per document: batches cut across them
    want = content(second_url)
    assert want["terms"] and any("保修" in t for _, _, t, _ in want["terms"])
    assert content(pg_url) == want
    assert searches(pg_url) == searches(second_url)
    assert all(r for r in searches(pg_url)[:6])  # the English and Chinese queries find hits
    assert set(GIN_INDEXES) | {"knowledge_pg_vec_1_hnsw"} <= index_names(pg_url)
    assert {"index knowledge_pg_chunks_body", "index knowledge_pg_vec_1_hnsw"} <= set(bulk.timings)


def test_an_interrupted_import_resumes_without_duplicates_or_losses(
    pg_url: str, second_url: str, tmp_path: Path
) -> None:
    ws = workspace(tmp_path / "ws")

    class Crash(Exception):
        pass

    def crash_after_two_batches(done: int, total: int) -> None:
        if done >= 4:
            raise Crash

    pg = open_pg_store(pg_url, None)
    with pytest.raises(Crash):
        import_workspace(ws, pg.store, batch_documents=2, progress=crash_after_two_batches)  # type: ignore[arg-type]
    assert pg.store.count_documents() == 4  # two whole batches, committed
    assert not set(GIN_INDEXES) & index_names(pg_url)  # dropped for the load
    resumed = import_workspace(ws, pg.store, batch_documents=2)  # type: ignore[arg-type]
    assert (resumed.skipped, resumed.documents) == (4, 4)
    # the workspace changes: a document edited, one added; the next run replaces and adds
    changed = [(n, t + " 新增内容" if n == "保修.md" else t) for n, t in TEXTS]
    changed.append(("new.md", "A new projector manual about the lamp."))
    workspace(ws, changed)
    again = import_workspace(ws, pg.store, batch_documents=2)  # type: ignore[arg-type]
    assert (again.documents, again.skipped) == (2, 7)
    pg.close()
    clean = open_pg_store(second_url, None)
    import_workspace(ws, clean.store, bulk=False)  # type: ignore[arg-type]
    clean.close()
    assert content(pg_url) == content(second_url)
    assert searches(pg_url) == searches(second_url)
    assert set(GIN_INDEXES) <= index_names(pg_url)


@pytest.mark.parametrize("bulk", [True, False])
def test_an_import_for_a_store_searched_on_qdrant_writes_no_keyword_fields(
    pg_url: str, tmp_path: Path, bulk: bool
) -> None:
    ws = workspace(tmp_path / "ws")
    store = PgKnowledgeStore(PgDatabase(pg_url), keyword_sql=False)
    try:
        report = import_workspace(ws, store, batch_documents=3, bulk=bulk, workers=1)
    finally:
        store.close()
    got = content(pg_url)
    assert report.chunks > 0 and not got["terms"]
    assert ("u", report.chunks, 0) in got["field_stats"]
