"""Keyword, exact-identifier and dense search on the Qdrant index: the stack's
:class:`~shelfhand.knowledge.protocols.KeywordIndex` and
:class:`~shelfhand.knowledge.protocols.VectorSearch`.

:class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever` fuses the two sides, applies the
exact-identifier step and the relevance threshold exactly as on the embedded store. Every
search carries the caller's :class:`Scope` as the query's filter (the tenant index, tags by
``MatchAny``), so a caller never gets a point it may not read.

Keyword scores are BM25 (:mod:`.model`); the term statistics that the relevance estimate and
the common-terms rule need (chunks, document frequency per term) are counts over the ``terms``
text index. Hits of equal score are ordered by rowid, so that both backends, and a brute
force reference, agree on ties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.scoring import (
    COMMON_SHARE,
    bm25_idf,
    check_keyword_weights,
    ranking_terms,
)
from shelfhand.knowledge.stores.qdrant.index import QdrantIndex
from shelfhand.knowledge.stores.qdrant.model import (
    KEYWORD,
    FusedPoint,
    FusedQuery,
    PointFilter,
    SearchQuery,
    point_filter,
    sparse_query,
)
from shelfhand.knowledge.types import FusedCandidates, KeywordHits, Scope

__all__ = ["QdrantKeywordSearch", "QdrantVectorSearch"]

_EVERY = PointFilter()
Idf = Mapping[str, float]
"""Per query term, its BM25 IDF over the caller's tenant's chunks (the query's weight)."""


def _ordered(hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return sorted(hits, key=lambda h: (-h[1], h[0]))


class QdrantKeywordSearch:
    """BM25 over the sparse ``keyword`` vector of ``index``'s points.

    Args:
        index: The index whose points are searched.
        common_share: Query terms in more than this share of the chunks do not rank while
            rarer ones find k chunks (:func:`~shelfhand.knowledge.scoring.ranking_terms`).
        exact: The dense stages of a fused hybrid search run exactly instead of through the
            HNSW graph (as :class:`QdrantVectorSearch` ``exact`` does for a dense search).
    """

    name = "keyword"

    def __init__(
        self, index: QdrantIndex, *, common_share: float = COMMON_SHARE, exact: bool = False
    ) -> None:
        check_keyword_weights(0.0, common_share)
        self.index = index
        self.common_share = common_share
        self.exact = exact

    def num_docs(self) -> int:
        return self.index.backend.count(_EVERY)

    def doc_freqs(
        self, query_tokens: Sequence[str], scope: Scope | None = None
    ) -> tuple[int, list[int]]:
        """Chunks in the index and, per distinct token (first-seen order), how many hold it
        in their body; with ``scope``, of its tenant's chunks only (as its searches rank)."""
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        if scope is None:
            return self.num_docs(), self.index.term_counts(terms)
        n, dfs, _ = self._stats(terms, scope.tenant_id)
        return n, dfs

    def _stats(self, terms: Sequence[str], tenant: str) -> tuple[int, list[int], Idf]:
        """BM25's statistics of ``tenant``'s chunks (chunks, document frequency per term)
        and each term's IDF from them (0 for a term none of them holds). Every count is kept
        until the index changes (:meth:`QdrantIndex.term_counts`)."""
        n = self.index.tenant_count(None)
        own_n = self.index.tenant_count(tenant)
        if own_n < n:  # other tenants' chunks too: count the tenant's
            n, dfs = own_n, self.index.term_counts(terms, tenant)
        else:  # every chunk is the tenant's: the counts every caller of the index shares
            dfs = self.index.term_counts(terms)
        idf = {t: bm25_idf(df, n) if df else 0.0 for t, df in zip(terms, dfs, strict=True)}
        return n, dfs, idf

    def _ranked(
        self, terms: Sequence[str], k: int, flt: PointFilter, idf: Idf
    ) -> list[tuple[int, float]]:
        vector = sparse_query(terms, idf)
        if not vector.indices:  # none of the caller's tenant's chunks holds a term
            return []
        query = SearchQuery(using=KEYWORD, vector=vector, limit=k, filter=flt)
        return _ordered(self.index.backend.query(query))

    def search(
        self, query_tokens: Sequence[str], k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks by BM25 that ``scope`` may read, as ``(rowid, score)``."""
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        if not terms or k <= 0:
            return []
        self.index.refresh()
        n, dfs, idf = self._stats(terms, scope.tenant_id)
        flt = point_filter(scope)
        if flt is None or n == 0:
            return KeywordHits([], num_docs=n, doc_freqs=dfs)
        ranked = ranking_terms(terms, dfs, n, self.common_share)
        hits = self._ranked(ranked, k, flt, idf)
        if len(hits) < k and len(ranked) < len(terms):  # the common terms rank the rest
            hits = self._ranked(terms, k, flt, idf)
        return KeywordHits(hits, num_docs=n, doc_freqs=dfs)

    def search_fused(
        self,
        query_tokens: Sequence[str],
        vectors: Mapping[str, tuple[Vectors, float]],
        k: int,
        *,
        scope: Scope,
        rrf_k: int,
    ) -> FusedCandidates:
        """A hybrid search in one request: the top ``k`` by BM25 and the top ``k`` of each
        space of ``vectors`` (query vector, weight), within ``scope``, fused by weighted RRF
        on the server (keyword weight 1); the keyword hits come in the same batch and each
        candidate's stored vectors with it (its exact cosines)."""
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        self.index.refresh()
        n, dfs, idf = self._stats(terms, scope.tenant_id)
        flt = point_filter(scope)
        spaces = {s: v for s, v in vectors.items() if s in self.index.spaces()}
        if flt is None or k <= 0 or n == 0:
            return FusedCandidates(
                ranked=[], keyword=KeywordHits([], num_docs=n, doc_freqs=dfs), cosines={}
            )
        ranked = ranking_terms(terms, dfs, n, self.common_share)
        found = self._fused(ranked, spaces, k, flt, rrf_k, idf)
        if len(found[1]) < k and len(ranked) < len(terms):  # the common terms rank the rest
            found = self._fused(terms, spaces, k, flt, rrf_k, idf)
        points, hits = found
        cosines: dict[str, dict[int, float]] = {}
        for space, (qvec, _) in spaces.items():
            with_vec = [p for p in points if space in p.vectors]
            if with_vec:
                matrix = np.asarray([p.vectors[space] for p in with_vec], dtype=np.float32)
                sims = (matrix @ np.asarray(qvec, dtype=np.float32).reshape(-1)).tolist()
                cosines[space] = {p.id: float(c) for p, c in zip(with_vec, sims, strict=True)}
        return FusedCandidates(
            ranked=[(p.id, p.score) for p in points],
            keyword=KeywordHits(_ordered(hits), num_docs=n, doc_freqs=dfs),
            cosines=cosines,
        )

    def _fused(
        self,
        terms: Sequence[str],
        spaces: Mapping[str, tuple[Vectors, float]],
        k: int,
        flt: PointFilter,
        rrf_k: int,
        idf: Idf,
    ) -> tuple[list[FusedPoint], list[tuple[int, float]]]:
        sparse = sparse_query(terms, idf)
        keyword = SearchQuery(using=KEYWORD, vector=sparse, limit=k, filter=flt)
        ranks = bool(sparse.indices)
        stages = [keyword] if ranks else []
        weights = [1.0] if ranks else []
        for space, (qvec, weight) in spaces.items():
            vector = np.asarray(qvec, dtype=np.float32).reshape(-1).tolist()
            dense = SearchQuery(using=space, vector=vector, limit=k, filter=flt, exact=self.exact)
            stages.append(dense)
            weights.append(weight)
        fused = FusedQuery(
            stages=tuple(stages),
            weights=tuple(weights),
            rrf_k=rrf_k,
            limit=k * len(stages),
            filter=flt,
            with_vectors=tuple(spaces),
        )
        if not stages:
            return [], []
        return self.index.backend.query_fused(fused, keyword if ranks else None)

    def search_exact(
        self, identifiers: Sequence[str], k: int, *, rank_by: Sequence[str] = (), scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` readable chunks whose text holds one of ``identifiers``, ranked by BM25
        of ``rank_by`` (holders matching none of it follow with score 0, by rowid), or of the
        identifiers themselves when it is empty."""
        ids = list(dict.fromkeys(t for t in identifiers if t))
        if not ids or k <= 0:
            return []
        flt = point_filter(scope, codes=ids)
        if flt is None:
            return []
        self.index.refresh()
        ranking = list(dict.fromkeys(t for t in rank_by if t))
        _, _, idf = self._stats(ranking or ids, scope.tenant_id)
        hits = self._ranked(ranking or ids, k, flt, idf)
        if len(hits) < k and ranking:
            seen = {r for r, _ in hits}
            rest = [r for r in self.index.backend.ids(flt, k + len(hits)) if r not in seen]
            hits += [(r, 0.0) for r in rest[: k - len(hits)]]
        return hits


class QdrantVectorSearch:
    """Inner-product search of one named dense vector per vector space.

    Args:
        index: The index whose points are searched.
        exact: Search exactly instead of through the HNSW graph (which Qdrant builds once a
            segment passes its indexing threshold).
    """

    def __init__(self, index: QdrantIndex, *, exact: bool = False) -> None:
        self.index = index
        self.exact = exact

    def spaces(self) -> list[str]:
        """The spaces that got vectors (an emptied one searches to nothing; counting its
        vectors on every search would scan them)."""
        return list(self.index.spaces())

    def count(self, space: str | None = None) -> int:
        names = list(self.index.spaces()) if space is None else [space]
        backend = self.index.backend
        return sum(
            backend.count(PointFilter(has_vector=s)) for s in names if s in self.index.spaces()
        )

    def search(
        self, space: str, query: Vectors, k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks of ``space`` by inner product that ``scope`` may read."""
        flt = point_filter(scope)
        if flt is None or k <= 0:
            return []
        self.index.refresh()
        if space not in self.index.spaces():
            return []
        vector = np.asarray(query, dtype=np.float32).reshape(-1).tolist()
        q = SearchQuery(using=space, vector=vector, limit=k, filter=flt, exact=self.exact)
        return _ordered(self.index.backend.query(q))

    def similarities(self, space: str, query: Vectors, rowids: Sequence[int]) -> dict[int, float]:
        """Inner products of ``query`` with the stored vectors of ``rowids`` in ``space``
        (those that have one). No permission check: pass rowids the caller may read."""
        found = self.index.backend.vectors(space, rowids) if rowids else {}
        if not found:
            return {}
        ids = list(found)
        matrix = np.asarray([found[r] for r in ids], dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        sims = (matrix @ q).tolist()
        return {r: float(s) for r, s in zip(ids, sims, strict=True)}
