"""The relevance of a search's candidates: how strongly each answers the query, 0..1 and
comparable across queries (see :mod:`shelfhand.knowledge.scoring`).

:class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever` computes it for every fused
candidate and drops those under the search's ``min_relevance``, which is how a query the
documents do not answer finds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from shelfhand.knowledge.protocols import KeywordIndex
from shelfhand.knowledge.scoring import bm25_idf, keyword_evidence, ranking_terms, relevance
from shelfhand.knowledge.types import KeywordHits

__all__ = ["candidate_relevance"]


def candidate_relevance(
    query_tokens: Sequence[str],
    keyword: Sequence[tuple[int, float]],
    cosines: Sequence[dict[int, float]],
    weights: Sequence[float],
    keyword_index: KeywordIndex,
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
    """
    kw: dict[int, float] = {}
    if keyword:
        # the statistics the keyword search read, else the index's (e.g. a stand-in index)
        if isinstance(keyword, KeywordHits):
            num_docs, freqs = keyword.stats()
        else:
            num_docs, freqs = keyword_index.doc_freqs(query_tokens)
        # the IDF of the terms that ranked the hits (the common ones may not have)
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        ranked = set(ranking_terms(terms, freqs, num_docs, keyword_index.common_share))
        idf_sum = sum(
            bm25_idf(df, num_docs) for t, df in zip(terms, freqs, strict=True) if t in ranked
        )
        kw = {rowid: keyword_evidence(s, idf_sum) for rowid, s in keyword}
        if not cosines:
            return kw  # (keyword evidence is already the relevance: 0..1)
    cos: dict[int, float] = {}
    for found, weight in zip(cosines, weights, strict=True):
        for rowid, c in found.items():
            cos[rowid] = max(cos.get(rowid, 0.0), weight * c)
    return {rowid: relevance(cos.get(rowid), kw.get(rowid)) for rowid in kw.keys() | cos.keys()}
