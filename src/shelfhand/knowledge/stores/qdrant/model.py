"""The query model of the Qdrant index: what a point holds and what a search asks, without any
Qdrant import.

A chunk becomes one point, keyed by its rowid (the store's system-of-record id):

* a dense vector per vector space (named after the space, inner product);
* a sparse vector ``keyword`` of BM25 term weights over the tokens of
  :mod:`shelfhand.knowledge.analysis` (the keyword index's own analysis: Chinese segmented,
  English stemmed, identifiers whole). Each token's index is a 32-bit hash of it; its weight is
  BM25's term-frequency part, ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``, for
  the body plus ``head_boost`` times the same for the chunk's own heading. The query weighs
  each term by BM25's IDF over the caller's tenant's chunks (:func:`sparse_query`), so the
  dot product scores a chunk by BM25 (with a fixed ``avg_len`` instead of the running
  average). Not Qdrant's ``idf`` modifier: it counts every tenant's points, and per shard
  and segment, deleted versions of points included, so another tenant's documents (or an
  update not yet merged away) would change a caller's scores;
* payload: ``doc_id``, ``tenant`` (a tenant index), ``tags`` (``__public__`` when none, as in
  the other indexes), ``doc_type``, ``source``, ``terms`` (the distinct body tokens, indexed, for
  document frequencies) and ``codes`` (the passage's identifiers, for the exact-identifier
  step).

A :class:`SearchQuery` is what both backends (:mod:`.edge`, :mod:`.server`) translate: one
``Nearest`` query on one named vector with the caller's :class:`PointFilter` inside it. A
:class:`FusedQuery` is a hybrid search in one request: its searches run as ``prefetch`` stages
fused by weighted RRF on the server, ``1 / (rank / weight + rrf_k)`` summed over the stages
(Qdrant's ``Rrf(k=rrf_k + 1, weights)``), beside one more plain query in the same batch.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shelfhand.knowledge.analysis import identifier_tokens, tokenize_for_index
from shelfhand.knowledge.stores.keyword_plan import PUBLIC_TAG, index_text
from shelfhand.knowledge.types import Chunk, Scope

__all__ = [
    "FILTER_FIELDS",
    "KEYWORD",
    "LOOKUP_FIELDS",
    "META_ID",
    "TERMS",
    "ChunkPoint",
    "FusedPoint",
    "FusedQuery",
    "PointFilter",
    "QdrantBackend",
    "SearchQuery",
    "SparseVec",
    "as_floats",
    "chunk_point",
    "fused_point",
    "point_filter",
    "sparse_query",
    "term_id",
    "term_token",
]

KEYWORD = "keyword"
"""Name of the sparse vector (no vector space may take it)."""
META_ID = 0
"""The point holding the index's own state (generation, spaces); rowids start at 1."""
FILTER_FIELDS = ("tags", "doc_type", "source")
"""Keyword payload fields that filter a dense search (with ``tenant``, the tenant index): Qdrant
links their frequent values into the HNSW graph, so a filtered search stays on the graph."""
LOOKUP_FIELDS = ("doc_id", "codes")
"""Keyword payload fields only deleted by or matched exactly, never a dense search's filter:
indexed without HNSW links (``enable_hnsw=False``)."""
TERMS = "terms"
"""The text payload field of a chunk's distinct body terms (:func:`term_token` each, one
string), counted for BM25's document frequencies; a text index without HNSW links. One
string, not a list: the engine's binding converts each payload value separately (about 15 µs
a value with ``qdrant-edge-py`` 0.9), which made a list of a chunk's terms most of the ingest;
and linking every frequent term into the graph made the HNSW build 3.4× slower at 100k
(``bench/qdrant_hnsw_links.py``)."""
K1 = 1.2
B = 0.75


def as_floats(vector: Sequence[float]) -> list[float]:
    """``vector`` as the list of floats a backend sends: the index and the searches already
    hand over lists (``ndarray.tolist()``), which are passed on as they are, not copied."""
    return vector if type(vector) is list else list(map(float, vector))


def term_token(token: str) -> str:
    """How the ``terms`` field spells ``token``: ``t`` and its :func:`term_id` in hex, one
    lower-case word that every Qdrant tokenizer (and ``qdrant-client``'s local mode) keeps
    whole, whatever the token's script or punctuation."""
    return f"t{term_id(token):x}"


def term_id(token: str) -> int:
    """A token's sparse index: the first 32 bits of its BLAKE2b hash (stable across
    processes and versions, unlike ``hash``). Two tokens share an index about once in four
    billion pairs; they would then score as one term."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseVec:
    """Sparse vector: distinct ``indices`` and their ``values``."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkPoint:
    """One chunk as a point (see the module docstring)."""

    id: int
    doc_id: str
    tenant: str
    tags: tuple[str, ...]
    doc_type: str
    source: str
    sparse: SparseVec
    terms: tuple[str, ...]
    codes: tuple[str, ...]
    dense: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def payload(self) -> dict[str, object]:
        return {
            "doc_id": self.doc_id,
            "tenant": self.tenant,
            "tags": list(self.tags),
            "doc_type": self.doc_type,
            "source": self.source,
            TERMS: " ".join(map(term_token, self.terms)),
            "codes": list(self.codes),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PointFilter:
    """What a point must match: ``field -> allowed values`` (each field one ``MatchAny``, the
    tenant a ``MatchValue``); ``has_vector``: the point has that named vector; ``term``: the
    chunk's body holds that analysed token. An empty filter matches every chunk point."""

    tenant: str | None = None
    any_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    has_vector: str | None = None
    term: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchQuery:
    """One ranked query: ``Nearest(vector)`` on the named vector ``using``, within ``filter``.
    ``vector`` is dense (a list) or a :class:`SparseVec`; ``exact`` skips the HNSW graph."""

    using: str
    vector: Sequence[float] | SparseVec
    limit: int
    filter: PointFilter
    exact: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FusedQuery:
    """Weighted RRF of ``stages`` (each a :class:`SearchQuery`, run as a prefetch) within
    ``filter``: the top ``limit`` points with their dense vectors of ``with_vectors``."""

    stages: tuple[SearchQuery, ...]
    weights: tuple[float, ...]
    rrf_k: int
    limit: int
    filter: PointFilter
    with_vectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FusedPoint:
    """A point a :class:`FusedQuery` found: its id, fused score and requested vectors."""

    id: int
    score: float
    vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)


def fused_point(
    point_id: object, score: float, vector: object, wanted: Sequence[str]
) -> FusedPoint:
    """A :class:`FusedPoint` from a found point's id, score and vectors (dense ones named in
    ``wanted`` are kept)."""
    found = vector if isinstance(vector, dict) else {}
    vectors = {n: v for n, v in found.items() if n in wanted and isinstance(v, list)}
    return FusedPoint(id=int(str(point_id)), score=float(score), vectors=vectors)


class QdrantBackend(Protocol):
    """What the index needs of Qdrant; :mod:`.edge` (in process) and :mod:`.server`
    (``qdrant-client``) translate it. Both raise
    :class:`~shelfhand.core.errors.DependencyUnavailableError` when Qdrant cannot answer."""

    location: str
    shared: bool
    """Whether other processes may change the same points (a server's collection)."""

    def meta(self) -> dict[str, object] | None: ...

    def set_meta(self, meta: Mapping[str, object]) -> None: ...

    def ensure_space(self, name: str, dim: int) -> None: ...

    def upsert(self, points: Sequence[ChunkPoint]) -> None: ...

    def set_vectors(
        self, space: str, ids: Sequence[int], rows: Sequence[Sequence[float]]
    ) -> None: ...

    def delete(self, ids: Sequence[int], doc_ids: Sequence[str]) -> None: ...

    def query(self, query: SearchQuery) -> list[tuple[int, float]]: ...

    def query_fused(
        self, fused: FusedQuery, also: SearchQuery | None
    ) -> tuple[list[FusedPoint], list[tuple[int, float]]]:
        """``fused``'s points and ``also``'s hits (none without it), in one request."""
        ...

    def count(self, flt: PointFilter) -> int: ...

    def ids(self, flt: PointFilter, limit: int) -> list[int]: ...

    def vectors(self, space: str, ids: Sequence[int]) -> dict[int, list[float]]: ...

    def clear(self) -> None: ...

    def optimize(self) -> bool: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def _bm25_tf(tf: int, length: int, avg_len: float) -> float:
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg_len))


def chunk_point(
    rowid: int,
    chunk: Chunk,
    dense: Mapping[str, Sequence[float]] | None = None,
    *,
    avg_len: float,
    head_avg_len: float,
    head_boost: float,
) -> ChunkPoint:
    """The point of chunk ``rowid`` (see the module docstring)."""
    body = index_text(chunk).split()
    weights: dict[int, float] = {}
    counts = Counter(body)
    for token, tf in counts.items():
        key = term_id(token)
        weights[key] = weights.get(key, 0.0) + _bm25_tf(tf, len(body), avg_len)
    head = _own_heading(chunk)
    if head and head_boost > 0:
        for token, tf in Counter(head).items():
            key = term_id(token)
            weight = head_boost * _bm25_tf(tf, len(head), head_avg_len)
            weights[key] = weights.get(key, 0.0) + weight
    indices = tuple(sorted(weights))
    return ChunkPoint(
        id=rowid,
        doc_id=chunk.doc_id,
        tenant=chunk.tenant_id,
        tags=tuple(chunk.permission_tags) or (PUBLIC_TAG,),
        doc_type=chunk.doc_type,
        source=chunk.source,
        sparse=SparseVec(indices=indices, values=tuple(weights[i] for i in indices)),
        terms=tuple(counts),
        codes=tuple(dict.fromkeys(identifier_tokens(chunk.text))),
        dense=dict(dense or {}),
    )


def _own_heading(chunk: Chunk) -> list[str]:
    """The chunk's own section heading, analysed (none when it is the title), as the other
    keyword indexes weight it (:func:`~shelfhand.knowledge.stores.keyword_plan.index_head`)."""
    if not chunk.section_path or chunk.section_path[-1].strip() == chunk.title.strip():
        return []
    return tokenize_for_index(chunk.section_path[-1])


def sparse_query(tokens: Sequence[str], idf: Mapping[str, float]) -> SparseVec:
    """A query weighing each distinct token by its ``idf`` (a token of weight 0, which no
    chunk of the caller's tenant holds, is left out)."""
    weights: dict[int, float] = {}
    for token in dict.fromkeys(tokens):
        weight = idf[token]
        if not weight:
            continue
        key = term_id(token)
        weights[key] = weights.get(key, 0.0) + weight
    indices = tuple(sorted(weights))
    return SparseVec(indices=indices, values=tuple(weights[i] for i in indices))


def point_filter(scope: Scope, **extra: Sequence[str]) -> PointFilter | None:
    """The points ``scope`` may read (and that match ``extra``, ``field=values``), or None
    when it may read nothing (an empty doc-type or source list)."""
    any_of: dict[str, tuple[str, ...]] = {}
    if not scope.privileged:
        any_of["tags"] = tuple(sorted(scope.roles | {PUBLIC_TAG}))
    if scope.doc_types is not None:
        any_of["doc_type"] = tuple(sorted(set(scope.doc_types)))
    if scope.sources is not None:
        any_of["source"] = tuple(sorted(set(scope.sources)))
    for name, values in extra.items():
        any_of[name] = tuple(dict.fromkeys(values))
    if any(not values for values in any_of.values()):
        return None
    return PointFilter(tenant=scope.tenant_id, any_of=any_of)
