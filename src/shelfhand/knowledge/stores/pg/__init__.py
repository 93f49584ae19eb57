"""The PostgreSQL knowledge store (``pip install 'shelfhand[pg]'``; issue 14, docs/design.md R5).

::

    kb = open_pg_store(  # shelfhand.knowledge.stack"postgresql://app@db:5432/shelfhand", router)
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
(:class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever` over these objects). When the server
cannot be reached every call raises :class:`~shelfhand.core.errors.DependencyUnavailableError`
(the service answers 503) and the pool reconnects when it returns.
"""

from __future__ import annotations

from shelfhand.knowledge.stores.pg.db import PgDatabase
from shelfhand.knowledge.stores.pg.keyword import PgKeywordIndex
from shelfhand.knowledge.stores.pg.store import PgKnowledgeStore
from shelfhand.knowledge.stores.pg.vectors import PgVectorIndexes

__all__ = [
    "PgDatabase",
    "PgKeywordIndex",
    "PgKnowledgeStore",
    "PgVectorIndexes",
]
