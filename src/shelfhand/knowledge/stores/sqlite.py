"""The embedded system of record: one SQLite file per workspace (docs/design.md R3, R5).

Documents, chunks and their vectors live here. The search indexes (tantivy, faiss) are
*derived*: every document change writes an ``index_outbox`` row in the same transaction, and
after the commit the store applies pending rows to each attached :class:`DerivedIndex`, then
deletes the rows once every index has made them durable. A crash between the two steps leaves
the rows in place, and :meth:`SqliteKnowledgeStore.attach` replays them (idempotently) on the
next open; an index that is missing or whose recorded generation cannot be bridged by the
outbox is rebuilt from SQLite.

An index that cannot be reached (a Qdrant server that is down) fails neither the write nor the
ingest: the committed rows stay in the outbox, and every search first applies what is pending
(:meth:`SqliteKnowledgeStore.sync_pending`), so searches fail with the index's reason until it
is back and caught up, never answering from a stale index.

Chunk rowids (``AUTOINCREMENT``, never reused) are the keys of every index. A chunk's rowid
never changes its tenant or tags: re-ingesting a document deletes its chunks and inserts new
rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from shelfhand.core.db import transaction
from shelfhand.core.errors import DependencyUnavailableError, KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors, detect_language
from shelfhand.knowledge.protocols import DocVectors, SourceItem
from shelfhand.knowledge.stores.outbox import DerivedIndex, IndexChange, read_changes, write_change
from shelfhand.knowledge.stores.records import ReplacesSources
from shelfhand.knowledge.stores.sqlite_reads import SqliteStoreReads
from shelfhand.knowledge.types import Chunk, Document, SourceInfo, StoredChunk

logger = logging.getLogger(__name__)

__all__ = [
    "DerivedIndex",
    "IndexChange",
    "SourceInfo",
    "SqliteKnowledgeStore",
    "StoredChunk",
]

EMBED_NONE = "none"
EMBED_DONE = "embedded"
EMBED_FAILED = "embedding_failed"
EMBED_PENDING = "pending"
"""Stored and keyword-searchable; phase 2 of ingest has not embedded all its chunks yet."""


class SqliteKnowledgeStore(SqliteStoreReads, ReplacesSources):
    """Documents, chunks and vectors in one SQLite file; the outbox keeps indexes in step.

    Thread-safe: one lock serialises access to the connection. The reads are
    :class:`~shelfhand.knowledge.stores.sqlite_reads.SqliteStoreReads`.

    Args:
        path: The database file, e.g. ``<workspace>/knowledge.db``.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._indexes: list[DerivedIndex[SqliteKnowledgeStore]] = []
        self._deferred = 0
        self._applied_outbox_id = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Apply pending changes durably (an unreachable index leaves them in the outbox for
        the next open), close the indexes and the connection."""
        with self._lock:
            if self._indexes:
                self._sync_after_commit(durable=True)
            for index in self._indexes:
                index.close()
            self._indexes.clear()
            self._conn.close()

    # -- derived indexes ---------------------------------------------------------------------

    def attach(self, *indexes: DerivedIndex[SqliteKnowledgeStore]) -> None:
        """Attach indexes and bring each up to date: replay the outbox, or rebuild it.

        An index is rebuilt when it is missing, when it claims a generation newer than the
        store, or when changes it has not seen are no longer in the outbox.
        """
        with self._lock:
            generation = self.generation
            pending = self.pending_changes()
            oldest = min((c.generation for c in pending), default=generation + 1)
            for index in indexes:
                seen = index.durable_generation()
                if seen is None or seen > generation or seen < oldest - 1:
                    logger.info(
                        "rebuilding %s index (index generation %s, store %s)",
                        index.name,
                        seen,
                        generation,
                    )
                    index.rebuild(self, generation)
                elif pending:
                    logger.info("replaying %d outbox changes into %s", len(pending), index.name)
                    index.apply(self, pending)
                    index.flush(generation, durable=True)
                index.attached(self)
                self._indexes.append(index)
                set_refresh = getattr(index, "set_refresh", None)
                if callable(set_refresh):  # its searches first apply what is pending
                    set_refresh(self.sync_pending)
            self._applied_outbox_id = max((c.outbox_id for c in pending), default=0)
            self._ack(generation)

    def rebuild_indexes(self, names: Iterable[str] | None = None) -> None:
        """Recreate the attached indexes (those called ``names``, default all) from SQLite:
        repairs any drift, and leaves the keyword index in one segment."""
        with self._lock:
            wanted = None if names is None else set(names)
            if wanted is not None:
                self.sync(durable=True)  # the indexes not rebuilt are brought up to date
            generation = self.generation
            for index in self._indexes:
                if wanted is None or index.name in wanted:
                    index.rebuild(self, generation)
            self._applied_outbox_id = max((c.outbox_id for c in self.pending_changes()), default=0)
            self._ack(generation)

    def pending_changes(self, after_id: int = 0) -> list[IndexChange]:
        """Outbox rows not yet acknowledged by every index, oldest first."""
        with self._lock:
            return read_changes(self._conn, after_id)

    def sync(self, *, durable: bool = False) -> None:
        """Apply outbox rows not yet applied to the attached indexes and make them searchable.

        Rows are deleted once every index has persisted them, so a crash at any point leaves
        enough in the outbox to replay.
        """
        with self._lock:
            changes = self.pending_changes(self._applied_outbox_id)
            generation = self.generation
            if changes:
                for index in self._indexes:
                    index.apply(self, changes)
                self._applied_outbox_id = changes[-1].outbox_id
            if changes or durable:
                for index in self._indexes:
                    index.flush(generation, durable=durable)
            self._ack(generation)

    def sync_pending(self) -> None:
        """Apply the outbox rows not applied yet, if any (a write whose index could not be
        reached, or another process's): one cheap query when there are none.

        Raises:
            DependencyUnavailableError: An index cannot be reached.
        """
        with self._lock:
            row = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM index_outbox WHERE id > ?)",
                (self._applied_outbox_id,),
            ).fetchone()
            if row is not None and row[0]:
                self.sync()

    def _sync_after_commit(self, *, durable: bool = False) -> None:
        """Sync after a committed write; an index that cannot be reached leaves the rows in
        the outbox (the write succeeded: searches fail until the index is back)."""
        try:
            self.sync(durable=durable)
        except DependencyUnavailableError as exc:
            logger.warning("index not updated yet, the outbox keeps the change: %s", exc)

    def _ack(self, generation: int) -> None:
        durable = [i.durable_generation() for i in self._indexes]
        if not self._indexes or any(d is None for d in durable):
            return
        upto = min(min(d for d in durable if d is not None), generation)
        with transaction(self._conn):
            self._conn.execute(
                "DELETE FROM index_outbox WHERE generation <= ? AND id <= ?",
                (upto, self._applied_outbox_id),
            )

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Within the block, changes reach the indexes only at explicit :meth:`sync` calls.

        Bulk ingest uses it to commit the keyword index every few hundred documents instead of
        after each one; the outbox keeps the indexes correct if the process dies meanwhile.
        """
        with self._lock:
            self._deferred += 1
        try:
            yield
        finally:
            with self._lock:
                self._deferred -= 1
                if self._deferred == 0 and self._indexes:
                    self._sync_after_commit(durable=True)

    def _after_change(self) -> None:
        if self._deferred == 0 and self._indexes:
            self._sync_after_commit()

    # -- writes --------------------------------------------------------------------------------

    def _bump_generation(self) -> int:
        self._conn.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'"
        )
        row = self._conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0])

    def _remove_doc(self, doc_id: str, generation: int) -> bool:
        old = [
            r[0] for r in self._conn.execute("SELECT rowid FROM chunks WHERE doc_id=?", (doc_id,))
        ]
        cur = self._conn.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,))
        write_change(self._conn, generation, doc_id, old_rowids=old)
        return cur.rowcount > 0

    def _insert_doc(
        self,
        doc: Document,
        chunks: Sequence[Chunk],
        vectors: DocVectors | None,
        embed_state: str,
        embed_error: str | None,
    ) -> list[int]:
        space_of = {p: space for space, (ps, _) in (vectors or {}).items() for p in ps}
        self._conn.execute(
            "INSERT INTO documents (doc_id, source, title, doc_type, content_hash, tenant_id,"
            " permission_tags, updated_at, metadata, chunk_count, embed_state, embed_error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc.doc_id,
                doc.source,
                doc.title,
                doc.doc_type,
                doc.content_hash,
                doc.tenant_id,
                json.dumps(list(doc.permission_tags)),
                doc.updated_at,
                json.dumps(dict(doc.metadata), default=str),
                len(chunks),
                embed_state,
                embed_error,
            ),
        )
        rowids = self._insert_chunks(doc.doc_id, chunks, space_of)
        for space, (positions, matrix) in (vectors or {}).items():
            arr = np.ascontiguousarray(matrix, dtype=np.float32)
            if arr.ndim != 2 or arr.shape[0] != len(positions):
                raise KnowledgeError(f"vectors for space {space!r} do not match their positions")
            self._conn.executemany(
                "INSERT INTO embeddings (chunk_rowid, space, vector) VALUES (?, ?, ?)",
                [(rowids[p], space, arr[j].tobytes()) for j, p in enumerate(positions)],
            )
        return rowids

    def _insert_chunks(
        self, doc_id: str, chunks: Sequence[Chunk], space_of: Mapping[int, str]
    ) -> list[int]:
        rowids: list[int] = []
        for i, c in enumerate(chunks):
            if c.doc_id != doc_id:
                raise KnowledgeError(f"chunk {c.chunk_id!r} does not belong to {doc_id!r}")
            cur = self._conn.execute(
                "INSERT INTO chunks (chunk_id, doc_id, chunk_index, text, title, section_path,"
                " page, source, start, end_, content_hash, doc_type, permission_tags, tenant_id,"
                " updated_at, language, space) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    c.chunk_id,
                    c.doc_id,
                    c.chunk_index,
                    c.text,
                    c.title,
                    json.dumps(list(c.section_path), ensure_ascii=False),
                    c.page,
                    c.source,
                    c.start,
                    c.end,
                    c.content_hash,
                    c.doc_type,
                    json.dumps(list(c.permission_tags)),
                    c.tenant_id,
                    c.updated_at,
                    detect_language(c.text),
                    space_of.get(i),
                ),
            )
            rowids.append(int(cur.lastrowid or 0))
        return rowids

    def write_batch(
        self,
        source: str,
        *,
        new_docs: Sequence[tuple[Document, Sequence[Chunk]]] = (),
        appended: Sequence[tuple[str, Sequence[Chunk]]] = (),
        start: bool = False,
        finish_hash: str | None = None,
        doc_type: str = "",
    ) -> None:
        """One transaction of a batched (phase 1) ingest of ``source``; chunks get no vectors.

        Args:
            source: The source being written.
            new_docs: Documents to insert (replacing any of the same id) with their first chunks.
            appended: ``(doc_id, chunks)`` to append to documents inserted by earlier batches.
            start: First batch: remove every document of the source and its recorded hash, so
                until the batch with ``finish_hash`` commits the source counts as changed (an
                interrupted ingest of it is redone by the next one).
            finish_hash: Last batch: record the file hash for incremental ingest.
            doc_type: Recorded with ``finish_hash``.
        """
        with self._lock:
            with transaction(self._conn):
                generation = self._bump_generation()
                if start:
                    for (doc_id,) in self._conn.execute(
                        "SELECT doc_id FROM documents WHERE source=?", (source,)
                    ).fetchall():
                        self._remove_doc(doc_id, generation)
                    self._conn.execute("DELETE FROM sources WHERE source=?", (source,))
                for doc, chunks in new_docs:
                    self._remove_doc(doc.doc_id, generation)
                    self._insert_doc(doc, chunks, None, EMBED_PENDING, None)
                for doc_id, chunks in appended:
                    rowids = self._insert_chunks(doc_id, chunks, {})
                    self._conn.execute(
                        "UPDATE documents SET chunk_count = chunk_count + ?, embed_state=?"
                        " WHERE doc_id=?",
                        (len(chunks), EMBED_PENDING, doc_id),
                    )
                    write_change(self._conn, generation, doc_id, kind="chunks", rowids=rowids)
                if finish_hash is not None:
                    self._record_source(source, finish_hash, doc_type)
            self._after_change()

    def _record_source(self, source: str, content_hash: str, doc_type: str) -> None:
        self._conn.execute(
            "INSERT INTO sources (source, content_hash, doc_type, updated_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT(source) DO UPDATE SET"
            " content_hash=excluded.content_hash, doc_type=excluded.doc_type,"
            " updated_at=excluded.updated_at",
            (source, content_hash, doc_type, time.time()),
        )

    def add_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        *,
        model: tuple[str, int] | None = None,
    ) -> int:
        """Store vectors of pending chunks (phase 2); returns how many were stored.

        Chunks deleted or already embedded meanwhile are skipped. ``model`` (name, dim) is
        checked against what the space already holds.
        """
        return self._store_vectors(space, rowids, matrix, model, own=True)

    def add_bridge_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        *,
        model: tuple[str, int] | None = None,
    ) -> int:
        """Store vectors in the bridge space ``space`` for chunks that have their own (chunks
        deleted or still pending are skipped); returns how many were stored."""
        return self._store_vectors(space, rowids, matrix, model, own=False)

    def _store_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        model: tuple[str, int] | None,
        *,
        own: bool,
    ) -> int:
        """:meth:`add_vectors` (``own``: pending chunks, which then have a space) or
        :meth:`add_bridge_vectors` (chunks that have theirs)."""
        arr = np.ascontiguousarray(matrix, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(rowids):
            raise KnowledgeError(f"vectors for space {space!r} do not match their rowids")
        claim = (
            "UPDATE chunks SET space=? WHERE rowid=? AND space IS NULL RETURNING doc_id"
            if own
            else "SELECT doc_id FROM chunks WHERE rowid=? AND space IS NOT NULL"
        )
        with self._lock:
            with transaction(self._conn):
                generation = self._bump_generation()
                if model is not None:
                    self._check_space(space, *model)
                by_doc: dict[str, list[int]] = {}
                for rowid, row in zip(rowids, arr, strict=True):
                    params = (space, int(rowid)) if own else (int(rowid),)
                    found = self._conn.execute(claim, params).fetchone()
                    if found is None:
                        continue
                    self._conn.execute(
                        "INSERT OR REPLACE INTO embeddings (chunk_rowid, space, vector)"
                        " VALUES (?, ?, ?)",
                        (int(rowid), space, row.tobytes()),
                    )
                    by_doc.setdefault(str(found[0]), []).append(int(rowid))
                for doc_id, done in by_doc.items():
                    write_change(
                        self._conn,
                        generation,
                        doc_id,
                        kind="vectors" if own else "bridge",
                        rowids=done,
                    )
                    if own:
                        self._conn.execute(
                            "UPDATE documents SET embed_state=?, embed_error=NULL WHERE doc_id=?"
                            " AND NOT EXISTS (SELECT 1 FROM chunks WHERE doc_id=? AND space IS NULL)",
                            (EMBED_DONE, doc_id, doc_id),
                        )
            self._after_change()
        return sum(len(v) for v in by_doc.values())

    def replace_source(
        self,
        source: str,
        source_hash: str | None,
        items: Sequence[SourceItem],
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
        remove_others: bool = True,
        space_models: Mapping[str, tuple[str, int]] | None = None,
    ) -> list[list[int]]:
        """See :meth:`ReplacesSources.replace_source`: one SQLite transaction."""
        with self._lock:
            with transaction(self._conn):
                generation = self._bump_generation()
                for space, (model, dim) in (space_models or {}).items():
                    self._check_space(space, model, dim)
                new_ids = {doc.doc_id for doc, _, _ in items}
                if remove_others:
                    for (doc_id,) in self._conn.execute(
                        "SELECT doc_id FROM documents WHERE source=?", (source,)
                    ).fetchall():
                        if doc_id not in new_ids:
                            self._remove_doc(doc_id, generation)
                result: list[list[int]] = []
                for doc, chunks, vectors in items:
                    self._remove_doc(doc.doc_id, generation)
                    state = embed_state or (EMBED_DONE if vectors else EMBED_NONE)
                    result.append(self._insert_doc(doc, chunks, vectors, state, embed_error))
                if source_hash is not None:
                    self._record_source(source, source_hash, items[0][0].doc_type if items else "")
            self._after_change()
        return result

    def _check_space(self, space: str, model: str, dim: int) -> None:
        row = self._conn.execute(
            "SELECT embedder, dim FROM spaces WHERE space=?", (space,)
        ).fetchone()
        if row is None:
            self._conn.execute(
                "INSERT INTO spaces (space, embedder, dim) VALUES (?, ?, ?)", (space, model, dim)
            )
        elif (row[0], row[1]) != (model, dim):
            raise KnowledgeError(
                f"vector space {space!r} holds vectors of {row[0]} (dim {row[1]}) but the "
                f"configured embedder is {model} (dim {dim}); use a new workspace or forget "
                "and re-ingest the documents"
            )

    def delete_document(self, doc_id: str) -> bool:
        """Delete a document, its chunks and vectors. Returns whether it existed."""
        with self._lock:
            with transaction(self._conn):
                existed = self._remove_doc(doc_id, self._bump_generation())
            self._after_change()
        return existed

    def delete_source(self, source: str) -> int:
        """Delete every document of a source (a file's records too). Returns how many."""
        with self._lock:
            with transaction(self._conn):
                generation = self._bump_generation()
                doc_ids = [
                    r[0]
                    for r in self._conn.execute(
                        "SELECT doc_id FROM documents WHERE source=?", (source,)
                    ).fetchall()
                ]
                for doc_id in doc_ids:
                    self._remove_doc(doc_id, generation)
                self._conn.execute("DELETE FROM sources WHERE source=?", (source,))
            self._after_change()
        return len(doc_ids)

    def set_root_path(self, name: str, path: str) -> None:
        with self._lock, transaction(self._conn):
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (f"root:{name}", path),
            )

    def forget_root(self, name: str) -> None:
        with self._lock, transaction(self._conn):
            self._conn.execute("DELETE FROM meta WHERE key=?", (f"root:{name}",))
