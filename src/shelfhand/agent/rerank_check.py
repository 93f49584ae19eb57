"""The stronger grounding check with a rerank endpoint: a cross-encoder scores each sentence of
an answer against its passages (setting ``answer_judge = "rerank"``, the ``rerank_url``
endpoint; off by default).

A rerank model scores how well a passage answers a query; asked with an answer's sentence as
the query, it scores how well the passage backs that sentence, in any language or wording,
without a second chat model. The lexical check (:mod:`.grounding_check`) runs first and
always; then each sentence is supported when its best passage (the ones it cites, or all)
scores at least :attr:`RerankJudge.min_score`, except that a sentence stating a number or code
no passage holds stays unsupported whatever the score. ``Grounding.method`` is ``rerank``.

When the endpoint fails, times out or answers something unreadable, the lexical check stands
and ``Grounding.note`` says why: the answer is never held up or lost by its judge.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import anyio

from shelfhand.core.grounding import Grounding, SentenceSupport
from shelfhand.core.messages import Citation

from .grounding_check import without_citations
from .model_check import lexical_stands

__all__ = ["MIN_SCORE", "RerankJudge", "SentenceScorer"]

logger = logging.getLogger(__name__)

MIN_SCORE = 0.5
"""The relevance a sentence's best passage needs, for endpoints that answer 0 to 1 (Cohere,
Jina, TEI's default normalised scores)."""


class SentenceScorer(Protocol):
    """What scores documents against a query (:class:`~shelfhand.knowledge.retrieval.rerank.HttpReranker`)."""

    def scores(self, query: str, documents: Sequence[str]) -> list[float | None]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RerankJudge:
    """Judges an answer's sentences with a rerank endpoint, the lexical check as its fallback.

    Args:
        scorer: The endpoint (the ``rerank_url`` reranker).
        min_score: The score a sentence's best passage needs for the sentence to be supported.
        timeout: Seconds the judge may take for one answer; past it the lexical check stands.
    """

    scorer: SentenceScorer
    min_score: float = MIN_SCORE
    timeout: float = 20.0

    async def review(self, grounding: Grounding, citations: Sequence[Citation]) -> Grounding:
        """``grounding`` (the lexical check) with each sentence judged by the endpoint; as it
        is, with a ``note``, when the endpoint cannot score every sentence."""
        if not grounding.sentences or not citations:
            return grounding
        try:
            with anyio.fail_after(self.timeout):
                best = await anyio.to_thread.run_sync(
                    self._best_scores, grounding.sentences, citations, abandon_on_cancel=True
                )
        except TimeoutError:
            return lexical_stands(grounding, f"the rerank check took over {self.timeout:g}s")
        except Exception as exc:  # any failure of the judge: the lexical check stands
            logger.warning("the rerank grounding check failed: %s", type(exc).__name__)
            return lexical_stands(grounding, f"the rerank check failed ({type(exc).__name__})")
        if any(score is None for score in best):
            return lexical_stands(grounding, "the rerank check gave no score for every sentence")
        sentences = tuple(
            replace(
                s,
                supported=score is not None
                and score >= self.min_score
                and not s.missing
                and not s.misplaced,
            )
            for s, score in zip(grounding.sentences, best, strict=True)
        )
        return Grounding(sentences=sentences, method="rerank")

    def _best_scores(
        self, sentences: Sequence[SentenceSupport], citations: Sequence[Citation]
    ) -> list[float | None]:
        """Each sentence's best score over the passages it cites (all of them when it cites
        none or none of its numbers is a passage)."""
        by_index = {c.index: c for c in citations}
        best: list[float | None] = []
        for sentence in sentences:
            own = [by_index[n] for n in sentence.cited if n in by_index] or list(citations)
            query = " ".join(without_citations(sentence.text).split())
            scores = self.scorer.scores(query, [c.text for c in own])
            known = [s for s in scores if s is not None]
            best.append(max(known) if known else None)
        return best
