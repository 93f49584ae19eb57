"""What a retrieval span records: the query, the mode, the caller's scope, per-stage timings
and candidate counts (keyword, vector, fused, above the relevance threshold, shown to the
reranker, returned), how many hits each side found, the hits with their scores and why the
search degraded; and, on the ``retrieve`` call's span, the passages that disagree
(:func:`record_conflicts`).

Passage texts are recorded only when the tracer records contents (they are the documents'
words); ids, sources, titles and scores always, so an operator can see which passage each
stage kept and which one it dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from shelfhand.core.context import UserContext
    from shelfhand.core.messages import Citation
    from shelfhand.core.tracing import Span
    from shelfhand.knowledge.types import SearchResult

__all__ = ["record_conflicts", "record_retrieval"]


def record_retrieval(
    span: Span,
    data_source: str,
    query: str,
    mode: str,
    user: UserContext | None,
    k: int,
    result: SearchResult,
) -> None:
    """Fill ``span`` (named ``retrieval``) with how one search went."""
    timings = result.timings
    counts = result.counts
    contents = span.tracer.record_content
    hits = result.hits
    documents: list[dict[str, Any]] = []
    by_keyword = by_vector = 0
    for hit in hits:
        chunk = hit.chunk
        keyword_rank, vector_rank = hit.keyword_rank, hit.vector_rank
        by_keyword += keyword_rank is not None
        by_vector += vector_rank is not None
        doc: dict[str, Any] = {
            "id": chunk.chunk_id,
            "source": chunk.source,
            "title": chunk.title,
            "score": _places6(hit.score),
            "keyword_rank": keyword_rank,
            "vector_rank": vector_rank,
            "exact": hit.exact,
        }
        if hit.rerank_score is not None:
            doc["rerank_score"] = _places6(hit.rerank_score)
        if hit.relevance is not None:
            doc["relevance"] = _places6(hit.relevance)
        if contents:
            doc["text"] = chunk.text
        documents.append(doc)
    # set on the span's own dict at once: no copy, no pass over the keys for None values;
    # the timings (never negative) to three decimal places, inline (13 calls a search)
    attributes = span.attributes
    attributes.update(
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": data_source,
            "gen_ai.retrieval.query.text": query,
            "gen_ai.retrieval.documents": documents,
            "shelfhand.retrieval.mode": mode,
            "shelfhand.retrieval.top_k": k,
            "shelfhand.retrieval.scope.tenant": user.tenant_id if user else "default",
            "shelfhand.retrieval.scope.user": user.user_id if user else "anonymous",
            "shelfhand.retrieval.hits_by_keyword": by_keyword,
            "shelfhand.retrieval.hits_by_vector": by_vector,
            "shelfhand.retrieval.hits": len(hits),
            # candidates per stage: where a right passage was lost
            "shelfhand.retrieval.candidates.keyword": counts.keyword,
            "shelfhand.retrieval.candidates.vector": counts.vector,
            "shelfhand.retrieval.candidates.fused": counts.fused,
            "shelfhand.retrieval.candidates.relevant": counts.relevant,
            "shelfhand.retrieval.candidates.returned": counts.returned,
            "shelfhand.retrieval.keyword_ms": int(timings.keyword_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.embed_ms": int(timings.embed_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.vector_ms": int(timings.vector_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.fuse_ms": int(timings.fuse_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.exact_ms": int(timings.exact_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.rerank_ms": int(timings.rerank_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.total_ms": int(timings.total_ms * 1e3 + 0.5) / 1e3,
            "shelfhand.retrieval.pending_chunks": timings.pending_chunks,
        }
    )
    if counts.rerank_candidates is not None:  # (None: no reranker)
        attributes["shelfhand.retrieval.candidates.reranked"] = counts.rerank_candidates
    if result.degraded_reason is not None:
        attributes["shelfhand.retrieval.degraded_reason"] = result.degraded_reason
    if timings.rerank_reason is not None:
        attributes["shelfhand.retrieval.rerank_reason"] = timings.rerank_reason


def _places6(x: float) -> float:
    """``x`` to six decimal places, for reading (``round(x, 6)`` formats the number as text
    and parses it back: several times the cost, ten times per search)."""
    return int(x * 1e6 + (0.5 if x >= 0 else -0.5)) / 1e6


def record_conflicts(span: Span | None, citations: Sequence[Citation]) -> None:
    """Add to ``span`` (a ``retrieve`` call's) the pairs of passages that disagree, with
    their notes (``shelfhand.retrieval.conflicts``); nothing when none do."""
    if span is None:
        return
    pairs: dict[tuple[int, int], str] = {}
    for c in citations:
        for other in c.conflicts_with:
            pair = (min(c.index, other), max(c.index, other))
            if pair not in pairs:  # the note's line about this pair ("[2] and [4] disagree")
                lines = c.conflict_note.splitlines()
                about = [n for n in lines if f"[{pair[0]}]" in n and f"[{pair[1]}]" in n]
                pairs[pair] = (about or lines or [""])[0]
    if pairs:
        span.set(
            "shelfhand.retrieval.conflicts",
            [{"passages": list(p), "note": note} for p, note in sorted(pairs.items())],
        )
