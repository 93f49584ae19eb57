"""What each side of a hybrid search found, and the worker threads that run the keyword side
alongside the vector side (:class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever`)."""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors

__all__ = ["KeywordSide", "Overlap", "VectorSide", "default_workers"]


@dataclass(frozen=True, slots=True)
class KeywordSide:
    """The query's tokens, the keyword hits and the seconds the side took."""

    tokens: list[str]
    hits: list[tuple[int, float]]
    seconds: float


def default_workers() -> int:
    """One fewer than the CPUs, at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) - 1))


class Overlap:
    """At most ``workers`` keyword sides on worker threads at once; ``submit`` returns None
    when all are busy (the caller then runs the work itself, never waits for a worker).

    The work runs in a copy of the caller's context variables, as it would on the caller's
    thread: the search it belongs to (``search_start``), the open span, the turn's counts."""

    def __init__(self, workers: int) -> None:
        if workers < 0:
            raise KnowledgeError(f"overlap_workers must be >= 0, not {workers}")
        self.workers = workers
        self._slots = threading.BoundedSemaphore(max(workers, 1))
        self._pool = (
            ThreadPoolExecutor(workers, thread_name_prefix="shelfhand-keyword") if workers else None
        )

    def submit(self, fn: Callable[..., KeywordSide], *args: Any) -> Future[KeywordSide] | None:
        pool = self._pool
        if pool is None or not self._slots.acquire(blocking=False):
            return None
        try:
            future = pool.submit(contextvars.copy_context().run, fn, *args)
        except RuntimeError:  # closed meanwhile
            self._slots.release()
            return None
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


@dataclass(frozen=True, slots=True)
class VectorSide:
    """What the vector side found: per space, its name, top list, weight and query vector."""

    spaces: list[str]
    lists: list[list[tuple[int, float]]]
    weights: list[float]
    query_vectors: list[Vectors]
