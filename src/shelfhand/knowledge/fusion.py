"""Fusing keyword and vector candidates, and how strongly a hit answers the query.

Two fusions live here:

* :func:`rrf` — Reciprocal Rank Fusion (Cormack et al., 2009): ranks only, scores ignored.
* :func:`convex_fusion` — what :class:`~shelfhand.knowledge.retrieval.HybridRetriever` uses:
  ``α · bm25 / max_bm25 + (1 - α) · Σ w_space · cosine``. BM25 is scaled by the query's best
  score (its scale depends on the query); cosines are used as they are (already comparable),
  and a keyword candidate outside the vector top-N gets its *exact* cosine (the retriever reads
  its stored vector) rather than nothing.

On SciFact (MiniLM) and CMRC 2018 (USE) this beats RRF of the same lists; the measurements,
and the variants that did not help, are in BENCHMARKS.md ("Retrieval quality (issue 13)")
and ``bench/fusion_tuning.py`` replays them.

Relevance (:func:`keyword_evidence`, :func:`relevance`) is a 0..1 evidence strength that is
comparable across queries, unlike fused scores: the larger of the hit's cosine in the query's
own vector space and the share of the query's IDF that its BM25 score covers. The retriever
drops hits under ``min_relevance``, which is how "not in the documents" is answered.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from shelfhand.core.settings import DEFAULT_KEYWORD_COMMON_SHARE

__all__ = [
    "COMMON_SHARE",
    "KEYWORD_WEIGHT",
    "bm25_idf",
    "convex_fusion",
    "keyword_evidence",
    "ranking_terms",
    "relevance",
    "rrf",
]

K = TypeVar("K", bound=Hashable)

KEYWORD_WEIGHT = 0.4
"""``α`` of :func:`convex_fusion`. On SciFact nDCG@10 is within 0.005 of its best for 0.3–0.5
and on CMRC 2018 recall@5 stays at or above keyword search for 0.2–0.7; weights per query type
(Chinese, identifiers) did not pay (BENCHMARKS.md)."""


def rrf(
    lists: Sequence[Sequence[K]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fuse ranked lists of ids: ``score(id) = Σ w_list / (k + rank)`` with ranks from 1.

    Args:
        lists: Ranked ids, best first; an id may appear in several lists.
        k: Damping constant; 60 is the value from the paper and DESIGN R6.
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


def bm25_idf(doc_freq: int, num_docs: int) -> float:
    """BM25's IDF (the Lucene/tantivy form, never negative)."""
    return math.log(1.0 + (num_docs - doc_freq + 0.5) / (doc_freq + 0.5))


COMMON_SHARE = DEFAULT_KEYWORD_COMMON_SHARE
"""Default ``common_share`` of the keyword indexes (:func:`ranking_terms`), the
``keyword_common_share`` setting's default; measured in BENCHMARKS.md ("Common query
terms")."""


def ranking_terms(
    terms: Sequence[str], doc_freqs: Sequence[int], num_docs: int, common_share: float
) -> list[str]:
    """The query terms BM25 ranks by: ``terms`` less those found in more than
    ``common_share`` of the ``num_docs`` chunks, when a rarer term found in the index remains
    (otherwise every term).

    A term in a share ``p`` of the chunks weighs at most ``ln(1/p)`` against ~9 for a term in
    a hundred of a million chunks, yet its postings are most of what a disjunctive query walks:
    at 1M chunks, English questions whose terms sit in a quarter to half of the chunks took
    4 ms in tantivy, which block-max WAND could not prune. The stop words of a fixed list,
    computed from the collection instead. ``doc_freqs`` are the terms' document frequencies.
    """
    if common_share >= 1 or num_docs <= 0:
        return list(terms)
    limit = common_share * num_docs
    if not any(0 < df <= limit for df in doc_freqs):
        return list(terms)
    return [t for t, df in zip(terms, doc_freqs, strict=True) if df <= limit]


def keyword_evidence(bm25: float, idf_sum: float) -> float:
    """How much of the query a BM25 score covers, 0..1.

    ``idf_sum`` is the sum of the IDFs of the query's distinct terms, matched or not: one
    occurrence of every term in a chunk of average length scores about that much, so the ratio
    is roughly the share of the query's information the chunk holds (clipped at 1).
    """
    if idf_sum <= 0 or bm25 <= 0:
        return 0.0
    return min(1.0, bm25 / idf_sum)


def relevance(cosine: float | None, keyword: float | None) -> float:
    """A hit's evidence strength, 0..1: the stronger of its (space-weighted) cosine in the
    query's space and its :func:`keyword_evidence`; ``None`` means that side has no score."""
    best = max(cosine or 0.0, keyword or 0.0)
    return min(1.0, max(0.0, best))


def _score(item: tuple[object, float]) -> float:
    return item[1]
