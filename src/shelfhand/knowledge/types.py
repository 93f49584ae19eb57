"""Values shared across the knowledge layer: documents, chunks, search hits, the caller's
:class:`Scope`, and what one search is asked (:class:`SearchOptions`) and returns
(:class:`SearchResult`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from shelfhand.core.context import ANONYMOUS, PRIVILEGED_ROLES, UserContext
from shelfhand.core.errors import KnowledgeError


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
    cosine: float | None = None
    """The passage's cosine to the query in the vector space that scores it highest, weighted
    as that space counts for the query (:func:`~shelfhand.knowledge.retrieval.fusion.closeness`):
    how near in meaning, whatever words they share. ``None`` when no space of a built-in
    model scored it (a keyword search, an exact-identifier hit, a chunk not embedded yet, or
    embedders whose cosines are on another scale: the hashing embedder, a remote endpoint)."""


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
class FusedCandidates:
    """A hybrid search that the index fused itself (``rrf`` on Qdrant, in one request): the
    candidates best first with their fused scores, the keyword side's hits (with the term
    statistics it read), and each candidate's cosine per vector space that found any."""

    ranked: list[tuple[int, float]]
    keyword: KeywordHits
    cosines: dict[str, dict[int, float]]


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


_FILTER_KEYS = frozenset({"doc_type", "source"})


def _filter_values(filters: Mapping[str, Any] | None, key: str) -> tuple[str, ...] | None:
    if not filters or filters.get(key) is None:
        return None
    value = filters[key]
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """What one caller may read, as every store and index call that reads chunks takes it.

    A chunk is readable iff it belongs to ``tenant_id`` AND (it has no permission tags, or one
    of them is among ``roles``, or ``roles`` holds a privileged role, ``admin``/``system``),
    and, when given, its doc type is among ``doc_types`` and its source among ``sources`` (an
    empty tuple allows nothing). Each index applies the rule inside its own query (docs/design.md R6);
    :meth:`may_read` is the rule in Python.

    Roles are kept as a frozenset and the filters as tuples, so a scope is hashable (the
    vector spaces cache a caller's selection per scope).
    """

    tenant_id: str
    roles: frozenset[str]
    doc_types: tuple[str, ...] | None
    sources: tuple[str, ...] | None

    def __init__(
        self,
        *,
        tenant_id: str = "default",
        roles: Iterable[str] = (),
        doc_types: Iterable[str] | None = None,
        sources: Iterable[str] | None = None,
    ) -> None:
        object.__setattr__(self, "tenant_id", str(tenant_id))
        object.__setattr__(self, "roles", frozenset(str(r) for r in roles))
        object.__setattr__(self, "doc_types", None if doc_types is None else tuple(doc_types))
        object.__setattr__(self, "sources", None if sources is None else tuple(sources))

    @classmethod
    def of(cls, user: UserContext | None = None, filters: Mapping[str, Any] | None = None) -> Scope:
        """The scope of ``user`` (``None``: an anonymous caller of tenant ``default``) narrowed
        by a search's ``filters`` (``{"doc_type": ..., "source": ...}``, each a value or a list
        of values).

        Raises:
            KnowledgeError: An unknown filter key.
        """
        unknown = set(filters or {}) - _FILTER_KEYS
        if unknown:
            raise KnowledgeError(f"unknown filter {sorted(unknown)}; use doc_type or source")
        caller = user or ANONYMOUS
        return cls(
            tenant_id=caller.tenant_id,
            roles=caller.roles,
            doc_types=_filter_values(filters, "doc_type"),
            sources=_filter_values(filters, "source"),
        )

    @property
    def privileged(self) -> bool:
        """Whether the caller reads every chunk of the tenant, whatever its tags."""
        return bool(self.roles & PRIVILEGED_ROLES)

    @property
    def key(self) -> tuple[Any, ...]:
        """What decides the readable set: privileged callers of a tenant all share one key, and
        the filters count as sets."""
        roles = ("admin",) if self.privileged else tuple(sorted(self.roles))
        return (
            self.tenant_id,
            roles,
            None if self.doc_types is None else tuple(sorted(set(self.doc_types))),
            None if self.sources is None else tuple(sorted(set(self.sources))),
        )

    def may_read(
        self, tenant_id: str, permission_tags: Iterable[str], doc_type: str, source: str
    ) -> bool:
        """The rule (see the class docstring) for one chunk's tenant, tags, type and source."""
        if tenant_id != self.tenant_id:
            return False
        tags = set(permission_tags)
        if tags and not self.privileged and not tags & self.roles:
            return False
        if self.doc_types is not None and doc_type not in self.doc_types:
            return False
        return self.sources is None or source in self.sources

    def allows(self, chunk: Chunk) -> bool:
        """Whether the caller may read ``chunk``."""
        return self.may_read(chunk.tenant_id, chunk.permission_tags, chunk.doc_type, chunk.source)


SearchMode = Literal["hybrid", "keyword", "vector"]
Fusion = Literal["convex", "rrf"]
"""How a hybrid search fuses its sides: ``convex`` (scores, the default) or ``rrf`` (ranks;
a Qdrant index fuses on the server, in one request)."""
FUSIONS: tuple[Fusion, ...] = ("convex", "rrf")


def fusion_of(name: str) -> Fusion:
    """``name`` as a :data:`Fusion`.

    Raises:
        KnowledgeError: Neither ``convex`` nor ``rrf``.
    """
    for fusion in FUSIONS:
        if name == fusion:
            return fusion
    raise KnowledgeError(f"unknown fusion {name!r}; use convex or rrf")


"""Both sides fused, or one side only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchOptions:
    """The switches of one search. A knowledge base's configured values are the defaults
    (:attr:`~shelfhand.knowledge.base.KnowledgeBase.search_options`); a caller that wants
    other ones for a call (an ablation stage) passes
    ``dataclasses.replace(kb.search_options, ...)``, never changing the shared base.

    Raises:
        KnowledgeError: ``min_relevance`` outside 0..1 or ``candidates_factor`` under 1.
    """

    exact_boost: bool = True
    """Put the passages holding an identifier of the query first (the exact-identifier step
    of :mod:`~shelfhand.knowledge.retrieval.hybrid`)."""
    min_relevance: float = 0.0
    """Drop hits whose ``relevance`` is under this (0 keeps all)."""
    version_siblings: bool = True
    """Bring the same section of a hit's other document versions along
    (:mod:`~shelfhand.knowledge.retrieval.versions`)."""
    candidates_factor: int = 3
    """Each side of a search fetches ``candidates_factor * k`` candidates."""
    rerank: bool = True
    """Rerank the fused candidates, when the knowledge base has a reranker."""
    fusion: Fusion = "convex"
    """How hybrid search fuses the keyword and vector sides
    (:mod:`~shelfhand.knowledge.retrieval.fusion`): ``convex`` or ``rrf``."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_relevance <= 1.0:
            raise KnowledgeError(f"min_relevance must be within 0..1, not {self.min_relevance}")
        if self.candidates_factor < 1:
            raise KnowledgeError(
                f"candidates_factor must be at least 1, not {self.candidates_factor}"
            )
        fusion_of(self.fusion)


class SearchArgs(TypedDict, total=False):
    """What a search is given besides its query, for the wrappers of ``search_result``
    (``search(query, **args)``); the meaning and defaults are ``search_result``'s."""

    k: int
    user: UserContext | None
    mode: SearchMode
    filters: Mapping[str, Any] | None
    options: SearchOptions | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchTimings:
    """Milliseconds spent in each stage of one search."""

    keyword_ms: float = 0.0
    embed_ms: float = 0.0
    vector_ms: float = 0.0
    fuse_ms: float = 0.0
    exact_ms: float = 0.0
    """The exact-identifier lookup (only for queries that name an identifier)."""
    total_ms: float = 0.0
    pending_chunks: int = 0
    """Chunks not embedded yet (ingest phase 2 pending): found by keywords only. Counted for
    searches that use vectors."""
    rerank_ms: float = 0.0
    """Time in the reranker (``KnowledgeBase`` with rerank on), included in ``total_ms``."""
    rerank_reason: str | None = None
    """Why the reranker's order was not used (it failed and the fused order was kept)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchCounts:
    """How many candidates each stage of one search had (where a right passage was lost)."""

    keyword: int = 0
    """Candidates the keyword index found (before fusion)."""
    vector: int = 0
    """Distinct candidates the vector indexes found, every space together (before fusion)."""
    fused: int = 0
    """Candidates after fusion (both sides, each chunk once)."""
    relevant: int = 0
    """Fused candidates at or above ``min_relevance`` (the others are dropped)."""
    rerank_candidates: int | None = None
    """Hits shown to the reranker; ``None``: no rerank."""
    returned: int = 0
    """Hits returned (at most ``k``; duplicates dropped, exact matches and version siblings
    added, after the rerank)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """What one search found and how it went: the outcome travels with the call, so
    concurrent searches over one shared knowledge base never see each other's."""

    hits: tuple[SearchHit, ...]
    timings: SearchTimings
    degraded_reason: str | None = None
    """Why this search fell back to keywords (its query embedding failed, timed out or was
    paused by the breaker), or why the knowledge base runs without embeddings at all (an
    ``auto`` base that degraded when opened); ``None`` when it searched as asked."""
    counts: SearchCounts = field(default_factory=SearchCounts)
    """How many candidates each stage had."""

    @property
    def rerank_reason(self) -> str | None:
        """Why the reranker's order was not used for this search (it failed)."""
        return self.timings.rerank_reason

    @property
    def pending_chunks(self) -> int:
        """Chunks not embedded yet when this search ran (found by keywords only)."""
        return self.timings.pending_chunks
