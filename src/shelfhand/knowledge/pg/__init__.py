"""The PostgreSQL knowledge store (``pip install 'shelfhand[pg]'``; issue 14, DESIGN R5).

::

    kb = open_pg_store("postgresql://app@db:5432/shelfhand", router)
    hits = kb.retriever.search("E-203 是什么故障？", k=5, user=user)
    kb.close()

One database holds the records and both searches, written in the same transaction:

* documents, chunks (``BIGINT`` identity rowids, never reused), sources with their content
  hashes (incremental ingest), root paths — :mod:`.store`;
* keyword search: our analysed tokens as ``tsvector`` columns with GIN indexes, BM25 from term
  statistics in SQL — :mod:`.keyword`;
* vectors: one pgvector table + HNSW index per vector space — :mod:`.vectors`;
* schema: versioned migrations named ``knowledge_pg_*`` — :mod:`.migrations`.

Hybrid fusion, exact identifiers and version siblings are the embedded store's
(:class:`~shelfhand.knowledge.retrieval.HybridRetriever` over these objects). When the server
cannot be reached every call raises :class:`~shelfhand.core.errors.DependencyUnavailableError`
(the service answers 503) and the pool reconnects when it returns.
"""

from __future__ import annotations

from shelfhand.knowledge.embedding import EmbeddingRouter
from shelfhand.knowledge.fusion import COMMON_SHARE
from shelfhand.knowledge.ingest import Ingestor
from shelfhand.knowledge.pg.db import PgDatabase
from shelfhand.knowledge.pg.keyword import PgKeywordIndex
from shelfhand.knowledge.pg.store import PgKnowledgeStore
from shelfhand.knowledge.pg.vectors import PgVectorIndexes
from shelfhand.knowledge.retrieval import EmbeddedKnowledge, HybridRetriever

__all__ = [
    "PgDatabase",
    "PgKeywordIndex",
    "PgKnowledgeStore",
    "PgVectorIndexes",
    "open_pg_store",
]


def open_pg_store(
    url: str,
    router: EmbeddingRouter | None,
    *,
    max_tokens: int = 400,
    overlap_tokens: int = 40,
    embed_timeout: float | None = None,
    min_relevance: float = 0.0,
    common_share: float = COMMON_SHARE,
    pool_size: int = 8,
    timeout: float = 5.0,
) -> EmbeddedKnowledge:
    """Connect to ``url``, migrate the knowledge schema and compose the stack, like
    :func:`~shelfhand.knowledge.retrieval.open_embedded_store` does for a workspace.

    Raises:
        ConfigurationError: PostgreSQL is unreachable, psycopg is not installed, or a
            migration fails (e.g. pgvector is missing on the server).
    """
    db = PgDatabase(url, max_size=pool_size, timeout=timeout)
    store = PgKnowledgeStore(db)
    keyword = PgKeywordIndex(db, common_share=common_share)
    vectors = PgVectorIndexes(db, store)
    retriever = HybridRetriever(
        store, keyword, vectors, router, embed_timeout=embed_timeout, min_relevance=min_relevance
    )
    ingestor = Ingestor(store, router, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    return EmbeddedKnowledge(
        store=store, keyword=keyword, vectors=vectors, retriever=retriever, ingestor=ingestor
    )
