"""The PostgreSQL system of record: documents, chunks, vectors, sources and roots.

Same semantics as :class:`~shelfhand.knowledge.stores.sqlite.SqliteKnowledgeStore`, but the search
indexes live in the same database (a GIN-indexed ``tsvector`` per chunk, pgvector HNSW per
vector space) and are written in the same transaction as the rows: there is no outbox, and
:meth:`PgKnowledgeStore.sync` / :meth:`~PgKnowledgeStore.deferred_sync` do nothing.

Each write (one ingest batch, one document, one delete) is one transaction. It also keeps the
BM25 statistics (chunks and tokens per field, document frequency per term) in step; those
rows are updated last, in term order, so concurrent writers (several ingest workers) wait on
each other only briefly and never deadlock.

When a Qdrant index serves the searches (``qdrant_url``), a store opened with
``keyword_sql=False`` writes no keyword fields: each chunk's tsvectors stay empty, its lengths
``-1`` (not analysed), no term statistics are kept, and the ``u`` row of the field statistics
counts such chunks. The SQL keyword search refuses to run while any exist (it would miss
them); ``shelfhand knowledge reindex`` analyses them (:mod:`.backfill`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.analysis import identifier_tokens
from shelfhand.knowledge.embeddings.router import Vectors, detect_language
from shelfhand.knowledge.protocols import DocVectors, SourceItem
from shelfhand.knowledge.stores.keyword_plan import index_head, index_text
from shelfhand.knowledge.stores.pg.db import PgDatabase
from shelfhand.knowledge.stores.pg.outbox import PgOutbox, record_changes
from shelfhand.knowledge.stores.pg.reads import (
    CHUNK_COLUMNS,
    PgStoreReads,
    SpaceTable,
    row_to_chunk,
)
from shelfhand.knowledge.stores.records import ReplacesSources
from shelfhand.knowledge.types import Chunk, Document

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "FIELDS",
    "GIN_INDEXES",
    "ImportedDocument",
    "PgKnowledgeStore",
    "chunk_row",
    "hnsw_index_sql",
    "tsquery_literal",
]

EMBED_NONE = "none"
EMBED_DONE = "embedded"
EMBED_PENDING = "pending"

FIELDS = ("b", "h", "c")
"""BM25 fields: body (title, section path, text), head (own heading), codes (identifiers)."""
UNANALYSED = "u"
"""The field-statistics row counting chunks stored without keyword fields."""
_MAX_TERM_BYTES = 1000
"""Longer tokens are not indexed (a tsvector lexeme holds at most 2047 bytes)."""
_MAX_TF = 255
"""Term frequency is stored as positions 1..tf; a tsvector keeps at most 256 per lexeme."""
HNSW_MAX_DIM = 2000
"""pgvector's HNSW indexes ``vector`` columns up to 2000 dimensions; wider spaces are exact."""


GIN_INDEXES = {
    f"knowledge_pg_chunks_{column}": f"ON knowledge_pg_chunks USING gin ({column})"
    for column in ("body", "head", "codes")
}
"""The keyword indexes (name → definition after ``CREATE INDEX <name>``), as migrated."""


def hnsw_index_sql(table: str, *, if_not_exists: bool = False) -> str:
    """The HNSW index of a vector table (``<table>_hnsw``)."""
    return (
        f"CREATE INDEX {'IF NOT EXISTS ' if if_not_exists else ''}{table}_hnsw ON {table}"
        " USING hnsw (embedding vector_ip_ops) WITH (m = 16, ef_construction = 64)"
    )


def _quote(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _indexable(term: str) -> bool:
    return bool(term) and len(term.encode("utf-8")) <= _MAX_TERM_BYTES


_POSITIONS = [",".join(str(p) for p in range(1, n + 1)) for n in range(_MAX_TF + 1)]


def tsvector_literal(counts: Mapping[str, int]) -> str:
    """A ``tsvector`` literal holding each term with positions ``1..tf`` (tf capped)."""
    return " ".join(f"{_quote(t)}:{_POSITIONS[min(n, _MAX_TF)]}" for t, n in counts.items())


def tsquery_literal(terms: Sequence[str]) -> str:
    """A ``tsquery`` matching any of ``terms`` (quoted: no operator in a term is parsed)."""
    return " | ".join(_quote(t) for t in terms if _indexable(t))


@dataclass(slots=True)
class _Delta:
    """BM25 statistics changes of one transaction, applied at its end."""

    terms: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Per (tenant, field, term), the change of its document frequency."""
    docs: Counter[str] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    tenant_docs: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Per (tenant, field), the change of its chunks (``docs`` is every tenant's)."""
    tenant_tokens: Counter[tuple[str, str]] = field(default_factory=Counter)
    changed: set[str] = field(default_factory=set)
    """Documents changed (for the outbox, :mod:`~shelfhand.knowledge.stores.pg.outbox`)."""


@dataclass(frozen=True, slots=True)
class _Analysed:
    body: Counter[str]
    head: Counter[str]
    codes: Counter[str]

    def fields(self) -> tuple[tuple[str, Counter[str]], ...]:
        return (("b", self.body), ("h", self.head), ("c", self.codes))


def _analyse(chunk: Chunk) -> _Analysed:
    return _Analysed(
        body=Counter(t for t in index_text(chunk).split() if _indexable(t)),
        head=Counter(t for t in index_head(chunk).split() if _indexable(t)),
        codes=Counter(t for t in identifier_tokens(chunk.text) if _indexable(t)),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedDocument:
    """A document to import with its chunks, vectors (space → positions, matrix) and state."""

    doc: Document
    chunks: Sequence[Chunk]
    vectors: DocVectors
    embed_state: str
    embed_error: str | None = None
    bridges: DocVectors = field(default_factory=dict)
    """Its chunks' vectors in bridge spaces, beside their own (``vectors``)."""


def keyword_fields(c: Chunk, delta: _Delta) -> tuple[Any, ...]:
    """A chunk's analysed fields as tsvector literals and their lengths (the last six columns
    of its row); their statistics added to ``delta``."""
    analysed = _analyse(c)
    lengths = []
    tenant = c.tenant_id
    for name, counts in analysed.fields():
        delta.docs[name] += 1
        delta.tenant_docs[tenant, name] += 1
        size = sum(counts.values())
        delta.tokens[name] += size
        delta.tenant_tokens[tenant, name] += size
        lengths.append(size)
        for term in counts:
            delta.terms[tenant, name, term] += 1
    return (
        tsvector_literal(analysed.body),
        tsvector_literal(analysed.head),
        tsvector_literal(analysed.codes),
        *lengths,
    )


_NOT_ANALYSED = ("", "", "", -1, -1, -1)


def chunk_row(
    c: Chunk, space: str | None, delta: _Delta, *, analyse: bool = True
) -> tuple[Any, ...]:
    """A chunk as a ``knowledge_pg_chunks`` row (the columns of the insert, rowid left out):
    its analysed fields as tsvectors and their lengths, their statistics added to ``delta``;
    with ``analyse=False`` empty fields of length -1, counted as not analysed."""
    if analyse:
        fields = keyword_fields(c, delta)
    else:
        delta.docs[UNANALYSED] += 1
        fields = _NOT_ANALYSED
    return (
        c.chunk_id,
        c.doc_id,
        c.chunk_index,
        c.text,
        c.title,
        list(c.section_path),
        c.page,
        c.source,
        c.start,
        c.end,
        c.content_hash,
        c.doc_type,
        list(c.permission_tags),
        c.tenant_id,
        c.updated_at,
        detect_language(c.text),
        space,
        *fields,
    )


class PgKnowledgeStore(PgOutbox, PgStoreReads, ReplacesSources):
    """Documents, chunks, vectors and keyword statistics in PostgreSQL (pgvector).

    Thread-safe: each call takes a pooled connection. Several processes may write at once.

    Args:
        db: The migrated connection pool (:class:`~shelfhand.knowledge.stores.pg.db.PgDatabase`).
        keyword_sql: Write the keyword fields and statistics of the SQL keyword search; off
            when a Qdrant index serves the searches (see the module docstring).
    """

    def __init__(self, db: PgDatabase, *, keyword_sql: bool = True) -> None:
        PgStoreReads.__init__(self, db)
        PgOutbox.__init__(self, db)
        self.keyword_sql = keyword_sql

    # -- vector spaces ----------------------------------------------------------------------

    def _ensure_space(
        self, conn: psycopg.Connection[Any], space: str, dim: int, model: str | None
    ) -> SpaceTable:
        """The space's table, created (with its HNSW index) on first use; the embedder and
        dimension must match what the space already holds."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('knowledge_pg_space:' || %s))", (space,)
        )
        row = conn.execute(
            "SELECT id, embedder, dim FROM knowledge_pg_spaces WHERE space = %s", (space,)
        ).fetchone()
        if row is None:
            created = conn.execute(
                "INSERT INTO knowledge_pg_spaces (space, embedder, dim) VALUES (%s, %s, %s)"
                " RETURNING id",
                (space, model or "", dim),
            ).fetchone()
            assert created is not None
            table = f"knowledge_pg_vec_{int(created[0])}"
            conn.execute(
                f"CREATE TABLE {table} ("
                " rowid BIGINT PRIMARY KEY REFERENCES knowledge_pg_chunks (rowid) ON DELETE CASCADE,"
                " tenant_id TEXT NOT NULL, permission_tags TEXT[] NOT NULL,"
                f" doc_type TEXT NOT NULL, source TEXT NOT NULL, embedding vector({int(dim)}) NOT NULL)"
            )
            conn.execute(f"CREATE INDEX {table}_tenant ON {table} (tenant_id)")
            if dim <= HNSW_MAX_DIM:
                conn.execute(hnsw_index_sql(table))
            return SpaceTable(space=space, table=table, dim=dim)
        embedder, stored_dim = str(row[1]), int(row[2])
        if stored_dim != dim or (model is not None and embedder not in ("", model)):
            raise KnowledgeError(
                f"vector space {space!r} holds vectors of {embedder or 'an unnamed embedder'} "
                f"(dim {stored_dim}) but the configured embedder is {model or 'unnamed'} "
                f"(dim {dim}); use a new database or forget and re-ingest the documents"
            )
        if model is not None and embedder == "":
            conn.execute(
                "UPDATE knowledge_pg_spaces SET embedder = %s WHERE id = %s", (model, row[0])
            )
        return SpaceTable(space=space, table=f"knowledge_pg_vec_{int(row[0])}", dim=stored_dim)

    # -- writes -------------------------------------------------------------------------------

    def _finish(self, conn: psycopg.Connection[Any], delta: _Delta) -> None:
        """Apply the transaction's statistics changes (in key order) and bump the generation."""
        items = sorted((k, n) for k, n in delta.terms.items() if n)
        if items:
            conn.execute(
                "INSERT INTO knowledge_pg_tenant_terms (tenant_id, field, term, df)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[])"
                " ON CONFLICT (tenant_id, field, term)"
                " DO UPDATE SET df = knowledge_pg_tenant_terms.df + excluded.df",
                (
                    [k[0] for k, _ in items],
                    [k[1] for k, _ in items],
                    [k[2] for k, _ in items],
                    [n for _, n in items],
                ),
            )
        keys = sorted(k for k in delta.tenant_docs.keys() | delta.tenant_tokens.keys())
        keys = [k for k in keys if delta.tenant_docs[k] or delta.tenant_tokens[k]]
        if keys:
            conn.execute(
                "INSERT INTO knowledge_pg_tenant_stats (tenant_id, field, docs, tokens)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[])"
                " ON CONFLICT (tenant_id, field) DO UPDATE SET"
                " docs = knowledge_pg_tenant_stats.docs + excluded.docs,"
                " tokens = knowledge_pg_tenant_stats.tokens + excluded.tokens",
                (
                    [k[0] for k in keys],
                    [k[1] for k in keys],
                    [delta.tenant_docs[k] for k in keys],
                    [delta.tenant_tokens[k] for k in keys],
                ),
            )
        for name in (*FIELDS, UNANALYSED):
            if delta.docs[name] or delta.tokens[name]:
                conn.execute(
                    "UPDATE knowledge_pg_field_stats SET docs = docs + %s, tokens = tokens + %s"
                    " WHERE field = %s",
                    (delta.docs[name], delta.tokens[name], name),
                )
        record_changes(conn, delta.changed)
        conn.execute("UPDATE knowledge_pg_meta SET value = value + 1 WHERE key = 'generation'")

    def _remove_docs(
        self, conn: psycopg.Connection[Any], doc_ids: Sequence[str], delta: _Delta
    ) -> int:
        """Delete documents (their chunks and vectors cascade); count their statistics out."""
        if not doc_ids:
            return 0
        ids = list(doc_ids)
        delta.changed.update(ids)
        for name, column in (("b", "body"), ("h", "head"), ("c", "codes")):
            for tenant, term, n in conn.execute(
                f"SELECT c.tenant_id, u.lexeme, count(*) FROM knowledge_pg_chunks c,"
                f" unnest(c.{column}) u WHERE c.doc_id = ANY(%s::text[])"
                " GROUP BY c.tenant_id, u.lexeme",
                (ids,),
            ):
                delta.terms[str(tenant), name, str(term)] -= int(n)
        for row in conn.execute(
            "SELECT tenant_id, count(*) FILTER (WHERE body_len >= 0),"
            " count(*) FILTER (WHERE body_len < 0),"
            " COALESCE(sum(body_len) FILTER (WHERE body_len >= 0), 0),"
            " COALESCE(sum(head_len) FILTER (WHERE body_len >= 0), 0),"
            " COALESCE(sum(codes_len) FILTER (WHERE body_len >= 0), 0)"
            " FROM knowledge_pg_chunks WHERE doc_id = ANY(%s::text[]) GROUP BY tenant_id",
            (ids,),
        ):
            tenant = str(row[0])
            delta.docs[UNANALYSED] -= int(row[2])
            for i, name in enumerate(FIELDS):
                delta.docs[name] -= int(row[1])
                delta.tokens[name] -= int(row[i + 3])
                delta.tenant_docs[tenant, name] -= int(row[1])
                delta.tenant_tokens[tenant, name] -= int(row[i + 3])
        cur = conn.execute(
            "DELETE FROM knowledge_pg_documents WHERE doc_id = ANY(%s::text[])", (ids,)
        )
        return cur.rowcount

    def _insert_doc(
        self,
        conn: psycopg.Connection[Any],
        doc: Document,
        chunks: Sequence[Chunk],
        vectors: DocVectors | None,
        embed_state: str,
        embed_error: str | None,
        delta: _Delta,
    ) -> list[int]:
        space_of = {p: space for space, (ps, _) in (vectors or {}).items() for p in ps}
        delta.changed.add(doc.doc_id)
        conn.execute(
            "INSERT INTO knowledge_pg_documents (doc_id, source, title, doc_type, content_hash,"
            " tenant_id, permission_tags, updated_at, metadata, chunk_count, embed_state,"
            " embed_error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                doc.doc_id,
                doc.source,
                doc.title,
                doc.doc_type,
                doc.content_hash,
                doc.tenant_id,
                list(doc.permission_tags),
                doc.updated_at,
                json.dumps(dict(doc.metadata), default=str),
                len(chunks),
                embed_state,
                embed_error,
            ),
        )
        rowids = self._insert_chunks(conn, doc.doc_id, chunks, space_of, delta)
        self._insert_doc_vectors(conn, rowids, chunks, vectors or {})
        return rowids

    def _insert_doc_vectors(
        self,
        conn: psycopg.Connection[Any],
        rowids: Sequence[int],
        chunks: Sequence[Chunk],
        vectors: DocVectors,
    ) -> None:
        """Store a document's ``vectors`` (space → positions in ``chunks``, matrix)."""
        for space, (positions, matrix) in vectors.items():
            arr = np.ascontiguousarray(matrix, dtype=np.float32)
            if arr.ndim != 2 or arr.shape[0] != len(positions):
                raise KnowledgeError(f"vectors for space {space!r} do not match their positions")
            table = self._ensure_space(conn, space, arr.shape[1], None)
            self._insert_vectors(conn, table, [(rowids[p], chunks[p]) for p in positions], arr)

    def _insert_vectors(
        self,
        conn: psycopg.Connection[Any],
        table: SpaceTable,
        rows: Sequence[tuple[int, Chunk]],
        matrix: Vectors,
    ) -> None:
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table.table} (rowid, tenant_id, permission_tags, doc_type, source,"
                " embedding) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (rowid) DO UPDATE"
                " SET embedding = excluded.embedding",
                [
                    (rowid, c.tenant_id, list(c.permission_tags), c.doc_type, c.source, matrix[j])
                    for j, (rowid, c) in enumerate(rows)
                ],
            )

    def _insert_chunks(
        self,
        conn: psycopg.Connection[Any],
        doc_id: str,
        chunks: Sequence[Chunk],
        space_of: Mapping[int, str],
        delta: _Delta,
    ) -> list[int]:
        params = []
        for i, c in enumerate(chunks):
            if c.doc_id != doc_id:
                raise KnowledgeError(f"chunk {c.chunk_id!r} does not belong to {doc_id!r}")
            params.append(chunk_row(c, space_of.get(i), delta, analyse=self.keyword_sql))
        if not params:
            return []
        rowids: list[int] = []
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO knowledge_pg_chunks (chunk_id, doc_id, chunk_index, text, title,"
                " section_path, page, source, start_, end_, content_hash, doc_type,"
                " permission_tags, tenant_id, updated_at, language, space, body, head, codes,"
                " body_len, head_len, codes_len) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                " %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s::tsvector, %s::tsvector, %s, %s,"
                " %s) RETURNING rowid",
                params,
                returning=True,
            )
            while True:
                row = cur.fetchone()
                assert row is not None
                rowids.append(int(row[0]))
                if not cur.nextset():
                    break
        return rowids

    def _record_source(
        self, conn: psycopg.Connection[Any], source: str, content_hash: str, doc_type: str
    ) -> None:
        conn.execute(
            "INSERT INTO knowledge_pg_sources (source, content_hash, doc_type, updated_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (source) DO UPDATE SET"
            " content_hash = excluded.content_hash, doc_type = excluded.doc_type,"
            " updated_at = excluded.updated_at",
            (source, content_hash, doc_type, time.time()),
        )

    def _docs_of(self, conn: psycopg.Connection[Any], source: str) -> list[str]:
        return [
            str(r[0])
            for r in conn.execute(
                "SELECT doc_id FROM knowledge_pg_documents WHERE source = %s", (source,)
            )
        ]

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
        """One transaction of a batched (phase 1) ingest; see
        :meth:`SqliteKnowledgeStore.write_batch <shelfhand.knowledge.stores.sqlite.SqliteKnowledgeStore.write_batch>`."""
        delta = _Delta()
        with self.db.transaction() as conn:
            if start:
                self._remove_docs(conn, self._docs_of(conn, source), delta)
                conn.execute("DELETE FROM knowledge_pg_sources WHERE source = %s", (source,))
            for doc, chunks in new_docs:
                self._remove_docs(conn, [doc.doc_id], delta)
                self._insert_doc(conn, doc, chunks, None, EMBED_PENDING, None, delta)
            for doc_id, chunks in appended:
                delta.changed.add(doc_id)
                self._insert_chunks(conn, doc_id, chunks, {}, delta)
                conn.execute(
                    "UPDATE knowledge_pg_documents SET chunk_count = chunk_count + %s,"
                    " embed_state = %s WHERE doc_id = %s",
                    (len(chunks), EMBED_PENDING, doc_id),
                )
            if finish_hash is not None:
                self._record_source(conn, source, finish_hash, doc_type)
            self._finish(conn, delta)
        self._after_change()

    def add_vectors(
        self,
        space: str,
        rowids: Sequence[int],
        matrix: Vectors,
        *,
        model: tuple[str, int] | None = None,
    ) -> int:
        """Store vectors of pending chunks (phase 2); chunks deleted or embedded meanwhile are
        skipped. Returns how many were stored."""
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
        :meth:`add_bridge_vectors` (chunks that have theirs, locked against a delete)."""
        arr = np.ascontiguousarray(matrix, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(rowids):
            raise KnowledgeError(f"vectors for space {space!r} do not match their rowids")
        if not len(rowids):
            return 0
        with self.db.transaction() as conn:
            table = self._ensure_space(
                conn, space, model[1] if model else arr.shape[1], model[0] if model else None
            )
            if arr.shape[1] != table.dim:
                raise KnowledgeError(
                    f"vectors of dim {arr.shape[1]} for space {space!r} of dim {table.dim}"
                )
            position = {int(r): j for j, r in enumerate(rowids)}
            if own:
                claimed = conn.execute(
                    f"UPDATE knowledge_pg_chunks SET space = %s WHERE rowid = ANY(%s::bigint[])"
                    f" AND space IS NULL RETURNING {CHUNK_COLUMNS}",
                    (space, list(position)),
                ).fetchall()
            else:
                claimed = conn.execute(
                    f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE rowid ="
                    " ANY(%s::bigint[]) AND space IS NOT NULL FOR SHARE",
                    (list(position),),
                ).fetchall()
            rows = [(int(r[0]), row_to_chunk(r)) for r in claimed]
            if rows:
                self._insert_vectors(conn, table, rows, arr[[position[r] for r, _ in rows]])
                if own:
                    conn.execute(
                        "UPDATE knowledge_pg_documents d SET embed_state = %s, embed_error = NULL"
                        " WHERE d.doc_id = ANY(%s::text[]) AND NOT EXISTS (SELECT 1 FROM"
                        " knowledge_pg_chunks c WHERE c.doc_id = d.doc_id AND c.space IS NULL)",
                        (EMBED_DONE, sorted({c.doc_id for _, c in rows})),
                    )
                record_changes(conn, {c.doc_id for _, c in rows})
            conn.execute("UPDATE knowledge_pg_meta SET value = value + 1 WHERE key = 'generation'")
        self._after_change()
        return len(rows)

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
        """See :meth:`ReplacesSources.replace_source`: one PostgreSQL transaction."""
        delta = _Delta()
        with self.db.transaction() as conn:
            for space, (model, dim) in (space_models or {}).items():
                self._ensure_space(conn, space, dim, model)
            new_ids = {doc.doc_id for doc, _, _ in items}
            if remove_others:
                others = [d for d in self._docs_of(conn, source) if d not in new_ids]
                self._remove_docs(conn, others, delta)
            result: list[list[int]] = []
            for doc, chunks, vectors in items:
                self._remove_docs(conn, [doc.doc_id], delta)
                state = embed_state or (EMBED_DONE if vectors else EMBED_NONE)
                result.append(
                    self._insert_doc(conn, doc, chunks, vectors, state, embed_error, delta)
                )
            if source_hash is not None:
                self._record_source(
                    conn, source, source_hash, items[0][0].doc_type if items else ""
                )
            self._finish(conn, delta)
        self._after_change()
        return result

    def import_documents(
        self,
        items: Sequence[ImportedDocument],
        *,
        space_models: Mapping[str, tuple[str, int]] | None = None,
        sources: Sequence[tuple[str, str, str]] = (),
    ) -> None:
        """Store documents read from another store, with their vectors and embedding state, in
        one transaction (``pg-import``); a document already stored under the same id is
        replaced. ``sources`` are ``(source, content_hash, doc_type)`` to record."""
        delta = _Delta()
        with self.db.transaction() as conn:
            for space, (model, dim) in (space_models or {}).items():
                self._ensure_space(conn, space, dim, model)
            self._remove_docs(conn, [item.doc.doc_id for item in items], delta)
            for item in items:
                rowids = self._insert_doc(
                    conn,
                    item.doc,
                    item.chunks,
                    item.vectors,
                    item.embed_state,
                    item.embed_error,
                    delta,
                )
                self._insert_doc_vectors(conn, rowids, item.chunks, item.bridges)
            for source, content_hash, doc_type in sources:
                self._record_source(conn, source, content_hash, doc_type)
            self._finish(conn, delta)
        self._after_change()

    def delete_document(self, doc_id: str) -> bool:
        delta = _Delta()
        with self.db.transaction() as conn:
            existed = self._remove_docs(conn, [doc_id], delta) > 0
            self._finish(conn, delta)
        self._after_change()
        return existed

    def delete_source(self, source: str) -> int:
        delta = _Delta()
        with self.db.transaction() as conn:
            doc_ids = self._docs_of(conn, source)
            self._remove_docs(conn, doc_ids, delta)
            conn.execute("DELETE FROM knowledge_pg_sources WHERE source = %s", (source,))
            self._finish(conn, delta)
        self._after_change()
        return len(doc_ids)

    def set_root_path(self, name: str, path: str) -> None:
        with self.db.connection() as conn:
            conn.execute(
                "INSERT INTO knowledge_pg_roots (name, path) VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET path = excluded.path",
                (name, path),
            )

    def forget_root(self, name: str) -> None:
        with self.db.connection() as conn:
            conn.execute("DELETE FROM knowledge_pg_roots WHERE name = %s", (name,))
