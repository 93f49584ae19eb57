"""What retrieval, ingest and versions need from a knowledge store and its indexes.

Two implementations satisfy these protocols: the embedded stack (SQLite + tantivy + faiss,
:mod:`shelfhand.knowledge.stores.sqlite`, :mod:`~shelfhand.knowledge.stores.tantivy`,
:mod:`~shelfhand.knowledge.stores.faiss`) and the PostgreSQL store (:mod:`shelfhand.knowledge.stores.pg`),
where one database holds the records and both searches. The methods are exactly those that
:class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever`,
:class:`~shelfhand.knowledge.ingest.ingestor.Ingestor`, :mod:`~shelfhand.knowledge.retrieval.versions` and
:class:`~shelfhand.knowledge.base.KnowledgeBase` call, with the embedded store's semantics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.types import (
    Chunk,
    Document,
    FusedCandidates,
    Scope,
    SourceInfo,
    StoredChunk,
)

__all__ = [
    "DocVectors",
    "FusedSearch",
    "KeywordIndex",
    "KnowledgeStore",
    "SourceItem",
    "VectorSearch",
]

RowIds = np.ndarray[Any, np.dtype[np.int64]]
DocVectors = Mapping[str, tuple[Sequence[int], Vectors]]
"""A document's vectors: per vector space, ``(positions, matrix)``, row ``j`` of ``matrix``
the vector of the document's chunk ``positions[j]``."""
SourceItem = tuple[Document, Sequence[Chunk], DocVectors | None]
"""A document to store with its chunks and their vectors (``None``: none yet)."""


class KnowledgeStore(Protocol):
    """The system of record: documents, chunks (keyed by rowid), vectors, sources, roots."""

    # -- lifecycle
    def close(self) -> None: ...

    def sync(self, *, durable: bool = False) -> None:
        """Make committed changes searchable (a no-op where writes are searchable at once)."""
        ...

    def deferred_sync(self) -> AbstractContextManager[None]: ...

    # -- writes
    def write_batch(
        self,
        source: str,
        *,
        new_docs: Sequence[tuple[Document, Sequence[Chunk]]] = (),
        appended: Sequence[tuple[str, Sequence[Chunk]]] = (),
        start: bool = False,
        finish_hash: str | None = None,
        doc_type: str = "",
    ) -> None: ...

    def add_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        *,
        model: tuple[str, int] | None = None,
    ) -> int: ...

    def add_bridge_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        *,
        model: tuple[str, int] | None = None,
    ) -> int: ...

    def upsert_document(
        self,
        doc: Document,
        chunks: Sequence[Chunk],
        vectors: DocVectors | None = None,
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
    ) -> list[int]: ...

    def delete_document(self, doc_id: str) -> bool: ...

    def delete_source(self, source: str) -> int: ...

    def set_root_path(self, name: str, path: str) -> None: ...

    def forget_root(self, name: str) -> None: ...

    # -- reads
    def get_document_state(self, doc_id: str) -> tuple[str, str] | None: ...

    def get_source_hash(self, source: str) -> str | None: ...

    def embed_state(self, source: str) -> set[str]: ...

    def sources(self) -> list[SourceInfo]: ...

    def all_sources(self) -> list[str]: ...

    def source_access(self, sources: Sequence[str]) -> dict[str, tuple[set[str], set[str]]]: ...

    def root_path(self, name: str) -> str | None: ...

    def count_documents(self) -> int: ...

    def count_chunks(self) -> int: ...

    def count_vectors(self, space: str | None = None) -> int: ...

    def count_pending(self) -> int: ...

    def pending_sources(self) -> set[str]: ...

    def pending_chunks(self, *, after: int = 0, limit: int = 256) -> list[StoredChunk]: ...

    def chunks_lacking(
        self, space: str, bridge: str, *, after: int = 0, limit: int = 256
    ) -> list[StoredChunk]: ...

    def vector_spaces(self) -> list[str]: ...

    def chunks_by_rowids(self, rowids: Sequence[int]) -> list[Chunk]: ...

    def chunk_map(self, rowids: Sequence[int]) -> dict[int, Chunk]: ...

    def chunks_in_section(self, scope: Scope, leaf: str) -> dict[int, Chunk]: ...

    def content_hashes(self, rowids: Sequence[int]) -> dict[int, str]: ...

    def iter_chunks(self, doc_ids: Sequence[str] | None = None) -> Iterator[StoredChunk]: ...

    def iter_vectors(
        self, space: str, doc_ids: Sequence[str] | None = None, batch: int = 5000
    ) -> Iterator[tuple[RowIds, Vectors]]: ...

    def vectors_by_content_hash(self, space: str, hashes: Sequence[str]) -> dict[str, Vectors]: ...

    def allowed_rowids(self, scope: Scope) -> RowIds: ...


class KeywordIndex(Protocol):
    """BM25 over the analysed tokens, restricted to what the caller's :class:`Scope` may
    read."""

    common_share: float
    """Query terms in more than this share of the chunks do not rank when rarer ones do
    (:func:`~shelfhand.knowledge.retrieval.fusion.ranking_terms`)."""

    def num_docs(self) -> int: ...

    def search(
        self, query_tokens: Sequence[str], k: int, *, scope: Scope
    ) -> list[tuple[int, float]]: ...

    def search_exact(
        self, identifiers: Sequence[str], k: int, *, rank_by: Sequence[str] = (), scope: Scope
    ) -> list[tuple[int, float]]: ...

    def doc_freqs(
        self, query_tokens: Sequence[str], scope: Scope | None = None
    ) -> tuple[int, list[int]]:
        """Chunks, and per distinct token how many hold it (BM25's statistics): of the
        whole index, or with ``scope`` of its tenant's chunks only, as its searches rank."""
        ...


@runtime_checkable
class FusedSearch(Protocol):
    """A keyword index that runs a whole hybrid search as one request and fuses it by
    weighted RRF itself (:class:`~shelfhand.knowledge.stores.qdrant.QdrantKeywordSearch`)."""

    def search_fused(
        self,
        query_tokens: Sequence[str],
        vectors: Mapping[str, tuple[Vectors, float]],
        k: int,
        *,
        scope: Scope,
        rrf_k: int,
    ) -> FusedCandidates:
        """Top ``k`` of each side (keyword; each space of ``vectors``: query vector and
        weight) that ``scope`` may read, fused."""
        ...


class VectorSearch(Protocol):
    """Inner-product search per vector space, restricted to what the caller's :class:`Scope`
    may read."""

    def spaces(self) -> list[str]: ...

    def count(self, space: str | None = None) -> int: ...

    def search(
        self, space: str, query: Vectors, k: int, *, scope: Scope
    ) -> list[tuple[int, float]]: ...

    def similarities(
        self, space: str, query: Vectors, rowids: Sequence[int]
    ) -> dict[int, float]: ...
