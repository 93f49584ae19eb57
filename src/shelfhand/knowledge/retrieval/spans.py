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
    documents: list[dict[str, Any]] = []
    for hit in result.hits:
        chunk = hit.chunk
        doc: dict[str, Any] = {
            "id": chunk.chunk_id,
            "source": chunk.source,
            "title": chunk.title,
            "score": round(hit.score, 6),
            "keyword_rank": hit.keyword_rank,
            "vector_rank": hit.vector_rank,
            "exact": hit.exact,
        }
        if hit.rerank_score is not None:
            doc["rerank_score"] = round(hit.rerank_score, 6)
        if hit.relevance is not None:
            doc["relevance"] = round(hit.relevance, 6)
        if contents:
            doc["text"] = chunk.text
        documents.append(doc)
    span.update(
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": data_source,
            "gen_ai.retrieval.query.text": query,
            "gen_ai.retrieval.documents": documents,
            "shelfhand.retrieval.mode": mode,
            "shelfhand.retrieval.top_k": k,
            "shelfhand.retrieval.scope.tenant": user.tenant_id if user else "default",
            "shelfhand.retrieval.scope.user": user.user_id if user else "anonymous",
            "shelfhand.retrieval.hits_by_keyword": sum(
                1 for h in result.hits if h.keyword_rank is not None
            ),
            "shelfhand.retrieval.hits_by_vector": sum(
                1 for h in result.hits if h.vector_rank is not None
            ),
            "shelfhand.retrieval.hits": len(result.hits),
            # candidates per stage: where a right passage was lost
            "shelfhand.retrieval.candidates.keyword": counts.keyword,
            "shelfhand.retrieval.candidates.vector": counts.vector,
            "shelfhand.retrieval.candidates.fused": counts.fused,
            "shelfhand.retrieval.candidates.relevant": counts.relevant,
            "shelfhand.retrieval.candidates.reranked": counts.rerank_candidates,
            "shelfhand.retrieval.candidates.returned": counts.returned,
            "shelfhand.retrieval.keyword_ms": round(timings.keyword_ms, 3),
            "shelfhand.retrieval.embed_ms": round(timings.embed_ms, 3),
            "shelfhand.retrieval.vector_ms": round(timings.vector_ms, 3),
            "shelfhand.retrieval.fuse_ms": round(timings.fuse_ms, 3),
            "shelfhand.retrieval.exact_ms": round(timings.exact_ms, 3),
            "shelfhand.retrieval.rerank_ms": round(timings.rerank_ms, 3),
            "shelfhand.retrieval.total_ms": round(timings.total_ms, 3),
            "shelfhand.retrieval.pending_chunks": timings.pending_chunks,
            "shelfhand.retrieval.degraded_reason": result.degraded_reason,
            "shelfhand.retrieval.rerank_reason": timings.rerank_reason,
        }
    )


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
