"""Fusing keyword and vector candidates, and how strongly a hit answers the query.

Two fusions live here:

* :func:`rrf` — Reciprocal Rank Fusion (Cormack et al., 2009): ranks only, scores ignored.
* :func:`convex_fusion` — what :class:`~shelfhand.knowledge.retrieval.HybridRetriever` uses:
  ``α · bm25 / max_bm25 + (1 - α) · Σ w_space · cosine``. BM25 is scaled by the query's best
  score (its scale depends on the query); cosines are used as they are (already comparable),
  and a keyword candidate outside the vector top-N gets its *exact* cosine (the retriever reads
  its stored vector) rather than nothing. ``α`` depends on the query (:func:`keyword_weight`).

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
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

__all__ = [
    "CHINESE_KEYWORD_WEIGHT",
    "IDENTIFIER_KEYWORD_WEIGHT",
    "KEYWORD_WEIGHT",
    "bm25_idf",
    "convex_fusion",
    "keyword_evidence",
    "keyword_weight",
    "relevance",
    "rrf",
]

K = TypeVar("K", bound=Hashable)

KEYWORD_WEIGHT = 0.4
"""``α`` for an English (or other non-Chinese) natural-language query."""
CHINESE_KEYWORD_WEIGHT = 0.4
"""``α`` for a Chinese query."""
IDENTIFIER_KEYWORD_WEIGHT = 0.7
"""``α`` for a query holding a code such as ``E-203`` or ``SKU2024-011``: embeddings do not
know codes, the keyword index indexes them whole."""

_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_LETTERS = re.compile(r"[^\W\d_]")
# A code: letters and digits joined by - _ . / : # (E-203, SKU2024-011, v1.2) or glued (LMP-X1
# matches the first form; A7 or X1000 the second).
_IDENTIFIER = re.compile(
    r"(?<![\w])(?=[\w./:#-]*\d)[A-Za-z0-9]+(?:[-_./:#][A-Za-z0-9]+)+(?![\w])"
    r"|(?<![\w])(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{2,}(?![\w])"
)


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


def keyword_weight(
    query: str,
    *,
    default: float = KEYWORD_WEIGHT,
    chinese: float = CHINESE_KEYWORD_WEIGHT,
    identifier: float = IDENTIFIER_KEYWORD_WEIGHT,
) -> float:
    """``α`` of :func:`convex_fusion` for ``query``: identifier, Chinese or other."""
    if _IDENTIFIER.search(query):
        return identifier
    letters = len(_LETTERS.findall(query))
    if letters and len(_CJK.findall(query)) / letters >= 0.2:
        return chinese
    return default


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
