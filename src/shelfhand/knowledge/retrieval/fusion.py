"""Fusing keyword and vector candidates into one ranking.

Three fusions live here:

* :func:`rrf` — Reciprocal Rank Fusion (Cormack et al., 2009): ranks only, scores ignored.
* :func:`weighted_rrf` — the weighted form a Qdrant server computes, what the ``rrf`` fusion
  choice of a search uses (on Qdrant the server fuses, in one request).
* :func:`convex_fusion` — what :class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever` uses:
  ``α · bm25 / max_bm25 + (1 - α) · Σ w_space · cosine``. BM25 is scaled by the query's best
  score (its scale depends on the query); cosines are used as they are (already comparable),
  and a keyword candidate outside the vector top-N gets its *exact* cosine (the retriever reads
  its stored vector) rather than nothing.

On SciFact (MiniLM) and CMRC 2018 (USE) this beats RRF of the same lists; the measurements,
and the variants that did not help, are in docs/benchmarks/history.md ("Retrieval quality (issue 13)")
and ``bench/fusion_tuning.py`` replays them.

How strongly a hit answers the query (its relevance, :mod:`shelfhand.knowledge.scoring`) is
computed for every fused candidate by :func:`candidate_relevance`; the retriever drops those
under the search's ``min_relevance``, which is how a query the documents do not answer finds
nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from shelfhand.knowledge.protocols import KeywordIndex
from shelfhand.knowledge.scoring import bm25_idf, keyword_evidence, ranking_terms, relevance
from shelfhand.knowledge.types import KeywordHits, Scope

__all__ = [
    "KEYWORD_WEIGHT",
    "candidate_relevance",
    "closeness",
    "convex_fusion",
    "rrf",
    "weighted_rrf",
]

K = TypeVar("K", bound=Hashable)

KEYWORD_WEIGHT = 0.4
"""``α`` of :func:`convex_fusion`. On SciFact nDCG@10 is within 0.005 of its best for 0.3–0.5
and on CMRC 2018 recall@5 stays at or above keyword search for 0.2–0.7; weights per query type
(Chinese, identifiers) did not pay (docs/benchmarks/history.md)."""


def rrf(
    lists: Sequence[Sequence[K]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fuse ranked lists of ids: ``score(id) = Σ w_list / (k + rank)`` with ranks from 1.

    Args:
        lists: Ranked ids, best first; an id may appear in several lists.
        k: Damping constant; 60 is the value from the paper and docs/design.md R6.
        weights: One weight per list (default 1 each).

    Returns:
        ``(id, score)`` best first; ties keep first-seen order (earlier lists win).
    """
    longest = max((len(r) for r in lists), default=0)
    base = [1.0 / (k + rank) for rank in range(1, longest + 1)]
    scores: dict[K, float] = {}
    get = scores.get
    for i, ranked in enumerate(lists):
        w = 1.0 if weights is None else weights[i]
        table = base if w == 1.0 else [x * w for x in base]
        for key, weight in zip(ranked, table, strict=False):
            scores[key] = get(key, 0.0) + weight
    return sorted(scores.items(), key=_score, reverse=True)


def weighted_rrf(
    lists: Sequence[Sequence[int]], weights: Sequence[float], k: int = 60
) -> list[tuple[int, float]]:
    """Fuse ranked lists of rowids: ``score(id) = Σ 1 / (rank / w_list + k)``, ranks from 1.

    Qdrant's weighted RRF in the same terms (its ``Rrf(k=k + 1, weights)``), so that a search
    fused here and one fused by a Qdrant server rank alike; with weight 1 it is :func:`rrf`.
    A weight of 0 (or less) drops its list.

    Returns:
        ``(rowid, score)`` best first; ties by rowid.
    """
    scores: dict[int, float] = {}
    for ranked, w in zip(lists, weights, strict=True):
        if w <= 0:
            continue
        for rank, key in enumerate(ranked, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (rank / w + k)
    return by_score(scores.items())


def by_score(hits: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """``(rowid, score)`` best first, ties by rowid (the order both fusion paths agree on)."""
    return sorted(hits, key=lambda h: (-h[1], h[0]))


def convex_fusion(
    keyword: Sequence[tuple[K, float]],
    vectors: Sequence[tuple[Mapping[K, float], float]],
    alpha: float,
) -> list[tuple[K, float]]:
    """``α · bm25 / max_bm25 + (1 - α) · Σ w · max(cosine, 0)`` over every candidate.

    Args:
        keyword: ``(id, bm25)`` best first.
        vectors: Per vector space, ``({id: cosine}, weight)``; the map may hold exact cosines
            of keyword candidates that the space's own top list missed.
        alpha: Weight of the keyword side, 0..1.

    Returns:
        ``(id, fused score)`` best first; ties keep first-seen order (keyword first).
    """
    top = keyword[0][1] if keyword else 0.0
    scale = alpha / top if top > 0 else 0.0
    scores: dict[K, float] = {key: s * scale for key, s in keyword}
    get = scores.get
    for cosines, weight in vectors:
        w = (1.0 - alpha) * weight
        for key, cos in cosines.items():
            scores[key] = get(key, 0.0) + w * max(cos, 0.0)
    return sorted(scores.items(), key=_score, reverse=True)


def closeness(cosines: Sequence[Mapping[int, float]], weights: Sequence[float]) -> dict[int, float]:
    """Every candidate's cosine to the query in the vector space that scores it highest,
    weighted as that space counts for the query (the cosine side of its relevance)."""
    near: dict[int, float] = {}
    get = near.get
    lowest = float("-inf")
    for found, weight in zip(cosines, weights, strict=True):
        for rowid, c in found.items():
            value = weight * c
            if value > get(rowid, lowest):
                near[rowid] = value
    return near


def candidate_relevance(
    query_tokens: Sequence[str],
    keyword: Sequence[tuple[int, float]],
    cosines: Sequence[dict[int, float]],
    weights: Sequence[float],
    keyword_index: KeywordIndex,
    scope: Scope | None = None,
    near: Mapping[int, float] | None = None,
) -> dict[int, float]:
    """Every candidate's :func:`~shelfhand.knowledge.scoring.relevance`.

    Args:
        query_tokens: The query's tokens (what ranked the keyword hits).
        keyword: The keyword side's ``(rowid, BM25)``, best first.
        cosines: Per vector space, the candidates' cosines.
        weights: Per vector space, its weight (a space weak in the query's language counts
            less).
        keyword_index: Where the keyword hits came from (its term statistics, when the hits
            do not carry them, and its ``common_share``).
        scope: The caller's (its tenant's term statistics, as the keyword search used).
        near: The candidates' :func:`closeness`, when already computed from ``cosines``.
    """
    kw: dict[int, float] = {}
    if keyword:
        # the statistics the keyword search read, else the index's (e.g. a stand-in index)
        if isinstance(keyword, KeywordHits):
            num_docs, freqs = keyword.stats()
        else:
            num_docs, freqs = keyword_index.doc_freqs(query_tokens, scope)
        # the IDF of the terms that ranked the hits (the common ones may not have)
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        ranked = set(ranking_terms(terms, freqs, num_docs, keyword_index.common_share))
        idf_sum = sum(
            bm25_idf(df, num_docs) for t, df in zip(terms, freqs, strict=True) if t in ranked
        )
        kw = {rowid: keyword_evidence(s, idf_sum) for rowid, s in keyword}
        if not cosines:
            return kw  # (keyword evidence is already the relevance: 0..1)
    cos = closeness(cosines, weights) if near is None else near
    return {rowid: relevance(cos.get(rowid), kw.get(rowid)) for rowid in kw.keys() | cos.keys()}


def _score(item: tuple[object, float]) -> float:
    return item[1]
