"""BM25 statistics shared by the keyword indexes and retrieval, and how strongly a hit answers.

Relevance (:func:`keyword_evidence`, :func:`relevance`) is a 0..1 evidence strength that is
comparable across queries, unlike fused scores: the larger of the hit's cosine in the query's
own vector space and the share of the query's IDF that its BM25 score covers. The retriever
drops hits under ``min_relevance``, which is how "not in the documents" is answered.
:func:`ranking_terms` is the common-terms rule every keyword index applies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.settings import DEFAULT_KEYWORD_COMMON_SHARE

__all__ = [
    "COMMON_SHARE",
    "bm25_idf",
    "check_keyword_weights",
    "keyword_evidence",
    "ranking_terms",
    "relevance",
    "tenant_boost",
]


def bm25_idf(doc_freq: int, num_docs: int) -> float:
    """BM25's IDF (the Lucene/tantivy form, never negative)."""
    return math.log(1.0 + (num_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def tenant_boost(tenant_df: int, tenant_docs: int, doc_freq: int, num_docs: int) -> float:
    """What turns a term's BM25 computed over a whole index (``doc_freq`` of ``num_docs``
    chunks, every tenant's) into its BM25 over one tenant's chunks (``tenant_df`` of
    ``tenant_docs``): the ratio of the two IDFs. 0 when none of the tenant's chunks holds the
    term (its clause can only match other tenants' chunks).

    A keyword index that serves several tenants ranks each caller by the statistics of the
    caller's tenant, not of all of them: otherwise another tenant's documents change a
    caller's scores, and a caller who stores a word and searches for it can read, from the
    score, how many of the other tenants' chunks hold it."""
    if tenant_df <= 0:
        return 0.0
    whole = bm25_idf(doc_freq, num_docs)
    if whole <= 0.0:
        return 1.0
    return bm25_idf(tenant_df, tenant_docs) / whole


COMMON_SHARE = DEFAULT_KEYWORD_COMMON_SHARE
"""Default ``common_share`` of the keyword indexes (:func:`ranking_terms`), the
``keyword_common_share`` setting's default; measured in docs/benchmarks/history.md ("Common query
terms")."""


def check_keyword_weights(head_boost: float, common_share: float) -> None:
    """Refuse the weights a keyword index cannot rank with (both indexes take them).

    Raises:
        InvalidArgumentError: ``head_boost`` under 0, or ``common_share`` outside (0, 1].
    """
    if head_boost < 0:
        raise InvalidArgumentError(f"head_boost must be >= 0, not {head_boost}")
    if not 0 < common_share <= 1:
        raise InvalidArgumentError(f"common_share must be in (0, 1], not {common_share}")


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
