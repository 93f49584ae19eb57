"""Phase 2 of ingest: embed the chunks stored without vectors ("pending").

Pending chunks are embedded ``group_chunks`` at a time and their vectors committed; the vector
index follows through the outbox, so hybrid search uses vectors where they exist. Vectors of
unchanged chunk texts are reused. If the embedder fails, the run stops and the chunks stay
pending (still keyword-searchable) until the next ingest, ``shelfhand embed`` or the service's
background worker embeds them. A run stops between groups when ``should_stop()`` turns true:
what was committed stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.reports import EmbedReport, IngestEvent, Progress, ShouldStop
from shelfhand.knowledge.protocols import KnowledgeStore
from shelfhand.knowledge.types import Chunk, StoredChunk

logger = logging.getLogger(__name__)

__all__ = ["PendingEmbedder", "embedding_text"]


def embedding_text(chunk: Chunk) -> str:
    """What the embedder sees of a chunk: its title (when not already leading) and text."""
    if chunk.title and not chunk.text.startswith(chunk.title):
        return f"{chunk.title}\n{chunk.text}"
    return chunk.text


def _never() -> bool:
    return False


class PendingEmbedder:
    """Embeds a store's pending chunks with ``router``.

    Args:
        store: The store; its vector index follows through the outbox.
        router: Embeds chunks per vector space.
        batch_size: Texts per embedder call.
        group_chunks: Pending chunks embedded per commit.
    """

    def __init__(
        self, store: KnowledgeStore, router: EmbeddingRouter, *, batch_size: int, group_chunks: int
    ) -> None:
        self.store = store
        self.router = router
        self.batch_size = batch_size
        self.group_chunks = group_chunks

    def run(
        self, *, progress: Progress | None = None, should_stop: ShouldStop | None = None
    ) -> EmbedReport:
        """Embed every chunk that has no vectors yet, ``group_chunks`` per commit.

        Never raises for an embedder failure: it stops, and the report says why (the chunks
        stay pending). A vector space whose stored model differs from the configured embedder
        raises :class:`KnowledgeError`.
        """
        stop = should_stop or _never
        started = time.perf_counter()
        total = self.store.count_pending()
        embedded = 0
        error: str | None = None
        interrupted = False
        after = 0
        while error is None and not interrupted:
            page = self.store.pending_chunks(after=after, limit=self.group_chunks)
            if not page:
                break
            after = page[-1].rowid
            done, error, interrupted = self._embed_page(page, stop)
            embedded += done
            if progress:
                progress(
                    IngestEvent(
                        kind="embedded",
                        source=page[-1].chunk.source,
                        done=min(embedded, total),
                        total=total,
                        phase="embed",
                    )
                )
        return EmbedReport(
            embedded_chunks=embedded,
            pending_chunks=self.store.count_pending(),
            seconds=time.perf_counter() - started,
            error=error,
            interrupted=interrupted,
        )

    def _embed_page(
        self, page: Sequence[StoredChunk], stop: ShouldStop
    ) -> tuple[int, str | None, bool]:
        """Embed one page of pending chunks; returns (stored, error, interrupted)."""
        router = self.router
        work: dict[str, list[tuple[int, str, str]]] = {}
        for item in page:
            text = embedding_text(item.chunk)
            work.setdefault(router.space_for(text), []).append(
                (item.rowid, text, item.chunk.content_hash)
            )
        stored = 0
        for space, entries in work.items():
            embedder = router.embedder(space)
            reuse = self.store.vectors_by_content_hash(space, [e[2] for e in entries])
            rowids = [e[0] for e in entries if e[2] in reuse]
            rows = [reuse[e[2]] for e in entries if e[2] in reuse]
            todo = [e for e in entries if e[2] not in reuse]
            error: str | None = None
            interrupted = False
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                try:
                    matrix = embedder.embed([e[1] for e in batch])
                    if matrix.shape != (len(batch), embedder.dim):
                        raise KnowledgeError(f"embedder returned shape {matrix.shape}")
                except Exception as exc:  # an outage must not lose the text: it stays pending
                    error = f"embedding failed ({type(exc).__name__}: {exc})"
                    logger.warning("%s; chunks left pending: %d", error, len(todo) - start)
                    break
                rowids.extend(e[0] for e in batch)
                rows.extend(matrix)
                if stop():
                    interrupted = True
                    break
            if rowids:
                stored += self.store.add_vectors(
                    space, rowids, np.stack(rows), model=(embedder.name, embedder.dim)
                )
            if error is not None or interrupted:
                return stored, error, interrupted
        return stored, None, False
