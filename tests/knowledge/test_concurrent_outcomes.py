"""Concurrent searches over one knowledge base each get their own outcome.

A search's fallback reason (its query embedding failed: quota) travels with the search's
result; nothing of one search is kept on the shared knowledge base for another to read. The
embedder fails exactly for queries holding a marker word, and events order the searches so
that the failing one fails while the others are in flight, and a new one starts before it
returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from shelfhand.core.errors import EmbeddingUnavailableError
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.types import Document, SearchHit, SearchResult, Section

MARKER = "overdrawn"
"""The embedder is out of quota for every query holding this word."""
WAIT = 10.0
"""Seconds any step waits for another before the test fails."""

Gate = Callable[[str], None]


class QuotaEmbedder:
    """Hashing vectors; a query holding :data:`MARKER` fails with a quota error. ``gate`` runs
    first with the query (the test's choreography)."""

    def __init__(self) -> None:
        self._inner = HashingEmbedder()
        self.gate: Gate = lambda query: None

    @property
    def name(self) -> str:
        return "quota-test"

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.gate(text)
        if MARKER in text:
            raise EmbeddingUnavailableError("quota exceeded")
        return self._inner.embed_query(text)


class GatedReranker:
    """Keeps the fused order; ``gate`` runs first with the query, after the search itself
    (the retriever's part) is done."""

    name = "gated"

    def __init__(self) -> None:
        self.gate: Gate = lambda query: None

    def rerank(self, query: str, hits: Sequence[SearchHit], top_n: int) -> list[SearchHit]:
        self.gate(query)
        return list(hits)[:top_n]


DOCS = {
    "warranty.md": "The warranty period is twelve months for the projector and the lamp.",
    "lamp.md": "Lamp warranty: the lamp is covered for six months or 2000 hours.",
    "filter.md": "Filter warranty: clean the filter monthly; a clogged filter voids the warranty.",
    "returns.md": "Warranty returns need the receipt; the period starts at purchase.",
}


@pytest.fixture
def shelf(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, QuotaEmbedder, GatedReranker]]:
    embedder, reranker = QuotaEmbedder(), GatedReranker()
    kb = KnowledgeBase(tmp_path / "ws", EmbeddingRouter({"default": embedder}), reranker=reranker)
    kb.ingest_documents(
        Document(
            doc_id=name,
            source=name,
            title="",
            doc_type="markdown",
            sections=(Section(text=text),),
            content_hash=name,
        )
        for name, text in DOCS.items()
    )
    yield kb, embedder, reranker
    kb.close()


def _waits(event: threading.Event) -> None:
    assert event.wait(WAIT), "a search the choreography waits for never got there"


def test_each_concurrent_search_reports_only_its_own_embedding_failure(
    shelf: tuple[KnowledgeBase, QuotaEmbedder, GatedReranker],
) -> None:
    kb, embedder, reranker = shelf
    failing = f"warranty period {MARKER}"  # hybrid; its query embedding is out of quota
    keyword = "warranty period"  # keyword mode: never embeds
    before = "lamp warranty"  # hybrid, started before the failure, ends after it
    after = "filter warranty"  # hybrid, started after the failure, before that search returns
    keyword_searched, before_embedding, after_embedding = (threading.Event() for _ in range(3))
    failing_reranking, failing_done = threading.Event(), threading.Event()

    def embedding(query: str) -> None:
        if query == failing:  # fail while the keyword search and `before` are in flight
            _waits(keyword_searched)
            _waits(before_embedding)
        elif query == before:
            before_embedding.set()
            _waits(failing_done)
        elif query == after:
            after_embedding.set()
            _waits(failing_done)

    def reranking(query: str) -> None:
        if query == keyword:  # its search is done; it returns after the failure
            keyword_searched.set()
            _waits(failing_done)
        elif query == failing:  # failed and recorded; a new search starts before it returns
            failing_reranking.set()
            _waits(after_embedding)

    embedder.gate, reranker.gate = embedding, reranking
    results: dict[str, SearchResult] = {}
    errors: list[BaseException] = []

    def search(query: str, mode: str, done: threading.Event | None = None) -> None:
        try:
            results[query] = kb.search_result(query, k=3, mode=mode)  # type: ignore[arg-type]
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            if done is not None:
                done.set()

    threads = [
        threading.Thread(target=search, args=(failing, "hybrid", failing_done)),
        threading.Thread(target=search, args=(keyword, "keyword")),
        threading.Thread(target=search, args=(before, "hybrid")),
    ]
    for thread in threads:
        thread.start()
    _waits(failing_reranking)
    late = threading.Thread(target=search, args=(after, "hybrid"))
    late.start()
    for thread in [*threads, late]:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert errors == []

    assert "quota exceeded" in (results[failing].degraded_reason or "")
    assert all(h.vector_rank is None for h in results[failing].hits)  # keywords stood in
    assert results[keyword].degraded_reason is None
    for query in (before, after):
        assert results[query].degraded_reason is None, query
        assert any(h.vector_rank is not None for h in results[query].hits), query
    assert kb.degraded_reason is None  # the base itself opened with its embedder


def test_many_threads_of_mixed_searches_each_get_their_own_outcome(
    shelf: tuple[KnowledgeBase, QuotaEmbedder, GatedReranker],
) -> None:
    kb, _, _ = shelf
    threads, rounds = 8, 12
    # every round starts all threads at once: keyword, failing and working hybrid searches (3
    # failures in a row may pause the embedder: then a working search says so, and only that)
    barrier = threading.Barrier(threads, timeout=WAIT)
    kinds = [("keyword", "warranty"), ("hybrid", f"warranty {MARKER}"), ("hybrid", "warranty")]
    seen: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()

    def run(n: int) -> None:
        for r in range(rounds):
            mode, query = kinds[(n + r) % len(kinds)]
            barrier.wait()
            found = kb.search_result(query, k=2, mode=mode)  # type: ignore[arg-type]
            with lock:
                seen.append((mode, query, found.degraded_reason))

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT * rounds)
        assert not worker.is_alive()

    assert len(seen) == threads * rounds
    for mode, query, reason in seen:
        if mode == "keyword":  # never embeds: never degraded
            assert reason is None, (query, reason)
        elif MARKER in query:  # its own embedding failed (or the breaker had paused it)
            assert reason is not None, query
            assert reason.startswith(("query embedding failed", "query embedding paused"))
        else:  # its embedding works: no failure of its own, at most the breaker's pause
            assert reason is None or reason.startswith("query embedding paused"), reason
