"""The bookshelf: documents in, cited evidence out.

The public names (imported lazily, so ``import shelfhand.knowledge`` stays cheap)::

    from shelfhand.knowledge import KnowledgeBase, sample_corpus

    with KnowledgeBase(workspace, router=None) as kb:   # keyword-only, no model
        kb.ingest([sample_corpus()])
        hits = kb.search("E-203 是什么故障？", k=3)

Inside: :mod:`~shelfhand.knowledge.reading` (files to documents, bounded),
:mod:`~shelfhand.knowledge.ingest` (chunking, incremental indexing, embedding),
:mod:`~shelfhand.knowledge.embeddings` (the packaged and remote embedders),
:mod:`~shelfhand.knowledge.stores` (SQLite, tantivy, faiss, PostgreSQL),
:mod:`~shelfhand.knowledge.retrieval` (hybrid search, fusion, rerank, versions) and
:mod:`~shelfhand.knowledge.evidence` (citations, conflicts, compression), composed by
:mod:`~shelfhand.knowledge.stack` and wrapped by :class:`KnowledgeBase`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "KnowledgeBase": "shelfhand.knowledge.base",
    "KnowledgeStatus": "shelfhand.knowledge.base",
    "sample_corpus": "shelfhand.knowledge.base",
    "Document": "shelfhand.knowledge.types",
    "Chunk": "shelfhand.knowledge.types",
    "SearchHit": "shelfhand.knowledge.types",
    "Scope": "shelfhand.knowledge.types",
    "SearchMode": "shelfhand.knowledge.types",
    "SearchOptions": "shelfhand.knowledge.types",
    "SearchCounts": "shelfhand.knowledge.types",
    "SearchResult": "shelfhand.knowledge.types",
    "SearchTimings": "shelfhand.knowledge.types",
    "Embedder": "shelfhand.knowledge.embeddings.router",
    "EmbeddingRouter": "shelfhand.knowledge.embeddings.router",
    "HashingEmbedder": "shelfhand.knowledge.embeddings.local",
    "default_router": "shelfhand.knowledge.embeddings.local",
    "Reranker": "shelfhand.knowledge.retrieval.rerank",
    "HttpReranker": "shelfhand.knowledge.retrieval.rerank",
    "ReadLimits": "shelfhand.knowledge.reading.limits",
    "format_passages": "shelfhand.knowledge.evidence.citations",
    "prepare_evidence": "shelfhand.knowledge.evidence.citations",
    "label": "shelfhand.knowledge.evidence.citations",
}

__all__ = [
    "Chunk",
    "Document",
    "Embedder",
    "EmbeddingRouter",
    "HashingEmbedder",
    "HttpReranker",
    "KnowledgeBase",
    "KnowledgeStatus",
    "ReadLimits",
    "Reranker",
    "Scope",
    "SearchCounts",
    "SearchHit",
    "SearchMode",
    "SearchOptions",
    "SearchResult",
    "SearchTimings",
    "default_router",
    "format_passages",
    "label",
    "prepare_evidence",
    "sample_corpus",
]

if TYPE_CHECKING:
    from shelfhand.knowledge.base import KnowledgeBase, KnowledgeStatus, sample_corpus
    from shelfhand.knowledge.embeddings.local import HashingEmbedder, default_router
    from shelfhand.knowledge.embeddings.router import Embedder, EmbeddingRouter
    from shelfhand.knowledge.evidence.citations import format_passages, label, prepare_evidence
    from shelfhand.knowledge.reading.limits import ReadLimits
    from shelfhand.knowledge.retrieval.rerank import HttpReranker, Reranker
    from shelfhand.knowledge.types import (
        Chunk,
        Document,
        Scope,
        SearchCounts,
        SearchHit,
        SearchMode,
        SearchOptions,
        SearchResult,
        SearchTimings,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
