"""Values shared across the knowledge layer: documents, chunks and search hits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """A run of text inside a document, with where it sits (heading path, page)."""

    text: str
    section_path: tuple[str, ...] = ()
    page: int | None = None
    start: int = 0
    """Character offset of ``text`` in the document's extracted text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One readable unit: a file, or one record of a CSV/JSON file."""

    doc_id: str
    """Stable id: ``source`` for files, ``source#key`` for records."""
    source: str
    """Where it came from, as the user will see it (a relative path or a name)."""
    title: str
    doc_type: str
    """``markdown``, ``text``, ``html``, ``pdf``, ``docx``, ``csv``, ``json``."""
    sections: tuple[Section, ...]
    content_hash: str
    """sha256 of the file bytes (or of the record), used for incremental indexing."""
    permission_tags: tuple[str, ...] = ()
    """Roles that may read it; empty = everyone in the tenant."""
    tenant_id: str = "default"
    updated_at: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """A retrievable piece of a document."""

    chunk_id: str
    """``{doc_id}::{chunk_index}``."""
    doc_id: str
    chunk_index: int
    text: str
    title: str
    section_path: tuple[str, ...]
    page: int | None
    source: str
    start: int
    end: int
    content_hash: str
    """sha256 of ``text`` (dedup across documents)."""
    doc_type: str
    permission_tags: tuple[str, ...] = ()
    tenant_id: str = "default"
    updated_at: float = 0.0

    @property
    def section(self) -> str:
        return " > ".join(self.section_path)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchHit:
    chunk: Chunk
    score: float
    """Fused score (convex fusion of BM25 and cosine) or the single side's score; compare it
    only within one query."""
    keyword_rank: int | None = None
    vector_rank: int | None = None
    exact: bool = False
    """The passage's text holds an identifier of the query (``E-888``, ``SKU2024-011``); such
    hits are ranked first (see ``HybridRetriever.exact_boost``)."""
    rerank_score: float | None = None
    """The reranker's score, when a rerank endpoint ranked this hit (see
    :mod:`shelfhand.knowledge.retrieval.rerank`)."""
    relevance: float | None = None
    """Evidence strength 0..1, comparable across queries: the larger of the hit's cosine in
    the query's vector space and the share of the query's IDF its BM25 score covers (see
    :func:`shelfhand.knowledge.retrieval.fusion.relevance`). ``None`` when not computed."""


class KeywordHits(list[tuple[int, float]]):
    """A keyword search's ``(rowid, BM25)`` hits, best first, with the statistics it read:
    ``num_docs`` and the body document frequency of each distinct query term (first-seen
    order), what ``KeywordIndex.doc_freqs`` returns for the same tokens. The relevance
    estimate reuses them instead of asking the index again (a second SQL round trip on
    PostgreSQL)."""

    __slots__ = ("doc_freqs", "num_docs")

    def __init__(
        self, hits: Iterable[tuple[int, float]], *, num_docs: int, doc_freqs: Sequence[int]
    ) -> None:
        super().__init__(hits)
        self.num_docs = num_docs
        self.doc_freqs = list(doc_freqs)

    def stats(self) -> tuple[int, list[int]]:
        """``(num_docs, doc_freqs)``, as ``KeywordIndex.doc_freqs`` returns them."""
        return self.num_docs, self.doc_freqs


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    source: str
    doc_type: str
    documents: int
    chunks: int
    updated_at: float
    content_hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredChunk:
    """A chunk as the indexes need it: its rowid key, ACL fields and index text."""

    rowid: int
    chunk: Chunk
