"""The embedded system of record: one SQLite file per workspace (DESIGN R3, R5).

Documents, chunks and their vectors live here. The search indexes (tantivy, faiss) are
*derived*: every document change writes an ``index_outbox`` row in the same transaction, and
after the commit the store applies pending rows to each attached :class:`DerivedIndex`, then
deletes the rows once every index has made them durable. A crash between the two steps leaves
the rows in place, and :meth:`SqliteKnowledgeStore.attach` replays them (idempotently) on the
next open; an index that is missing or whose recorded generation cannot be bridged by the
outbox is rebuilt from SQLite.

Chunk rowids (``AUTOINCREMENT``, never reused) are the keys of every index. A chunk's rowid
never changes its tenant or tags: re-ingesting a document deletes its chunks and inserts new
rows.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.core.db import apply_migrations, connect, transaction
from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors, detect_language
from shelfhand.knowledge.stores.outbox import DerivedIndex, IndexChange, read_changes, write_change
from shelfhand.knowledge.stores.sqlite_schema import MIGRATIONS
from shelfhand.knowledge.types import Chunk, Document, Scope, SourceInfo, StoredChunk

logger = logging.getLogger(__name__)

__all__ = [
    "PUBLIC_TAG",
    "DerivedIndex",
    "IndexChange",
    "SourceInfo",
    "SqliteKnowledgeStore",
    "StoredChunk",
]

PUBLIC_TAG = "__public__"
"""Tag given in the indexes to chunks without permission tags (readable by the whole tenant)."""

EMBED_NONE = "none"
EMBED_DONE = "embedded"
EMBED_FAILED = "embedding_failed"
EMBED_PENDING = "pending"
"""Stored and keyword-searchable; phase 2 of ingest has not embedded all its chunks yet."""

_IN_BATCH = 500
"""Values per ``IN (...)`` list: well under SQLite's bound-variable limit."""
_CHUNK_COLUMNS = (
    "rowid, chunk_id, doc_id, chunk_index, text, title, section_path, page, source, start, end_,"
    " content_hash, doc_type, permission_tags, tenant_id, updated_at"
)


_PAGE_CACHE_KIB = 65_536  # at most; SQLite fills it as pages are read


def _json_tuple(text: str) -> tuple[Any, ...]:
    """A stored JSON list as a tuple; most are empty, which skips the decoder (searches read
    a dozen rows each)."""
    return () if text == "[]" else tuple(json.loads(text))


def _row_to_chunk(row: Sequence[Any]) -> Chunk:
    return Chunk(
        chunk_id=row[1],
        doc_id=row[2],
        chunk_index=row[3],
        text=row[4],
        title=row[5],
        section_path=_json_tuple(row[6]),
        page=row[7],
        source=row[8],
        start=row[9],
        end=row[10],
        content_hash=row[11],
        doc_type=row[12],
        permission_tags=_json_tuple(row[13]),
        tenant_id=row[14],
        updated_at=row[15],
    )


class SqliteKnowledgeStore:
    """Documents, chunks and vectors in one SQLite file; the outbox keeps indexes in step.

    Thread-safe: one lock serialises access to the connection.

    Args:
        path: The database file, e.g. ``<workspace>/knowledge.db``.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Searches read a dozen random chunk rows each; SQLite's default 2 MB page cache does
        # not hold the table's inner pages at 1M chunks (chunk reads -20% with 64 MiB there).
        self._conn = connect(self.path, cache_kib=_PAGE_CACHE_KIB)
        self._lock = threading.RLock()
        self._indexes: list[DerivedIndex[SqliteKnowledgeStore]] = []
        self._deferred = 0
        self._applied_outbox_id = 0
        apply_migrations(self._conn, MIGRATIONS)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Apply pending changes durably, close the indexes and the connection."""
        with self._lock:
            if self._indexes:
                self.sync(durable=True)
            for index in self._indexes:
                index.close()
            self._indexes.clear()
            self._conn.close()

    @property
    def generation(self) -> int:
        """Incremented by every document change; index state and ACL caches key on it."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0])

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
                    self.sync(durable=True)

    def _after_change(self) -> None:
        if self._deferred == 0 and self._indexes:
            self.sync()

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
        vectors: Mapping[str, tuple[Sequence[int], Vectors]] | None,
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
        arr = np.ascontiguousarray(matrix, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(rowids):
            raise KnowledgeError(f"vectors for space {space!r} do not match their rowids")
        with self._lock:
            with transaction(self._conn):
                generation = self._bump_generation()
                if model is not None:
                    self._check_space(space, *model)
                by_doc: dict[str, list[int]] = {}
                for rowid, row in zip(rowids, arr, strict=True):
                    found = self._conn.execute(
                        "UPDATE chunks SET space=? WHERE rowid=? AND space IS NULL"
                        " RETURNING doc_id",
                        (space, int(rowid)),
                    ).fetchone()
                    if found is None:
                        continue
                    self._conn.execute(
                        "INSERT OR REPLACE INTO embeddings (chunk_rowid, space, vector)"
                        " VALUES (?, ?, ?)",
                        (int(rowid), space, row.tobytes()),
                    )
                    by_doc.setdefault(str(found[0]), []).append(int(rowid))
                for doc_id, done in by_doc.items():
                    write_change(self._conn, generation, doc_id, kind="vectors", rowids=done)
                    self._conn.execute(
                        "UPDATE documents SET embed_state=?, embed_error=NULL WHERE doc_id=?"
                        " AND NOT EXISTS (SELECT 1 FROM chunks WHERE doc_id=? AND space IS NULL)",
                        (EMBED_DONE, doc_id, doc_id),
                    )
            self._after_change()
        return sum(len(v) for v in by_doc.values())

    def pending_chunks(self, *, after: int = 0, limit: int = 256) -> list[StoredChunk]:
        """Chunks without vectors (waiting for phase 2), in rowid order, after rowid ``after``."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE space IS NULL AND rowid > ?"
                " ORDER BY rowid LIMIT ?",
                (after, limit),
            ).fetchall()
        return [StoredChunk(rowid=r[0], chunk=_row_to_chunk(r)) for r in rows]

    def count_pending(self) -> int:
        """How many chunks have no vectors yet (keyword-searchable, not vector-searchable)."""
        with self._lock:
            row = self._conn.execute("SELECT COUNT(*) FROM chunks WHERE space IS NULL").fetchone()
        return int(row[0])

    def pending_sources(self) -> set[str]:
        """Sources with at least one chunk without vectors."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT source FROM chunks WHERE space IS NULL"
            ).fetchall()
        return {str(r[0]) for r in rows}

    def vectors_by_rowids(
        self, rowids: Sequence[int]
    ) -> dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]]:
        """Stored vectors of ``rowids``, per space."""
        sql = "SELECT chunk_rowid, vector, space FROM embeddings WHERE chunk_rowid IN ({marks})"
        per_space: dict[str, list[Any]] = {}
        for rows in self._select_in(sql, rowids):
            for r in rows:
                per_space.setdefault(str(r[2]), []).append(r)
        return {space: _to_arrays(rows) for space, rows in per_space.items()}

    def upsert_document(
        self,
        doc: Document,
        chunks: Sequence[Chunk],
        vectors: Mapping[str, tuple[Sequence[int], Vectors]] | None = None,
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
    ) -> list[int]:
        """Replace a document and its chunks (and vectors) in one transaction.

        Args:
            doc: The document; an existing one with the same ``doc_id`` is replaced.
            chunks: Its chunks, in order.
            vectors: Per vector space, ``(positions, matrix)``: row ``j`` of ``matrix`` is the
                vector of ``chunks[positions[j]]``.
            embed_state: ``"embedded"``, ``"embedding_failed"`` or ``"none"``; inferred from
                ``vectors`` when omitted.
            embed_error: Why embedding failed, for reports.

        Returns:
            The rowids given to the chunks, in order.
        """
        return self.replace_source(
            doc.source,
            None,
            [(doc, chunks, vectors)],
            embed_state=embed_state,
            embed_error=embed_error,
            remove_others=False,
        )[0]

    def replace_source(
        self,
        source: str,
        source_hash: str | None,
        items: Sequence[
            tuple[Document, Sequence[Chunk], Mapping[str, tuple[Sequence[int], Vectors]] | None]
        ],
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
        remove_others: bool = True,
        space_models: Mapping[str, tuple[str, int]] | None = None,
    ) -> list[list[int]]:
        """Replace everything stored for a source (a file: one document, or CSV records) at once.

        Documents of ``source`` not in ``items`` are removed when ``remove_others``. The file
        hash is recorded for incremental ingest when ``source_hash`` is given.
        """
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

    # -- reads ---------------------------------------------------------------------------------

    def get_document_hash(self, doc_id: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT content_hash FROM documents WHERE doc_id=?", (doc_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def get_source_hash(self, source: str) -> str | None:
        """The file hash recorded at the last ingest of ``source``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT content_hash FROM sources WHERE source=?", (source,)
            ).fetchone()
        return None if row is None else str(row[0])

    def embed_state(self, source: str) -> set[str]:
        """Embedding states of the documents of ``source``."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT embed_state FROM documents WHERE source=?", (source,)
            ).fetchall()
        return {str(r[0]) for r in rows}

    def sources(self) -> list[SourceInfo]:
        """Every source with its document and chunk counts, newest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT d.source, MIN(d.doc_type), COUNT(*), SUM(d.chunk_count),"
                " MAX(d.updated_at), COALESCE(s.content_hash, MIN(d.content_hash)),"
                " s.updated_at FROM documents d LEFT JOIN sources s ON s.source = d.source"
                " GROUP BY d.source ORDER BY COALESCE(s.updated_at, MAX(d.updated_at)) DESC"
            ).fetchall()
        return [
            SourceInfo(
                source=r[0],
                doc_type=r[1],
                documents=r[2],
                chunks=r[3] or 0,
                updated_at=r[6] if r[6] is not None else r[4],
                content_hash=r[5],
            )
            for r in rows
        ]

    def source_access(self, sources: Sequence[str]) -> dict[str, tuple[set[str], set[str]]]:
        """For each stored source among ``sources``: its tenants and permission tags (each the
        union over the source's documents). Sources not stored are left out."""
        sql = "SELECT source, tenant_id, permission_tags FROM documents WHERE source IN ({marks})"
        out: dict[str, tuple[set[str], set[str]]] = {}
        for rows in self._select_in(sql, list(dict.fromkeys(sources))):
            for source, tenant_id, tags in rows:
                tenants, tag_set = out.setdefault(source, (set(), set()))
                tenants.add(tenant_id)
                tag_set.update(json.loads(tags))
        return out

    def count_documents(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def count_chunks(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    def count_vectors(self, space: str | None = None) -> int:
        with self._lock:
            if space is None:
                row = self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM embeddings WHERE space=?", (space,)
                ).fetchone()
        return int(row[0])

    def vector_spaces(self) -> list[str]:
        """Spaces that hold at least one vector."""
        with self._lock:
            rows = self._conn.execute("SELECT DISTINCT space FROM embeddings").fetchall()
        return sorted(str(r[0]) for r in rows)

    def chunks_by_rowids(self, rowids: Sequence[int]) -> list[Chunk]:
        """Chunks for ``rowids``, in the same order; missing rowids are skipped."""
        found = self.chunk_map(rowids)
        return [found[r] for r in rowids if r in found]

    def _select_in(
        self, sql: str, values: Sequence[Any], params: tuple[Any, ...] = ()
    ) -> Iterator[list[Any]]:
        """Rows of ``sql`` (``{marks}`` stands for an IN list) over ``values``, in batches that
        stay under SQLite's bound-variable limit; ``params`` come before the list."""
        for start in range(0, len(values), _IN_BATCH):
            part = tuple(values[start : start + _IN_BATCH])
            marks = ",".join("?" * len(part))
            with self._lock:
                rows = self._conn.execute(sql.format(marks=marks), (*params, *part)).fetchall()
            yield rows

    def chunk_map(self, rowids: Sequence[int]) -> dict[int, Chunk]:
        sql = f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE rowid IN ({{marks}})"
        return {r[0]: _row_to_chunk(r) for rows in self._select_in(sql, rowids) for r in rows}

    def chunks_in_section(self, scope: Scope, leaf: str) -> dict[int, Chunk]:
        """Chunks whose innermost section heading is ``leaf`` (rowid → chunk): at most 200 of
        the scope's tenant, those the scope may read."""
        tail = json.dumps(leaf, ensure_ascii=False) + "]"
        pattern = "%" + tail.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE tenant_id = ? AND section_path LIKE ?"
                " ESCAPE '\\' LIMIT 200",
                (scope.tenant_id, pattern),
            ).fetchall()
        found = {r[0]: _row_to_chunk(r) for r in rows}
        return {rowid: chunk for rowid, chunk in found.items() if scope.allows(chunk)}

    def content_hashes(self, rowids: Sequence[int]) -> dict[int, str]:
        sql = "SELECT rowid, content_hash FROM chunks WHERE rowid IN ({marks})"
        return {r[0]: r[1] for rows in self._select_in(sql, rowids) for r in rows}

    def iter_chunks(self, doc_ids: Sequence[str] | None = None) -> Iterator[StoredChunk]:
        """Stored chunks with their rowids (all, or of ``doc_ids``), in rowid order."""
        if doc_ids is not None:
            sql = f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE doc_id IN ({{marks}}) ORDER BY rowid"
            for rows in self._select_in(sql, doc_ids):
                yield from (StoredChunk(rowid=r[0], chunk=_row_to_chunk(r)) for r in rows)
            return
        last = 0
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE rowid > ? ORDER BY rowid"
                    " LIMIT 2000",
                    (last,),
                ).fetchall()
            if not rows:
                return
            yield from (StoredChunk(rowid=r[0], chunk=_row_to_chunk(r)) for r in rows)
            last = rows[-1][0]

    def iter_chunk_acl(
        self, batch: int = 20_000
    ) -> Iterator[list[tuple[int, str, tuple[str, ...], str, str]]]:
        """``(rowid, tenant_id, permission_tags, doc_type, source)`` of every chunk, in rowid
        order, in batches (what an index needs to label its entries for the access rule)."""
        last = 0
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT rowid, tenant_id, permission_tags, doc_type, source FROM chunks"
                    " WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            yield [(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4]) for r in rows]
            last = rows[-1][0]

    def iter_vectors(
        self, space: str, doc_ids: Sequence[str] | None = None, batch: int = 5000
    ) -> Iterator[tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]]:
        """``(rowids, matrix)`` batches of the vectors stored in ``space``."""
        if doc_ids is not None:
            sql = (
                "SELECT e.chunk_rowid, e.vector FROM embeddings e JOIN chunks c"
                " ON c.rowid = e.chunk_rowid WHERE e.space=? AND c.doc_id IN ({marks})"
            )
            for rows in self._select_in(sql, doc_ids, (space,)):
                if rows:
                    yield _to_arrays(rows)
            return
        last = 0
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT chunk_rowid, vector FROM embeddings WHERE space=? AND chunk_rowid > ?"
                    " ORDER BY chunk_rowid LIMIT ?",
                    (space, last, batch),
                ).fetchall()
            if not rows:
                return
            yield _to_arrays(rows)
            last = rows[-1][0]

    def vectors_by_content_hash(self, space: str, hashes: Sequence[str]) -> dict[str, Vectors]:
        """Stored vectors of chunks with these content hashes (reused when a file is edited)."""
        sql = (
            "SELECT c.content_hash, e.vector FROM chunks c JOIN embeddings e"
            " ON e.chunk_rowid = c.rowid WHERE e.space=? AND c.content_hash IN ({marks})"
        )
        return {
            h: np.frombuffer(blob, dtype=np.float32)
            for rows in self._select_in(sql, hashes, (space,))
            for h, blob in rows
        }

    def allowed_rowids(self, scope: Scope) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Rowids of the chunks ``scope`` may read (sorted); see :class:`Scope` for the rule."""
        sql = "SELECT rowid FROM chunks WHERE tenant_id = ?"
        params: list[Any] = [scope.tenant_id]
        if not scope.privileged:
            role_list = sorted(scope.roles)
            sql += " AND (permission_tags = '[]'"
            if role_list:
                marks = ",".join("?" * len(role_list))
                sql += (
                    " OR EXISTS (SELECT 1 FROM json_each(chunks.permission_tags)"
                    f" WHERE json_each.value IN ({marks}))"
                )
                params.extend(role_list)
            sql += ")"
        for column, values in (("doc_type", scope.doc_types), ("source", scope.sources)):
            if values is not None:
                sql += f" AND {column} IN ({','.join('?' * len(values))})"
                params.extend(values)
        sql += " ORDER BY rowid"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def root_path(self, name: str) -> str | None:
        """The absolute folder last ingested under the source prefix ``name/``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT value FROM meta WHERE key=?", (f"root:{name}",)
            ).fetchone()
        return None if row is None else str(row[0])

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

    def all_sources(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT source FROM sources UNION SELECT source FROM documents"
            ).fetchall()
        return [str(r[0]) for r in rows]


def _to_arrays(rows: Sequence[Any]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]:
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    return ids, matrix
