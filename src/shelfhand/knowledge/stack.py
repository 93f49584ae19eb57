"""Composing a knowledge stack: the system of record, its indexes, the retriever and the
ingestor, for a workspace (:func:`open_embedded_store`) or a PostgreSQL database
(:func:`open_pg_store`). ``fusion`` is how hybrid search fuses its sides (``convex`` or
``rrf``, :class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever`).

::

    kb = open_embedded_store(workspace, router)
    hits = kb.retriever.search("E-203 是什么故障？", k=5, user=user)
    kb.close()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.ingestor import Ingestor
from shelfhand.knowledge.protocols import KeywordIndex, KnowledgeStore, VectorSearch
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
from shelfhand.knowledge.scoring import COMMON_SHARE
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.tantivy import Access, TantivyKeywordIndex
from shelfhand.knowledge.stores.vector_indexes import VectorIndexes
from shelfhand.knowledge.types import fusion_of

if TYPE_CHECKING:
    from shelfhand.knowledge.stores.pg import PgKnowledgeStore
    from shelfhand.knowledge.stores.qdrant import QdrantIndex

logger = logging.getLogger(__name__)

__all__ = ["EmbeddedKnowledge", "open_embedded_store", "open_pg_store"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddedKnowledge:
    """A knowledge stack, composed and ready: the embedded one of a workspace
    (:func:`open_embedded_store`) or the PostgreSQL one (:func:`open_pg_store`)."""

    store: KnowledgeStore
    keyword: KeywordIndex
    vectors: VectorSearch
    retriever: HybridRetriever
    ingestor: Ingestor

    def close(self) -> None:
        """Persist the indexes and close the database (or its connection pool)."""
        self.retriever.close()
        self.store.close()


def open_embedded_store(
    workspace: Path,
    router: EmbeddingRouter | None,
    *,
    hnsw_threshold: int = 20_000,
    max_tokens: int = 400,
    overlap_tokens: int = 40,
    access: Access = "write",
    embed_timeout: float | None = None,
    min_relevance: float = 0.0,
    overlap_workers: int | None = None,
    fusion: str = "convex",
    common_share: float = COMMON_SHARE,
    read_limits: ReadLimits | None = None,
    qdrant_url: str | None = None,
    qdrant_api_key: str | None = None,
) -> EmbeddedKnowledge:
    """Open (or create) ``<workspace>/knowledge.db`` with its keyword and vector indexes.

    Pending index changes from an interrupted run are replayed; a missing or stale index is
    rebuilt from the database. ``access`` is how this process uses the keyword index
    (``write``, ``read``, or ``read-only`` while another process writes; see
    :mod:`shelfhand.knowledge.stores.tantivy`). ``embed_timeout`` bounds each query embedding
    (seconds); hits under ``min_relevance`` are dropped; ``overlap_workers`` is
    :class:`HybridRetriever`'s; ``common_share`` is the keyword index's; ingest reads each file
    within ``read_limits`` (default ``ReadLimits()``).

    With ``qdrant_url`` (a folder for Qdrant Edge in process, or ``http(s)://`` a server,
    with ``qdrant_api_key`` if it needs one) a
    Qdrant index replaces tantivy and faiss: the outbox feeds it, and it serves both searches
    (:mod:`shelfhand.knowledge.stores.qdrant`).

    Raises:
        ConfigurationError: ``qdrant_url`` is set but Qdrant cannot be used.
    """
    workspace = Path(workspace)
    store = SqliteKnowledgeStore(workspace / "knowledge.db")
    keyword: KeywordIndex
    vectors: VectorSearch
    if qdrant_url:
        try:
            keyword, vectors, qdrant = _qdrant(qdrant_url, qdrant_api_key, common_share)
        except BaseException:
            store.close()
            raise
        qdrant.bind(store.store_id)
        store.attach(qdrant)
    else:
        tantivy = TantivyKeywordIndex(
            workspace / "index" / "keyword", access=access, common_share=common_share
        )
        faiss = VectorIndexes(workspace / "index" / "vectors", store, hnsw_threshold=hnsw_threshold)
        store.attach(tantivy, faiss)
        keyword, vectors = tantivy, faiss
    retriever = HybridRetriever(
        store,
        keyword,
        vectors,
        router,
        embed_timeout=embed_timeout,
        min_relevance=min_relevance,
        overlap_workers=overlap_workers,
        fusion=fusion_of(fusion),
    )
    return _compose(
        store, keyword, vectors, retriever, router, max_tokens, overlap_tokens, read_limits
    )


def _compose(
    store: KnowledgeStore,
    keyword: KeywordIndex,
    vectors: VectorSearch,
    retriever: HybridRetriever,
    router: EmbeddingRouter | None,
    max_tokens: int,
    overlap_tokens: int,
    read_limits: ReadLimits | None,
) -> EmbeddedKnowledge:
    ingestor = Ingestor(
        store, router, max_tokens=max_tokens, overlap_tokens=overlap_tokens, limits=read_limits
    )
    return EmbeddedKnowledge(
        store=store, keyword=keyword, vectors=vectors, retriever=retriever, ingestor=ingestor
    )


def _qdrant(
    url: str, api_key: str | None, common_share: float
) -> tuple[KeywordIndex, VectorSearch, QdrantIndex]:
    """The Qdrant index at ``url`` and its two searches."""
    from shelfhand.knowledge.stores.qdrant import (
        QdrantIndex,
        QdrantKeywordSearch,
        QdrantVectorSearch,
        open_backend,
    )

    index = QdrantIndex(open_backend(url, api_key=api_key))
    return QdrantKeywordSearch(index, common_share=common_share), QdrantVectorSearch(index), index


def _warn_unanalysed(store: PgKnowledgeStore) -> None:
    """Say at start-up what keyword searches will refuse (chunks stored while Qdrant served
    the searches have no keyword fields in PostgreSQL), and the fix."""
    from shelfhand.knowledge.stores.pg.backfill import unanalysed_chunks

    missing = unanalysed_chunks(store)
    if missing:
        logger.warning(
            "%d chunks were stored while Qdrant served the searches and are not in"
            " PostgreSQL's keyword index; keyword searches fail until `shelfhand knowledge"
            " reindex` indexes them (or qdrant_url is set again)",
            missing,
        )


def open_pg_store(
    url: str,
    router: EmbeddingRouter | None,
    *,
    max_tokens: int = 400,
    overlap_tokens: int = 40,
    embed_timeout: float | None = None,
    min_relevance: float = 0.0,
    fusion: str = "convex",
    common_share: float = COMMON_SHARE,
    pool_size: int = 8,
    timeout: float = 5.0,
    read_limits: ReadLimits | None = None,
    qdrant_url: str | None = None,
    qdrant_api_key: str | None = None,
    read_deadline: float | None = QUERY_DEADLINE_S,
) -> EmbeddedKnowledge:
    """Connect to ``url``, migrate the knowledge schema and compose the stack, like
    :func:`open_embedded_store` does for a workspace.

    With ``qdrant_url`` PostgreSQL keeps the records and Qdrant serves the searches (fed
    through the store's outbox, :mod:`shelfhand.knowledge.stores.pg.outbox`): PostgreSQL runs
    no BM25 or vector search then, and writes no keyword fields or term statistics. Opened
    without it later, keyword searches refuse to run until ``shelfhand knowledge reindex`` has
    indexed the chunks stored meanwhile (:mod:`shelfhand.knowledge.stores.pg.backfill`).
    ``read_deadline``: seconds a search's reads may wait for the server (see
    :mod:`shelfhand.backends.pg_deadline`).

    Raises:
        ConfigurationError: PostgreSQL is unreachable, psycopg is not installed, or a
            migration fails (e.g. pgvector is missing on the server).
    """
    from shelfhand.knowledge.stores.pg import (
        PgDatabase,
        PgKeywordIndex,
        PgKnowledgeStore,
        PgVectorIndexes,
    )

    db = PgDatabase(url, max_size=pool_size, timeout=timeout, read_deadline=read_deadline)
    # with Qdrant serving the searches, PostgreSQL keeps no keyword fields of its own
    store = PgKnowledgeStore(db, keyword_sql=not qdrant_url)
    keyword: KeywordIndex
    vectors: VectorSearch
    if qdrant_url:
        try:
            keyword, vectors, qdrant = _qdrant(qdrant_url, qdrant_api_key, common_share)
            qdrant.bind(store.store_id)
            store.attach(qdrant)
        except BaseException:
            store.close()
            raise
    else:
        keyword = PgKeywordIndex(db, common_share=common_share)
        vectors = PgVectorIndexes(db, store)
        _warn_unanalysed(store)
    retriever = HybridRetriever(
        store, keyword, vectors, router, embed_timeout=embed_timeout, min_relevance=min_relevance,
        fusion=fusion_of(fusion),
    )  # fmt: skip
    return _compose(
        store, keyword, vectors, retriever, router, max_tokens, overlap_tokens, read_limits
    )
