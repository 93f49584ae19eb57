"""The Qdrant knowledge index: keyword, dense and exact-identifier search of a store's chunks,
kept in step with the store through its outbox (a :class:`DerivedIndex`, like the tantivy and
faiss indexes it replaces) and always rebuildable from it.

:class:`QdrantIndex` writes; its :attr:`~QdrantIndex.keyword` and :attr:`~QdrantIndex.vectors`
(:mod:`.search`) are the stack's :class:`KeywordIndex` and :class:`VectorSearch`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.scoring import check_keyword_weights
from shelfhand.knowledge.stores.outbox import IndexChange, OncePerSearch, split_changes
from shelfhand.knowledge.stores.qdrant.model import (
    KEYWORD,
    PointFilter,
    QdrantBackend,
    chunk_point,
)
from shelfhand.knowledge.types import Chunk

logger = logging.getLogger(__name__)

__all__ = ["QdrantIndex"]

_SCHEMA = 3  # 2: the terms as one text field (model.TERMS); 3: no IDF modifier (the query's
# IDF); an older index is rebuilt
_BATCH = 512
TERM_COUNTS_TTL_S = 1.0
"""How long a term's count of chunks (BM25's document frequency) is reused on a Qdrant server,
whose collection other replicas also change; in process (Qdrant Edge) a count is reused until
this index applies a change."""
_TERM_COUNTS_MAX = 100_000
# Analysed tokens of a section heading, on average (BM25's length norm of the head part).
_HEAD_AVG_LEN = 4.0


class QdrantIndex:
    """The points of a store's chunks in Qdrant, written from the store's outbox.

    Args:
        backend: :class:`~.edge.EdgeBackend` (in process) or :class:`~.server.ServerBackend`.
        head_boost: Weight of a term in the chunk's own heading, on top of the body.
        avg_len: The body length (tokens) BM25 normalises by; recorded with the index (a
            rebuild takes a new value).
    """

    name = "qdrant"

    def __init__(
        self, backend: QdrantBackend, *, head_boost: float = 1.0, avg_len: float = 120.0
    ) -> None:
        check_keyword_weights(head_boost, 1.0)
        self.backend = backend
        self.head_boost = head_boost
        self._lock = threading.RLock()
        self._refresh: Callable[[], None] | None = None
        self._store_id: str | None = None
        self._term_counts: dict[tuple[str, str | None], int] = {}
        self._counts_ttl = TERM_COUNTS_TTL_S if backend.shared else float("inf")
        self._counts_until = float("-inf")
        meta = backend.meta() or {}
        self._generation: int | None = None
        self._spaces: dict[str, int] = {}
        self._avg_len = avg_len
        if meta.get("schema") == _SCHEMA:
            generation = meta.get("generation")
            self._generation = generation if isinstance(generation, int) else None
            spaces = meta.get("spaces")
            if isinstance(spaces, dict):
                self._spaces = {str(k): int(v) for k, v in spaces.items()}
            store = meta.get("store")
            self._store_id = store if isinstance(store, str) else None
            saved = meta.get("avg_len")
            if isinstance(saved, int | float):
                self._avg_len = float(saved)

    @property
    def avg_len(self) -> float:
        """The body length BM25 normalises by in this index's term weights."""
        return self._avg_len

    def set_refresh(self, refresh: Callable[[], None]) -> None:
        """Have :meth:`refresh` call ``refresh`` (the store's check for changes written by
        other processes, which this index has not seen yet), once per search
        (:class:`~shelfhand.knowledge.stores.outbox.OncePerSearch`)."""
        self._refresh = OncePerSearch(refresh)

    def refresh(self) -> None:
        """Apply committed changes not yet applied; searches call it first (a search's sides
        after the first find it done)."""
        if self._refresh is not None:
            self._refresh()

    def __repr__(self) -> str:
        return f"QdrantIndex({self.backend.location!r})"

    def term_counts(self, terms: Sequence[str], tenant: str | None = None) -> list[int]:
        """How many chunks hold each of ``terms`` in their body (BM25's document frequencies):
        of every tenant, or of ``tenant`` only. Each is one count over the index (about 5 ms
        at 1M chunks), so counts are kept: until this index applies a change, and on a server
        (which other replicas change too) at most :data:`TERM_COUNTS_TTL_S`."""
        counts = self._counts()
        found = []
        for term in terms:
            n = counts.get((term, tenant))
            if n is None:
                n = counts[term, tenant] = self.backend.count(PointFilter(tenant=tenant, term=term))
            found.append(n)
        return found

    def tenant_count(self, tenant: str | None) -> int:
        """How many chunks ``tenant`` has, or every tenant together (None), kept as
        :meth:`term_counts` keeps its counts."""
        counts = self._counts()
        n = counts.get(("", tenant))
        if n is None:
            n = counts["", tenant] = self.backend.count(PointFilter(tenant=tenant))
        return n

    def _counts(self) -> dict[tuple[str, str | None], int]:
        now = time.monotonic()
        counts = self._term_counts
        if now >= self._counts_until or len(counts) > _TERM_COUNTS_MAX:
            counts = self._term_counts = {}
            self._counts_until = now + self._counts_ttl
        return counts

    def _changed(self) -> None:
        """After a change is written: counts taken before it are not reused (the next
        :meth:`term_counts` starts a new dict; a count in flight writes into the old one)."""
        self._counts_until = float("-inf")

    # -- DerivedIndex ---------------------------------------------------------------------------

    def bind(self, store_id: str) -> None:
        """Serve the store ``store_id`` only: an index built from another store (the setting
        pointed at a different database) reports no generation, so the store rebuilds it
        instead of searching rowids that mean other chunks here."""
        if self._store_id != store_id:
            if self._generation is not None:
                logger.warning("the Qdrant index holds another store's chunks: rebuilding it")
            self._generation = None
        self._store_id = store_id

    def durable_generation(self) -> int | None:
        return self._generation

    def _point(self, rowid: int, chunk: Chunk, dense: dict[str, list[float]]) -> Any:
        return chunk_point(
            rowid,
            chunk,
            dense,
            avg_len=self._avg_len,
            head_avg_len=_HEAD_AVG_LEN,
            head_boost=self.head_boost,
        )

    def _space(self, space: str, dim: int) -> None:
        if self._spaces.get(space) == dim:
            return
        if space in self._spaces or space == KEYWORD:
            raise KnowledgeError(
                f"vector space {space!r} cannot be indexed in Qdrant with dimension {dim}"
            )
        self.backend.ensure_space(space, dim)
        self._spaces[space] = dim

    def _write(self, store: Any, items: Iterable[tuple[int, Chunk]]) -> None:
        """Upsert ``items`` with their stored vectors, in batches."""
        batch: list[tuple[int, Chunk]] = []
        for item in items:
            batch.append(item)
            if len(batch) >= _BATCH:
                self._write_batch(store, batch)
                batch = []
        if batch:
            self._write_batch(store, batch)

    def _write_batch(self, store: Any, batch: Sequence[tuple[int, Chunk]]) -> None:
        dense: dict[int, dict[str, list[float]]] = {}
        for space, (ids, matrix) in store.vectors_by_rowids([r for r, _ in batch]).items():
            self._space(space, int(matrix.shape[1]))
            for rowid, row in zip(ids.tolist(), matrix.tolist(), strict=True):
                dense.setdefault(int(rowid), {})[space] = row
        self.backend.upsert([self._point(r, c, dense.get(r, {})) for r, c in batch])

    def apply(self, store: Any, changes: Sequence[IndexChange]) -> None:
        """Delete replaced documents' points, write their current chunks (with vectors), the
        chunks appended to a document, and the vectors that pending chunks got (in their own
        space or a bridge space)."""
        doc_ids, old, appended = split_changes(changes, "chunks")
        _, _, embedded = split_changes(changes, "vectors")
        _, _, bridged = split_changes(changes, "bridge")
        embedded = list(dict.fromkeys([*embedded, *bridged]))
        with self._lock:
            self.backend.delete(sorted(old), doc_ids)
            stored = ((s.rowid, s.chunk) for s in store.iter_chunks(doc_ids)) if doc_ids else ()
            self._write(store, stored)
            self._write(store, store.chunk_map(appended).items())
            vectors = store.vectors_by_rowids(embedded) if embedded else {}
            for space, (ids, matrix) in vectors.items():
                self._space(space, int(matrix.shape[1]))
                self.backend.set_vectors(space, ids.tolist(), matrix.tolist())
            self._changed()

    def flush(self, generation: int, *, durable: bool) -> None:
        """Record ``generation`` (writes are searchable as soon as they are applied)."""
        with self._lock:
            self._save(generation)
            if durable:
                self.backend.flush()

    def _save(self, generation: int) -> None:
        self.backend.set_meta(
            {
                "schema": _SCHEMA,
                "generation": generation,
                "spaces": dict(self._spaces),
                "avg_len": self._avg_len,
                "store": self._store_id,
            }
        )
        self._generation = generation

    def rebuild(self, store: Any, generation: int) -> None:
        """Drop every point and write the store's chunks anew, with their vectors."""
        with self._lock:
            self.backend.clear()
            self._spaces = {}
            self._write(store, ((s.rowid, s.chunk) for s in store.iter_chunks()))
            self._changed()
            self._save(generation)
            self.backend.flush()

    def optimize(self) -> bool:
        """Have Qdrant build its HNSW graphs and merge segments now (Qdrant Edge does it only
        when asked; a server by itself). Blocking: minutes per 100k chunks on 2 cores."""
        with self._lock:
            return self.backend.optimize()

    def attached(self, store: Any) -> None:
        """Nothing to do: every point carries its labels."""

    def close(self) -> None:
        with self._lock:
            self.backend.close()

    def spaces(self) -> dict[str, int]:
        """The vector spaces indexed, with their dimensions."""
        with self._lock:
            return dict(self._spaces)
