"""Reads of the PostgreSQL knowledge store (:class:`PgStoreReads`, a base of
:class:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore`): chunks, sources, counts, vectors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.pg.db import PgDatabase, acl_sql
from shelfhand.knowledge.stores.records import chunk_from_row
from shelfhand.knowledge.types import Chunk, Scope, SourceInfo, StoredChunk

if TYPE_CHECKING:
    import psycopg

__all__ = ["CHUNK_COLUMNS", "PgStoreReads", "SpaceTable", "row_to_chunk"]

CHUNK_COLUMNS = (
    "rowid, chunk_id, doc_id, chunk_index, text, title, section_path, page, source, start_, end_,"
    " content_hash, doc_type, permission_tags, tenant_id, updated_at"
)
"""The chunk columns every read selects, in :func:`row_to_chunk`'s order."""


def _array(value: Any) -> Vectors:
    """A stored vector as float32 (pgvector loads a ``Vector`` or an array)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


def row_to_chunk(row: Sequence[Any]) -> Chunk:
    """The chunk of a row of :data:`CHUNK_COLUMNS`."""
    return chunk_from_row(row, tuple)


@dataclass(frozen=True, slots=True)
class SpaceTable:
    space: str
    table: str
    dim: int


class PgStoreReads:
    """The read methods of the store, with the embedded store's semantics."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self._spaces: dict[str, SpaceTable] = {}

    def space_table(
        self, space: str, conn: psycopg.Connection[Any] | None = None
    ) -> SpaceTable | None:
        """The table holding ``space``'s vectors, or ``None`` while it has none."""
        known = self._spaces.get(space)
        if known is not None:
            return known
        if conn is None:
            with self.db.connection(read=True) as own:
                return self.space_table(space, own)
        row = conn.execute(
            "SELECT id, dim FROM knowledge_pg_spaces WHERE space = %s", (space,)
        ).fetchone()
        if row is None:
            return None
        found = SpaceTable(space=space, table=f"knowledge_pg_vec_{int(row[0])}", dim=int(row[1]))
        self._spaces[space] = found
        return found

    def space_tables(self) -> list[SpaceTable]:
        with self.db.connection(read=True) as conn:
            names = [
                r[0] for r in conn.execute("SELECT space FROM knowledge_pg_spaces ORDER BY id")
            ]
            return [t for name in names if (t := self.space_table(name, conn)) is not None]

    # -- reads --------------------------------------------------------------------------------

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.db.connection(read=True) as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self.db.connection(read=True) as conn:
            return conn.execute(sql, params).fetchall()

    def get_document_state(self, doc_id: str) -> tuple[str, str] | None:
        found = self._all(
            "SELECT content_hash, tenant_id FROM knowledge_pg_documents WHERE doc_id = %s",
            (doc_id,),
        )
        return (str(found[0][0]), str(found[0][1])) if found else None

    def get_source_hash(self, source: str) -> str | None:
        found = self._one(
            "SELECT content_hash FROM knowledge_pg_sources WHERE source = %s", (source,)
        )
        return None if found is None else str(found)

    def embed_state(self, source: str) -> set[str]:
        rows = self._all(
            "SELECT DISTINCT embed_state FROM knowledge_pg_documents WHERE source = %s", (source,)
        )
        return {str(r[0]) for r in rows}

    def sources(self) -> list[SourceInfo]:
        rows = self._all(
            "SELECT d.source, MIN(d.doc_type), COUNT(*), SUM(d.chunk_count), MAX(d.updated_at),"
            " COALESCE(s.content_hash, MIN(d.content_hash)), s.updated_at"
            " FROM knowledge_pg_documents d LEFT JOIN knowledge_pg_sources s ON s.source = d.source"
            " GROUP BY d.source, s.content_hash, s.updated_at"
            " ORDER BY COALESCE(s.updated_at, MAX(d.updated_at)) DESC"
        )
        return [
            SourceInfo(
                source=r[0],
                doc_type=r[1],
                documents=int(r[2]),
                chunks=int(r[3] or 0),
                updated_at=r[6] if r[6] is not None else r[4],
                content_hash=r[5],
            )
            for r in rows
        ]

    def all_sources(self) -> list[str]:
        rows = self._all(
            "SELECT source FROM knowledge_pg_sources UNION SELECT source FROM knowledge_pg_documents"
        )
        return [str(r[0]) for r in rows]

    def source_access(self, sources: Sequence[str]) -> dict[str, tuple[set[str], set[str]]]:
        out: dict[str, tuple[set[str], set[str]]] = {}
        rows = self._all(
            "SELECT source, tenant_id, permission_tags FROM knowledge_pg_documents"
            " WHERE source = ANY(%s::text[])",
            (list(dict.fromkeys(sources)),),
        )
        for source, tenant_id, tags in rows:
            tenants, tag_set = out.setdefault(source, (set(), set()))
            tenants.add(tenant_id)
            tag_set.update(tags)
        return out

    def root_path(self, name: str) -> str | None:
        found = self._one("SELECT path FROM knowledge_pg_roots WHERE name = %s", (name,))
        return None if found is None else str(found)

    def count_documents(self) -> int:
        return int(self._one("SELECT count(*) FROM knowledge_pg_documents"))

    def count_chunks(self) -> int:
        return int(self._one("SELECT count(*) FROM knowledge_pg_chunks"))

    def count_vectors(self, space: str | None = None) -> int:
        tables = self.space_tables()
        total = 0
        with self.db.connection(read=True) as conn:
            for t in tables:
                if space is None or t.space == space:
                    row = conn.execute(f"SELECT count(*) FROM {t.table}").fetchone()
                    total += int(row[0]) if row else 0
        return total

    def count_pending(self) -> int:
        return int(self._one("SELECT count(*) FROM knowledge_pg_chunks WHERE space IS NULL"))

    def pending_sources(self) -> set[str]:
        rows = self._all("SELECT DISTINCT source FROM knowledge_pg_chunks WHERE space IS NULL")
        return {str(r[0]) for r in rows}

    def pending_chunks(self, *, after: int = 0, limit: int = 256) -> list[StoredChunk]:
        rows = self._all(
            f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE space IS NULL AND rowid > %s"
            " ORDER BY rowid LIMIT %s",
            (after, limit),
        )
        return [StoredChunk(rowid=int(r[0]), chunk=row_to_chunk(r)) for r in rows]

    def chunks_lacking(
        self, space: str, bridge: str, *, after: int = 0, limit: int = 256
    ) -> list[StoredChunk]:
        """Chunks of ``space`` without a vector in its bridge space ``bridge``, in rowid
        order, after rowid ``after``."""
        table = self.space_table(bridge)
        lacking = (
            ""
            if table is None
            else f" AND NOT EXISTS (SELECT 1 FROM {table.table} v WHERE v.rowid = c.rowid)"
        )
        rows = self._all(
            f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks c WHERE c.space = %s"
            f" AND c.rowid > %s{lacking} ORDER BY c.rowid LIMIT %s",
            (space, after, limit),
        )
        return [StoredChunk(rowid=int(r[0]), chunk=row_to_chunk(r)) for r in rows]

    def vector_spaces(self) -> list[str]:
        """Spaces that hold at least one vector."""
        tables = self.space_tables()
        with self.db.connection(read=True) as conn:
            return sorted(
                t.space
                for t in tables
                if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {t.table})").fetchone() == (True,)
            )

    def chunks_by_rowids(self, rowids: Sequence[int]) -> list[Chunk]:
        found = self.chunk_map(rowids)
        return [found[r] for r in rowids if r in found]

    def chunk_map(self, rowids: Sequence[int]) -> dict[int, Chunk]:
        if not rowids:
            return {}
        rows = self._all(
            f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE rowid = ANY(%s::bigint[])",
            ([int(r) for r in rowids],),
        )
        return {int(r[0]): row_to_chunk(r) for r in rows}

    def chunks_in_section(self, scope: Scope, leaf: str) -> dict[int, Chunk]:
        """Chunks whose innermost section heading is ``leaf`` (rowid → chunk): at most 200 of
        the scope's tenant, those the scope may read."""
        rows = self._all(
            f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE tenant_id = %s"
            " AND section_path[cardinality(section_path)] = %s LIMIT 200",
            (scope.tenant_id, leaf),
        )
        found = {int(r[0]): row_to_chunk(r) for r in rows}
        return {rowid: chunk for rowid, chunk in found.items() if scope.allows(chunk)}

    def content_hashes(self, rowids: Sequence[int]) -> dict[int, str]:
        if not rowids:
            return {}
        rows = self._all(
            "SELECT rowid, content_hash FROM knowledge_pg_chunks WHERE rowid = ANY(%s::bigint[])",
            ([int(r) for r in rowids],),
        )
        return {int(r[0]): str(r[1]) for r in rows}

    def iter_chunks(self, doc_ids: Sequence[str] | None = None) -> Iterator[StoredChunk]:
        """Stored chunks with their rowids (all, or of ``doc_ids``), in rowid order."""
        last = 0
        while True:
            if doc_ids is None:
                rows = self._all(
                    f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE rowid > %s"
                    " ORDER BY rowid LIMIT 2000",
                    (last,),
                )
            else:
                rows = self._all(
                    f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE rowid > %s"
                    " AND doc_id = ANY(%s::text[]) ORDER BY rowid LIMIT 2000",
                    (last, list(doc_ids)),
                )
            if not rows:
                return
            yield from (StoredChunk(rowid=int(r[0]), chunk=row_to_chunk(r)) for r in rows)
            last = int(rows[-1][0])

    def iter_vectors(
        self, space: str, doc_ids: Sequence[str] | None = None, batch: int = 5000
    ) -> Iterator[tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]]:
        """``(rowids, matrix)`` batches of the vectors stored in ``space``."""
        table = self.space_table(space)
        if table is None:
            return
        last = 0
        while True:
            sql = f"SELECT v.rowid, v.embedding FROM {table.table} v"
            params: list[Any] = [last]
            if doc_ids is not None:
                sql += " JOIN knowledge_pg_chunks c ON c.rowid = v.rowid WHERE v.rowid > %s"
                sql += " AND c.doc_id = ANY(%s::text[])"
                params.append(list(doc_ids))
            else:
                sql += " WHERE v.rowid > %s"
            rows = self._all(sql + " ORDER BY v.rowid LIMIT %s", (*params, batch))
            if not rows:
                return
            ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
            yield ids, np.stack([np.asarray(r[1], dtype=np.float32) for r in rows])
            last = int(rows[-1][0])

    def vectors_by_rowids(
        self, rowids: Sequence[int], *, own: bool | None = None
    ) -> dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]]:
        """Stored vectors of ``rowids``, per space: in every space, or with ``own`` only in
        the chunk's own space (``True``) or only in the others, bridge spaces (``False``)."""
        out: dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], Vectors]] = {}
        if not rowids:
            return out
        for space in self.vector_spaces():
            table = self.space_table(space)
            if table is None:
                continue
            which = "" if own is None else f" AND c.space {'=' if own else '<>'} %s"
            rows = self._all(
                f"SELECT v.rowid, v.embedding FROM {table.table} v JOIN knowledge_pg_chunks c"
                f" ON c.rowid = v.rowid WHERE v.rowid = ANY(%s::bigint[]){which} ORDER BY v.rowid",
                ([int(r) for r in rowids], *([] if own is None else [space])),
            )
            if rows:
                ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
                out[space] = (ids, np.stack([_array(r[1]) for r in rows]))
        return out

    def vectors_by_content_hash(self, space: str, hashes: Sequence[str]) -> dict[str, Vectors]:
        table = self.space_table(space)
        if table is None or not hashes:
            return {}
        rows = self._all(
            f"SELECT c.content_hash, v.embedding FROM knowledge_pg_chunks c JOIN {table.table} v"
            " ON v.rowid = c.rowid WHERE c.content_hash = ANY(%s::text[])",
            (list(hashes),),
        )
        return {str(h): _array(vec) for h, vec in rows}

    def allowed_rowids(self, scope: Scope) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Rowids of the chunks ``scope`` may read (sorted)."""
        where, params = acl_sql("c", scope)
        rows = self._all(
            f"SELECT c.rowid FROM knowledge_pg_chunks c WHERE {where} ORDER BY c.rowid", params
        )
        return np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
