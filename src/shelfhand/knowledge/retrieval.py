"""Hybrid retrieval: BM25 + vectors fused by RRF, permission-filtered inside each query (R6).

::

    kb = open_embedded_store(workspace, router)
    hits = kb.retriever.search("E-203 是什么故障？", k=5, user=user)
    kb.close()

Each side fetches ``candidates_factor × k`` candidates: keyword from tantivy, vectors from every
space that holds vectors (the query embedded by that space's embedder, so a mixed Chinese and
English corpus works). Lists are fused with Reciprocal Rank Fusion (k=60) and deduplicated by
chunk content hash. When one side has nothing, the other's ranking and scores are used as is.
If embedding the query fails (quota, model unavailable), the search continues on keywords and
``last_degraded_reason`` says why. Chunks still waiting for ingest phase 2 have no vectors: they
are found by keywords only, and :attr:`SearchTimings.pending_chunks` says how many there are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shelfhand.core.context import ANONYMOUS, UserContext
from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.analysis import tokenize_query
from shelfhand.knowledge.embedding import EmbeddingRouter, Vectors
from shelfhand.knowledge.fusion import rrf
from shelfhand.knowledge.ingest import Ingestor
from shelfhand.knowledge.keyword import TantivyKeywordIndex
from shelfhand.knowledge.store import SqliteKnowledgeStore
from shelfhand.knowledge.types import SearchHit
from shelfhand.knowledge.vectors import VectorIndexes

logger = logging.getLogger(__name__)

__all__ = [
    "EmbeddedKnowledge",
    "HybridRetriever",
    "SearchMode",
    "SearchTimings",
    "open_embedded_store",
]

SearchMode = Literal["hybrid", "keyword", "vector"]
_FILTER_KEYS = {"doc_type", "source"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchTimings:
    """Milliseconds spent in each stage of one search."""

    keyword_ms: float = 0.0
    embed_ms: float = 0.0
    vector_ms: float = 0.0
    fuse_ms: float = 0.0
    total_ms: float = 0.0
    pending_chunks: int = 0
    """Chunks not embedded yet (ingest phase 2 pending): found by keywords only. Counted for
    searches that use vectors."""


def _filter_values(filters: Mapping[str, Any] | None, key: str) -> list[str] | None:
    if not filters or filters.get(key) is None:
        return None
    value = filters[key]
    return [value] if isinstance(value, str) else [str(v) for v in value]


class HybridRetriever:
    """Searches the keyword index and every vector space, fuses and deduplicates.

    Args:
        store: The system of record (chunk texts, ACL for the vector side).
        keyword_index: The BM25 index.
        vector_indexes: The vector spaces, or ``None`` for keyword-only search.
        router: Embeds queries per space; ``None`` disables the vector side.
        candidates_factor: Each side fetches ``candidates_factor * k`` candidates.
        rrf_k: The RRF damping constant.
        other_space_weight: RRF weight of vector spaces other than the one the query's
            language routes to (a model weak in the query's language ranks worse).
    """

    def __init__(
        self,
        store: SqliteKnowledgeStore,
        keyword_index: TantivyKeywordIndex,
        vector_indexes: VectorIndexes | None,
        router: EmbeddingRouter | None,
        *,
        candidates_factor: int = 3,
        rrf_k: int = 60,
        other_space_weight: float = 0.5,
    ) -> None:
        self.store = store
        self.keyword_index = keyword_index
        self.vector_indexes = vector_indexes
        self.router = router
        self.candidates_factor = candidates_factor
        self.rrf_k = rrf_k
        self.other_space_weight = other_space_weight
        self.last_degraded_reason: str | None = None
        self.last_timings = SearchTimings()
        self._warned: set[str] = set()

    def search(
        self,
        query: str,
        *,
        k: int = 5,
        user: UserContext | None = None,
        mode: SearchMode = "hybrid",
        filters: Mapping[str, Any] | None = None,
    ) -> list[SearchHit]:
        """Top ``k`` chunks for ``query`` that ``user`` may read.

        Args:
            query: The user's words, any language.
            k: How many hits at most.
            user: The caller; ``None`` is an anonymous caller of tenant ``default``.
            mode: ``hybrid``, or one side only.
            filters: ``{"doc_type": ..., "source": ...}``, each a value or a list of values.

        Raises:
            KnowledgeError: An unknown filter key or mode.
        """
        return self.search_timed(query, k=k, user=user, mode=mode, filters=filters)[0]

    def search_timed(
        self,
        query: str,
        *,
        k: int = 5,
        user: UserContext | None = None,
        mode: SearchMode = "hybrid",
        filters: Mapping[str, Any] | None = None,
        query_vectors: Mapping[str, Vectors] | None = None,
    ) -> tuple[list[SearchHit], SearchTimings]:
        """Like :meth:`search`, also returning per-stage timings.

        ``query_vectors`` (space → query vector) skips query embedding, for benchmarks.
        """
        if mode not in ("hybrid", "keyword", "vector"):
            raise KnowledgeError(f"unknown search mode {mode!r}; use hybrid, keyword or vector")
        unknown = set(filters or {}) - _FILTER_KEYS
        if unknown:
            raise KnowledgeError(f"unknown filter {sorted(unknown)}; use doc_type or source")
        t0 = time.perf_counter()
        caller = user or ANONYMOUS
        acl: dict[str, Any] = {
            "tenant_id": caller.tenant_id,
            "roles": caller.roles,
            "doc_types": _filter_values(filters, "doc_type"),
            "sources": _filter_values(filters, "source"),
        }
        fetch = max(k, 1) * self.candidates_factor
        self.last_degraded_reason = None
        keyword: list[tuple[int, float]] = []
        vector_lists: list[list[tuple[int, float]]] = []
        vector_weights: list[float] = []
        t_kw = t_embed = t_vec = 0.0
        use_keyword = mode != "vector"
        if mode != "keyword":
            t1 = time.perf_counter()
            embedded = query_vectors if query_vectors is not None else self._embed(query)
            t_embed = time.perf_counter() - t1
            if embedded is None:
                use_keyword = True  # degraded: keywords stand in for vectors
            elif self.vector_indexes is not None:
                t1 = time.perf_counter()
                home = self.router.space_for(query) if self.router is not None else None
                for space, qvec in embedded.items():
                    found = self.vector_indexes.search(space, qvec, fetch, **acl)
                    if found:
                        vector_lists.append(found)
                        weight = 1.0 if space == home else self.other_space_weight
                        vector_weights.append(weight)
                t_vec = time.perf_counter() - t1
        if use_keyword:
            t1 = time.perf_counter()
            keyword = self.keyword_index.search(tokenize_query(query), fetch, **acl)
            t_kw = time.perf_counter() - t1
        t1 = time.perf_counter()
        hits = self._fuse(keyword, vector_lists, vector_weights, k)
        t_fuse = time.perf_counter() - t1
        pending = self.store.count_pending() if mode != "keyword" and self.router else 0
        timings = SearchTimings(
            keyword_ms=t_kw * 1000,
            embed_ms=t_embed * 1000,
            vector_ms=t_vec * 1000,
            fuse_ms=t_fuse * 1000,
            total_ms=(time.perf_counter() - t0) * 1000,
            pending_chunks=pending,
        )
        self.last_timings = timings
        return hits, timings

    def _embed(self, query: str) -> dict[str, Vectors] | None:
        """The query vector in every space that holds vectors; ``None`` when embedding failed."""
        if self.router is None or self.vector_indexes is None:
            return {}
        out: dict[str, Vectors] = {}
        for space in self.vector_indexes.spaces():
            if space not in self.router.spaces:
                self._warn_once(f"no embedder configured for vector space {space!r}")
                continue
            try:
                out[space] = self.router.embedder(space).embed_query(query)
            except Exception as exc:  # any provider failure degrades to keyword search
                reason = (
                    f"query embedding failed ({type(exc).__name__}: {exc}); using keyword search"
                )
                self.last_degraded_reason = reason
                self._warn_once(reason)
                return None
        return out

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("%s", message)

    def _fuse(
        self,
        keyword: list[tuple[int, float]],
        vector_lists: list[list[tuple[int, float]]],
        vector_weights: list[float],
        k: int,
    ) -> list[SearchHit]:
        keyword_rank = {rowid: i for i, (rowid, _) in enumerate(keyword, start=1)}
        vector_rank: dict[int, int] = {}
        for found in vector_lists:
            for i, (rowid, _) in enumerate(found, start=1):
                vector_rank[rowid] = min(i, vector_rank.get(rowid, i))
        lists = [found for found in [keyword, *vector_lists] if found]
        weights = ([1.0] if keyword else []) + vector_weights
        if not lists:
            return []
        if len(lists) == 1:
            ranked = lists[0]
        else:
            ranked = rrf(
                [[rowid for rowid, _ in found] for found in lists], k=self.rrf_k, weights=weights
            )
        hashes = self.store.content_hashes([rowid for rowid, _ in ranked])
        chosen: list[tuple[int, float]] = []
        seen: set[str] = set()
        for rowid, score in ranked:
            h = hashes.get(rowid)
            if h is None or h in seen:
                continue  # deleted since indexing, or a duplicate passage
            seen.add(h)
            chosen.append((rowid, score))
            if len(chosen) == k:
                break
        chunks = self.store.chunk_map([rowid for rowid, _ in chosen])
        return [
            SearchHit(
                chunk=chunks[rowid],
                score=score,
                keyword_rank=keyword_rank.get(rowid),
                vector_rank=vector_rank.get(rowid),
            )
            for rowid, score in chosen
            if rowid in chunks
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddedKnowledge:
    """The embedded knowledge stack of one workspace, composed and ready."""

    store: SqliteKnowledgeStore
    keyword: TantivyKeywordIndex
    vectors: VectorIndexes
    retriever: HybridRetriever
    ingestor: Ingestor

    def close(self) -> None:
        """Persist the indexes and close the database."""
        self.store.close()


def open_embedded_store(
    workspace: Path,
    router: EmbeddingRouter | None,
    *,
    hnsw_threshold: int = 20_000,
    max_tokens: int = 400,
    overlap_tokens: int = 40,
) -> EmbeddedKnowledge:
    """Open (or create) ``<workspace>/knowledge.db`` with its keyword and vector indexes.

    Pending index changes from an interrupted run are replayed; a missing or stale index is
    rebuilt from the database.
    """
    workspace = Path(workspace)
    store = SqliteKnowledgeStore(workspace / "knowledge.db")
    keyword = TantivyKeywordIndex(workspace / "index" / "keyword")
    vectors = VectorIndexes(workspace / "index" / "vectors", store, hnsw_threshold=hnsw_threshold)
    store.attach(keyword, vectors)
    retriever = HybridRetriever(store, keyword, vectors, router)
    ingestor = Ingestor(store, router, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    return EmbeddedKnowledge(
        store=store, keyword=keyword, vectors=vectors, retriever=retriever, ingestor=ingestor
    )
