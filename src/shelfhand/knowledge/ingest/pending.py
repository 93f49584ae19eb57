"""Phase 2 of ingest: embed the chunks stored without vectors ("pending").

Pending chunks are embedded ``group_chunks`` at a time and their vectors committed; the vector
index follows through the outbox, so hybrid search uses vectors where they exist. Vectors of
unchanged chunk texts are reused. If the embedder fails, the run stops and the chunks stay
pending (still keyword-searchable) until the next ingest, ``shelfhand embed`` or the service's
background worker embeds them. A run stops between groups when ``should_stop()`` turns true:
what was committed stays.

A chunk of a bridged space (:mod:`~shelfhand.knowledge.embeddings.router`) is embedded in its
bridge space too, right after its own. If that embedder fails, the chunk keeps its own
vectors (it is no longer pending) and a later run with ``backfill`` embeds what its bridge
space lacks (chunks embedded before the bridge was configured, too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.embeddings.router import Embedder, EmbeddingRouter, Vectors
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
        self._bridged = 0
        """Chunks embedded in bridge spaces in this run."""
        self._bridge_error: str | None = None
        """Why embedding into a bridge space failed in this run (the chunks keep their own
        vectors and wait for a backfill)."""

    def run(
        self,
        *,
        progress: Progress | None = None,
        should_stop: ShouldStop | None = None,
        backfill: bool = False,
    ) -> EmbedReport:
        """Embed every chunk that has no vectors yet, ``group_chunks`` per commit; with
        ``backfill``, then the chunks a bridge space lacks.

        Never raises for an embedder failure: it stops, and the report says why (the chunks
        stay pending; a bridge space's failure is ``bridge space: …``, and those chunks keep
        their own vectors). A vector space whose stored model differs from the configured
        embedder raises :class:`KnowledgeError`.
        """
        stop = should_stop or _never
        started = time.perf_counter()
        total = self.store.count_pending()
        embedded = 0
        error: str | None = None
        interrupted = False
        after = 0
        self._bridge_error = None
        self._bridged = 0
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
        if backfill and error is None and not interrupted:
            interrupted = self._backfill(stop, progress)
        return EmbedReport(
            embedded_chunks=embedded,
            pending_chunks=self.store.count_pending(),
            seconds=time.perf_counter() - started,
            error=error or (self._bridge_error and f"bridge space: {self._bridge_error}"),
            interrupted=interrupted,
            bridged_chunks=self._bridged,
        )

    def _backfill(self, stop: ShouldStop, progress: Progress | None) -> bool:
        """Embed, in each bridge space, the chunks of its source space it lacks (progress as
        phase ``embed`` events); returns whether ``stop`` interrupted it (a failure is
        :attr:`_bridge_error`)."""
        router = self.router
        for source in router.routed_spaces:
            bridge = router.bridge_for(source)
            if bridge is None:
                continue
            lacking = self.store.count_vectors(source) - self.store.count_vectors(bridge)
            if lacking <= 0:
                continue
            logger.info("embedding %d chunks of space %r in its bridge %r", lacking, source, bridge)
            after = 0
            while self._bridge_error is None:
                page = self.store.chunks_lacking(
                    source, bridge, after=after, limit=self.group_chunks
                )
                if not page:
                    break
                after = page[-1].rowid
                entries = [(s.rowid, embedding_text(s.chunk), s.chunk.content_hash) for s in page]
                self._embed_bridge(bridge, entries)
                if progress:
                    done = min(self._bridged, lacking)
                    progress(
                        IngestEvent(
                            kind="embedded",
                            source=page[-1].chunk.source,
                            done=done,
                            total=lacking,
                            phase="embed",
                        )
                    )
                if stop():
                    return True
        return False

    def _embed_bridge(self, bridge: str, entries: Sequence[tuple[int, str, str]]) -> None:
        """Embed ``entries`` (chunks with vectors of their own) in ``bridge``; a failure is
        logged and kept in :attr:`_bridge_error` (the chunks wait for a backfill)."""
        embedder = self.router.embedder(bridge)
        rowids, rows, error, _ = self._vectors(bridge, embedder, entries, _never)
        if error is not None:
            self._bridge_error = error
            logger.warning("%s in space %r; a later backfill embeds them", error, bridge)
        if rowids:
            self._bridged += self.store.add_bridge_vectors(
                bridge, rowids, np.stack(rows), model=(embedder.name, embedder.dim)
            )

    def _vectors(
        self,
        space: str,
        embedder: Embedder,
        entries: Sequence[tuple[int, str, str]],
        stop: ShouldStop,
    ) -> tuple[list[int], list[Vectors], str | None, bool]:
        """Vectors of ``entries`` in ``space`` (stored ones of the same text reused), the
        rowids they belong to, why embedding stopped early, and whether ``stop`` interrupted
        it (checked after each batch)."""
        reuse = self.store.vectors_by_content_hash(space, [e[2] for e in entries])
        rowids = [e[0] for e in entries if e[2] in reuse]
        rows = [reuse[e[2]] for e in entries if e[2] in reuse]
        todo = [e for e in entries if e[2] not in reuse]
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            try:
                matrix = embedder.embed([e[1] for e in batch])
                if matrix.shape != (len(batch), embedder.dim):
                    raise KnowledgeError(f"embedder returned shape {matrix.shape}")
            except Exception as exc:  # an outage must not lose the text: it stays pending
                error = f"embedding failed ({type(exc).__name__}: {exc})"
                logger.warning("%s; chunks left pending: %d", error, len(todo) - start)
                return rowids, rows, error, False
            rowids.extend(e[0] for e in batch)
            rows.extend(matrix)
            if stop():
                return rowids, rows, None, True
        return rowids, rows, None, False

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
            rowids, rows, error, interrupted = self._vectors(space, embedder, entries, stop)
            if rowids:
                stored += self.store.add_vectors(
                    space, rowids, np.stack(rows), model=(embedder.name, embedder.dim)
                )
                bridge = router.bridge_for(space)
                if bridge is not None and self._bridge_error is None:
                    done = set(rowids)
                    self._embed_bridge(bridge, [e for e in entries if e[0] in done])
            if error is not None or interrupted:
                return stored, error, interrupted
        return stored, None, False
