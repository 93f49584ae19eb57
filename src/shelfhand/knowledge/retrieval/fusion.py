"""Fusing keyword and vector candidates into one ranking.

Two fusions live here:

* :func:`rrf` — Reciprocal Rank Fusion (Cormack et al., 2009): ranks only, scores ignored.
* :func:`convex_fusion` — what :class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever` uses:
  ``α · bm25 / max_bm25 + (1 - α) · Σ w_space · cosine``. BM25 is scaled by the query's best
  score (its scale depends on the query); cosines are used as they are (already comparable),
  and a keyword candidate outside the vector top-N gets its *exact* cosine (the retriever reads
  its stored vector) rather than nothing.

On SciFact (MiniLM) and CMRC 2018 (USE) this beats RRF of the same lists; the measurements,
and the variants that did not help, are in BENCHMARKS.md ("Retrieval quality (issue 13)")
and ``bench/fusion_tuning.py`` replays them.

How strongly a hit answers the query (its relevance) is in :mod:`shelfhand.knowledge.scoring`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

__all__ = ["KEYWORD_WEIGHT", "convex_fusion", "rrf"]

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


def _score(item: tuple[object, float]) -> float:
    return item[1]
