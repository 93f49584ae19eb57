"""Reads of the embedded system of record (:class:`SqliteStoreReads`, the base of
:class:`~shelfhand.knowledge.stores.sqlite.SqliteKnowledgeStore`): chunks, sources, counts,
vectors and what a caller may read.

It owns the connection (opened with the schema of
:mod:`~shelfhand.knowledge.stores.sqlite_schema` migrated) and the lock that serialises its
use; the writes and the derived indexes are the store's.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.core.db import apply_migrations, connect
from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.records import chunk_from_row
from shelfhand.knowledge.stores.sqlite_schema import MIGRATIONS
from shelfhand.knowledge.types import Chunk, Scope, SourceInfo, StoredChunk

__all__ = ["CHUNK_COLUMNS", "SqliteStoreReads", "row_to_chunk", "to_arrays"]

CHUNK_COLUMNS = (
    "rowid, chunk_id, doc_id, chunk_index, text, title, section_path, page, source, start, end_,"
    " content_hash, doc_type, permission_tags, tenant_id, updated_at"
)
"""The chunk columns every read selects, in :func:`row_to_chunk`'s order."""
_IN_BATCH = 500
"""Values per ``IN (...)`` list: well under SQLite's bound-variable limit."""
_PAGE_CACHE_KIB = 65_536  # at most; SQLite fills it as pages are read


def _json_tuple(text: str) -> tuple[Any, ...]:
    """A stored JSON list as a tuple; most are empty, which skips the decoder (searches read
    a dozen rows each)."""
    return () if text == "[]" else tuple(json.loads(text))


def row_to_chunk(row: Sequence[Any]) -> Chunk:
    """The chunk of a row of :data:`CHUNK_COLUMNS`."""
    return chunk_from_row(row, _json_tuple)


class SqliteStoreReads:
    """The read methods of the embedded store. Thread-safe: one lock serialises access to the
    connection.

    Args:
        path: The database file, e.g. ``<workspace>/knowledge.db``; created and migrated when
            needed.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Searches read a dozen random chunk rows each; SQLite's default 2 MB page cache does
        # not hold the table's inner pages at 1M chunks (chunk reads -20% with 64 MiB there).
        self._conn = connect(self.path, cache_kib=_PAGE_CACHE_KIB)
        self._lock = threading.RLock()
        apply_migrations(self._conn, MIGRATIONS)

    @property
    def generation(self) -> int:
        """Incremented by every document change; index state and ACL caches key on it."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0])

    @property
    def store_id(self) -> str:
        """A random id of this database, made on first use: an index built from another
        store (a copied or swapped file) is told apart and rebuilt."""
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)",
                (secrets.token_hex(16),),
            )
            row = self._conn.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        return str(row[0])

    def get_document_state(self, doc_id: str) -> tuple[str, str] | None:
        """A stored document's content hash and tenant (``None``: no such document)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT content_hash, tenant_id FROM documents WHERE doc_id=?", (doc_id,)
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

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
        sql = f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE rowid IN ({{marks}})"
        return {r[0]: row_to_chunk(r) for rows in self._select_in(sql, rowids) for r in rows}

    def chunks_in_section(self, scope: Scope, leaf: str) -> dict[int, Chunk]:
        """Chunks whose innermost section heading is ``leaf`` (rowid → chunk): at most 200 of
        the scope's tenant, those the scope may read."""
        tail = json.dumps(leaf, ensure_ascii=False) + "]"
        pattern = "%" + tail.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE tenant_id = ? AND section_path LIKE ?"
                " ESCAPE '\\' LIMIT 200",
                (scope.tenant_id, pattern),
            ).fetchall()
        found = {r[0]: row_to_chunk(r) for r in rows}
        return {rowid: chunk for rowid, chunk in found.items() if scope.allows(chunk)}

    def content_hashes(self, rowids: Sequence[int]) -> dict[int, str]:
        sql = "SELECT rowid, content_hash FROM chunks WHERE rowid IN ({marks})"
        return {r[0]: r[1] for rows in self._select_in(sql, rowids) for r in rows}

    def iter_chunks(self, doc_ids: Sequence[str] | None = None) -> Iterator[StoredChunk]:
        """Stored chunks with their rowids (all, or of ``doc_ids``), in rowid order."""
        if doc_ids is not None:
            sql = f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE doc_id IN ({{marks}}) ORDER BY rowid"
            for rows in self._select_in(sql, doc_ids):
                yield from (StoredChunk(rowid=r[0], chunk=row_to_chunk(r)) for r in rows)
            return
        last = 0
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE rowid > ? ORDER BY rowid LIMIT 2000",
                    (last,),
                ).fetchall()
            if not rows:
                return
            yield from (StoredChunk(rowid=r[0], chunk=row_to_chunk(r)) for r in rows)
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
                    yield to_arrays(rows)
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
            yield to_arrays(rows)
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

    def all_sources(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT source FROM sources UNION SELECT source FROM documents"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def pending_chunks(self, *, after: int = 0, limit: int = 256) -> list[StoredChunk]:
        """Chunks without vectors (waiting for phase 2), in rowid order, after rowid ``after``."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE space IS NULL AND rowid > ?"
                " ORDER BY rowid LIMIT ?",
                (after, limit),
            ).fetchall()
        return [StoredChunk(rowid=r[0], chunk=row_to_chunk(r)) for r in rows]

    def chunks_lacking(
        self, space: str, bridge: str, *, after: int = 0, limit: int = 256
    ) -> list[StoredChunk]:
        """Chunks of ``space`` without a vector in its bridge space ``bridge``, in rowid
        order, after rowid ``after``."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE space = ? AND rowid > ? AND NOT EXISTS"
                " (SELECT 1 FROM embeddings e WHERE e.chunk_rowid = chunks.rowid AND e.space = ?)"
                " ORDER BY rowid LIMIT ?",
                (space, after, bridge, limit),
            ).fetchall()
        return [StoredChunk(rowid=r[0], chunk=row_to_chunk(r)) for r in rows]

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
        self, rowids: Sequence[int], *, own: bool | None = None
    ) -> dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]]:
        """Stored vectors of ``rowids``, per space: in every space, or with ``own`` only in
        the chunk's own space (``True``) or only in the others, bridge spaces (``False``)."""
        sql = "SELECT chunk_rowid, vector, space FROM embeddings WHERE chunk_rowid IN ({marks})"
        if own is not None:
            sql = (
                "SELECT e.chunk_rowid, e.vector, e.space FROM embeddings e JOIN chunks c"
                f" ON c.rowid = e.chunk_rowid WHERE e.space {'=' if own else '!='} c.space"
                " AND e.chunk_rowid IN ({marks})"
            )
        per_space: dict[str, list[Any]] = {}
        for rows in self._select_in(sql, rowids):
            for r in rows:
                per_space.setdefault(str(r[2]), []).append(r)
        return {space: to_arrays(rows) for space, rows in per_space.items()}


def to_arrays(rows: Sequence[Any]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]:
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    return ids, matrix
