"""The PostgreSQL store's outbox: how its changes reach a derived index (the Qdrant index).

Without a derived index the PostgreSQL store searches its own rows and writes no outbox. Once
a process attaches one (:meth:`PgOutbox.attach`), the ``outbox`` flag in ``knowledge_pg_meta``
is set and every write transaction of every process adds, in the same transaction, one row per
document it changed. After the commit the writing process drains the outbox into its indexes:
drains are serialised by an advisory lock, each re-reads the changed documents' current
chunks and vectors (so applying a row twice, or in any order, leaves the same index), and
deletes the rows it applied. A process that dies between its commit and its drain, or that
writes without an index (an ingest worker), leaves rows that the next drain of any process
applies; a process with an index drains them before it searches (:meth:`PgOutbox.sync_pending`),
so a search never misses a committed write.

The index records the store generation it reflects; ``outbox_acked`` is the generation up to
which rows were deleted. An index that is missing, newer than the store, or older than
``outbox_acked`` (a restored snapshot, a new server) is rebuilt from the store on attach.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.knowledge.stores.outbox import DerivedIndex, IndexChange

if TYPE_CHECKING:
    import psycopg

    from shelfhand.knowledge.stores.pg.db import PgDatabase

logger = logging.getLogger(__name__)

__all__ = ["PgOutbox", "record_changes"]

_DRAIN_BATCH = 2000


def record_changes(conn: psycopg.Connection[Any], doc_ids: Iterable[str]) -> None:
    """Outbox rows for ``doc_ids`` (inside the caller's transaction), when an index is fed."""
    ids = sorted(set(doc_ids))
    if ids:
        conn.execute(
            "INSERT INTO knowledge_pg_outbox (doc_id) SELECT unnest(%s::text[]) WHERE EXISTS"
            " (SELECT 1 FROM knowledge_pg_meta WHERE key = 'outbox' AND value = 1)",
            (ids,),
        )


class PgOutbox:
    """The derived-index side of :class:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore`
    (a base class): attach, drain (``sync``) and close."""

    db: PgDatabase

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self._indexes: list[DerivedIndex[Any]] = []
        self._deferred = 0
        self._sync_lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Incremented by every write transaction."""
        return self._meta("generation")

    @property
    def store_id(self) -> str:
        """A random id of this database, made on first use: an index built from another
        database is told apart and rebuilt."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO knowledge_pg_meta (key, value) VALUES ('store_id',"
                " (random() * 9e18)::bigint) ON CONFLICT (key) DO NOTHING"
            )
            row = conn.execute(
                "SELECT value FROM knowledge_pg_meta WHERE key = 'store_id'"
            ).fetchone()
        return f"pg-{int(row[0]) if row else 0:x}"

    def _meta(self, key: str) -> int:
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT value FROM knowledge_pg_meta WHERE key = %s", (key,)
            ).fetchone()
        return int(row[0]) if row else 0

    def attach(self, *indexes: DerivedIndex[Any]) -> None:
        """Feed ``indexes`` from now on: turn the outbox on, then bring each up to date
        (rebuilt when it is missing, newer than the store, or older than the outbox keeps;
        else the pending rows are applied)."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE knowledge_pg_meta SET value = 1 WHERE key = 'outbox'")
        generation = self.generation
        acked = self._meta("outbox_acked")
        for index in indexes:
            seen = index.durable_generation()
            if seen is None or seen > generation or seen < acked:
                logger.info(
                    "rebuilding %s index (index generation %s, store %s)",
                    index.name,
                    seen,
                    generation,
                )
                index.rebuild(self, generation)
            index.attached(self)
            self._indexes.append(index)
            set_refresh = getattr(index, "set_refresh", None)
            if callable(set_refresh):  # searches first apply what other processes wrote
                set_refresh(self.sync_pending)
        self.sync(durable=True)

    def sync_pending(self) -> None:
        """Drain the outbox if it holds rows (those of another process that has no index,
        e.g. a worker, or that died before its drain): one cheap query when it is empty."""
        with self.db.connection() as conn:
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM knowledge_pg_outbox)").fetchone()
        if row is not None and row[0]:
            self.sync()

    def sync(self, *, durable: bool = False) -> None:
        """Drain the outbox into the attached indexes (see the module docstring)."""
        if not self._indexes:
            return
        with self._sync_lock:
            while self._drain(durable=durable):
                pass

    def _drain(self, *, durable: bool) -> bool:
        """Apply one batch of outbox rows; whether there may be more."""
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('knowledge_pg_outbox'))")
            rows = conn.execute(
                "SELECT id, doc_id FROM knowledge_pg_outbox ORDER BY id LIMIT %s",
                (_DRAIN_BATCH,),
            ).fetchall()
            gen_row = conn.execute(
                "SELECT value FROM knowledge_pg_meta WHERE key = 'generation'"
            ).fetchone()
            generation = int(gen_row[0]) if gen_row else 0
            changes = [
                IndexChange(
                    outbox_id=int(r[0]), generation=generation, doc_id=str(r[1]), old_rowids=()
                )
                for r in rows
            ]
            if changes:
                for index in self._indexes:
                    index.apply(self, changes)
            for index in self._indexes:
                index.flush(generation, durable=durable or bool(changes))
            if changes:
                conn.execute(
                    "DELETE FROM knowledge_pg_outbox WHERE id <= %s", (changes[-1].outbox_id,)
                )
                conn.execute(
                    "UPDATE knowledge_pg_meta SET value = GREATEST(value, %s)"
                    " WHERE key = 'outbox_acked'",
                    (generation,),
                )
        return len(rows) == _DRAIN_BATCH

    def _after_change(self) -> None:
        if self._deferred == 0:
            self._sync_after_commit()

    def _sync_after_commit(self) -> None:
        """Drain after a committed write; an index that cannot be reached leaves the rows for
        a later drain (the write itself succeeded: searches fail until the index is back)."""
        try:
            self.sync()
        except DependencyUnavailableError as exc:
            logger.warning("index not updated yet, the outbox keeps the change: %s", exc)

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Drain once at the end of the block instead of after each write."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
            if self._deferred == 0:
                self._sync_after_commit()

    def close(self) -> None:
        """Drain what is pending, close the indexes and the connection pool."""
        try:
            if self._indexes:
                self.sync(durable=True)
        finally:
            for index in self._indexes:
                index.close()
            self._indexes.clear()
            self.db.close()

    def rebuild_indexes(self, names: Sequence[str] | None = None) -> None:
        """Recreate the attached indexes (those called ``names``, default all) from the store."""
        self.sync(durable=True)
        generation = self.generation
        for index in self._indexes:
            if names is None or index.name in names:
                index.rebuild(self, generation)
