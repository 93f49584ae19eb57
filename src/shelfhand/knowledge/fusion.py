"""Reciprocal Rank Fusion (Cormack et al., 2009): merge ranked lists without comparing scores."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["rrf"]

K = TypeVar("K", bound=Hashable)


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


def _score(item: tuple[object, float]) -> float:
    return item[1]
