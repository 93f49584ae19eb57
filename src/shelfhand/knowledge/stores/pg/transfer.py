"""Move an embedded workspace into PostgreSQL without re-embedding (``shelfhand pg-import``).

Documents, chunks, their stored vectors (per space, with the embedder name and dimension),
embedding states, source hashes (so the next ingest stays incremental) and root folders are
copied from ``<workspace>/knowledge.db``, read-only, in batches of documents, each batch one
PostgreSQL transaction that also brings the BM25 statistics up to date. Chunks still waiting
for embedding stay pending.

The bulk path (the default) writes each batch with ``COPY`` (rowids reserved from the chunk
table's identity sequence, vectors in binary), counts the batch's term statistics in Python
(optionally in ``workers`` processes: analysing the text is most of the work) and applies them
as one set-based upsert. When the import brings more chunks than the database holds, the GIN
and HNSW indexes are dropped first and built at the end with ``maintenance_work_mem``
(``CREATE INDEX IF NOT EXISTS``: an import stopped before that point restores them when run
again). ``bulk=False`` stores every document through
:meth:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore.import_documents` instead (the reference
the bulk path is tested against).

Running it again never duplicates: a document already in the database with the same content
hash, chunk count, embedding state and update time is skipped (so an interrupted import resumes
where it stopped), any other document of the same id is replaced.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.stores.pg.reads import SpaceTable
from shelfhand.knowledge.stores.pg.store import (
    GIN_INDEXES,
    HNSW_MAX_DIM,
    ImportedDocument,
    PgKnowledgeStore,
    _Delta,
    chunk_row,
    hnsw_index_sql,
)
from shelfhand.knowledge.stores.sqlite_reads import CHUNK_COLUMNS, row_to_chunk
from shelfhand.knowledge.types import Chunk, Document

if TYPE_CHECKING:
    import psycopg

__all__ = ["ImportReport", "import_workspace"]

_DOC_COLUMNS = (
    "doc_id, source, title, doc_type, content_hash, tenant_id, permission_tags, updated_at,"
    " metadata, chunk_count, embed_state, embed_error"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    """What an import wrote: ``documents`` / ``chunks`` / ``vectors`` copied, ``skipped``
    documents already there unchanged, and ``timings`` (seconds per step: ``rows``, then each
    index built)."""

    documents: int
    chunks: int
    vectors: int
    sources: int
    skipped: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)


def _open(workspace: Path) -> sqlite3.Connection:
    path = Path(workspace) / "knowledge.db"
    if not path.is_file():
        raise KnowledgeError(f"{path} does not exist: nothing to import")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)


@dataclass(slots=True)
class _Batch:
    """One batch read from SQLite: document rows, chunk rows, vectors by chunk rowid."""

    docs: list[tuple[Any, ...]]
    chunks: list[tuple[Any, ...]]
    vectors: dict[int, tuple[str, bytes]]
    """Each chunk's vector in its own space (the chunk's ``space``)."""
    bridges: dict[int, list[tuple[str, bytes]]] = field(default_factory=dict)
    """Each chunk's vectors in other spaces: the bridge spaces (for questions in other
    languages, see :mod:`~shelfhand.knowledge.embeddings.router`)."""
    analyse: bool = True
    """Write the keyword fields (off when Qdrant serves the searches)."""

    def vectors_of(self, rowid: int) -> list[tuple[str, bytes]]:
        """Every vector of the chunk ``rowid``: its own first, then its bridge spaces'."""
        own = self.vectors.get(rowid)
        return [*([own] if own else []), *self.bridges.get(rowid, ())]


def _read(conn: sqlite3.Connection, docs: Sequence[tuple[Any, ...]], analyse: bool) -> _Batch:
    ids = [d[0] for d in docs]
    marks = ",".join("?" * len(ids))
    chunks = conn.execute(
        f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE doc_id IN ({marks}) ORDER BY rowid", ids
    ).fetchall()
    vectors: dict[int, tuple[str, bytes]] = {}
    bridges: dict[int, list[tuple[str, bytes]]] = {}
    for r in conn.execute(
        "SELECT e.chunk_rowid, e.space, e.vector, e.space = c.space FROM embeddings e JOIN chunks c"
        f" ON c.rowid = e.chunk_rowid WHERE c.doc_id IN ({marks})",
        ids,
    ):
        rowid, space, blob = int(r[0]), str(r[1]), bytes(r[2])
        if r[3]:
            vectors[rowid] = (space, blob)
        else:  # a second vector of the chunk (a bridge space's), not its own space
            bridges.setdefault(rowid, []).append((space, blob))
    return _Batch(docs=list(docs), chunks=chunks, vectors=vectors, bridges=bridges, analyse=analyse)


def _document(d: Sequence[Any]) -> Document:
    return Document(
        doc_id=d[0],
        source=d[1],
        title=d[2],
        doc_type=d[3],
        content_hash=d[4],
        tenant_id=d[5],
        permission_tags=tuple(json.loads(d[6])),
        updated_at=d[7],
        metadata=json.loads(d[8]),
        sections=(),
    )


# -- the reference path: one document at a time through the store ---------------------------------


def _imported(batch: _Batch) -> list[ImportedDocument]:
    chunks: dict[str, list[tuple[int, Chunk]]] = {d[0]: [] for d in batch.docs}
    for row in batch.chunks:
        chunks[row[2]].append((int(row[0]), row_to_chunk(row)))
    out = []
    for d in batch.docs:
        rowids = [rowid for rowid, _ in chunks[d[0]]]
        own = {r: [batch.vectors[r]] for r in rowids if r in batch.vectors}
        out.append(
            ImportedDocument(
                doc=_document(d),
                chunks=[c for _, c in chunks[d[0]]],
                vectors=_by_space(rowids, own),
                embed_state=d[9],
                embed_error=d[10],
                bridges=_by_space(rowids, batch.bridges),
            )
        )
    return out


def _by_space(
    rowids: Sequence[int], vectors: Mapping[int, Sequence[tuple[str, bytes]]]
) -> dict[str, tuple[list[int], np.ndarray[Any, Any]]]:
    """The ``vectors`` of a document's chunks (``rowids``, in order) as space → (positions,
    matrix)."""
    per_space: dict[str, tuple[list[int], list[np.ndarray[Any, Any]]]] = {}
    for position, rowid in enumerate(rowids):
        for space, blob in vectors.get(rowid, ()):
            entry = per_space.setdefault(space, ([], []))
            entry[0].append(position)
            entry[1].append(np.frombuffer(blob, dtype=np.float32))
    return {s: (pos, np.stack(rows)) for s, (pos, rows) in per_space.items()}


# -- the bulk path ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Prepared:
    """A batch ready to ``COPY``: rows without their rowid, and the statistics they add."""

    batch: _Batch
    docs: list[tuple[Any, ...]]
    chunks: list[tuple[Any, ...]]
    delta: _Delta


def _prepare(batch: _Batch) -> _Prepared:
    """Analyse a batch's chunks (in a worker process when there are several)."""
    delta = _Delta()
    counts: dict[str, int] = {}
    rows = []
    for raw in batch.chunks:
        c = row_to_chunk(raw)
        counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
        space = batch.vectors.get(int(raw[0]), (None, b""))[0]
        rows.append(chunk_row(c, space, delta, analyse=batch.analyse))
    docs = [
        (
            d[0],
            d[1],
            d[2],
            d[3],
            d[4],
            d[5],
            list(json.loads(d[6])),
            d[7],
            d[8],
            counts.get(d[0], 0),
            d[9],
            d[10],
        )
        for d in batch.docs
    ]
    return _Prepared(batch=batch, docs=docs, chunks=rows, delta=delta)


_CHUNK_COPY = (
    "COPY knowledge_pg_chunks (rowid, chunk_id, doc_id, chunk_index, text, title, section_path,"
    " page, source, start_, end_, content_hash, doc_type, permission_tags, tenant_id, updated_at,"
    " language, space, body, head, codes, body_len, head_len, codes_len) FROM STDIN"
)


def _write(
    store: PgKnowledgeStore,
    prepared: _Prepared,
    replace: Sequence[str],
    tables: Mapping[str, SpaceTable],
) -> int:
    """One batch in one transaction; returns the vectors written."""
    delta = prepared.delta
    written = 0
    with store.db.transaction() as conn:
        store._remove_docs(conn, list(replace), delta)
        rowids = [
            int(r[0])
            for r in conn.execute(
                "SELECT nextval(pg_get_serial_sequence('knowledge_pg_chunks', 'rowid'))"
                " FROM generate_series(1, %s)",
                (len(prepared.chunks),),
            )
        ]
        with conn.cursor() as cur:
            with cur.copy(f"COPY knowledge_pg_documents ({_DOC_COLUMNS}) FROM STDIN") as copy:
                for row in prepared.docs:
                    copy.write_row(row)
            with cur.copy(_CHUNK_COPY) as copy:
                for rowid, row in zip(rowids, prepared.chunks, strict=True):
                    copy.write_row((rowid, *row))
            per_space: dict[str, list[tuple[int, int, bytes]]] = {}
            for j, raw in enumerate(prepared.batch.chunks):
                for space, blob in prepared.batch.vectors_of(int(raw[0])):
                    per_space.setdefault(space, []).append((j, rowids[j], blob))
            for space, members in per_space.items():
                written += _copy_vectors(cur, tables[space], prepared, members)
        store._finish(conn, delta)
    return written


def _copy_vectors(
    cur: psycopg.Cursor[Any],
    table: SpaceTable,
    prepared: _Prepared,
    members: Sequence[tuple[int, int, bytes]],
) -> int:
    with cur.copy(
        f"COPY {table.table} (rowid, tenant_id, permission_tags, doc_type, source, embedding)"
        " FROM STDIN WITH (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "text", "text[]", "text", "text", "vector"])
        for j, rowid, blob in members:
            vector = np.frombuffer(blob, dtype=np.float32)
            if vector.shape[0] != table.dim:
                raise KnowledgeError(
                    f"a vector of dim {vector.shape[0]} for space {table.space!r} of dim"
                    f" {table.dim}"
                )
            row = prepared.chunks[j]
            copy.write_row((rowid, row[13], row[12], row[11], row[7], vector))
    return len(members)


def _record_sources(store: PgKnowledgeStore, rows: Sequence[tuple[str, str, str]]) -> None:
    """Upsert ``(source, content_hash, doc_type)`` rows, 10,000 per statement."""
    now = time.time()
    for a in range(0, len(rows), 10_000):
        part = sorted(rows[a : a + 10_000])
        with store.db.transaction() as conn:
            conn.execute(
                "INSERT INTO knowledge_pg_sources (source, content_hash, doc_type, updated_at)"
                " SELECT s, h, t, %s FROM unnest(%s::text[], %s::text[], %s::text[]) AS u(s, h, t)"
                " ON CONFLICT (source) DO UPDATE SET content_hash = excluded.content_hash,"
                " doc_type = excluded.doc_type, updated_at = excluded.updated_at",
                (now, [r[0] for r in part], [r[1] for r in part], [r[2] for r in part]),
            )


def _spaces(conn: sqlite3.Connection) -> dict[str, tuple[str | None, int]]:
    """Every vector space of the workspace: embedder (when recorded) and dimension."""
    spaces: dict[str, tuple[str | None, int]] = {
        str(r[0]): (str(r[1]), int(r[2]))
        for r in conn.execute("SELECT space, embedder, dim FROM spaces")
    }
    for (space,) in conn.execute("SELECT DISTINCT space FROM embeddings").fetchall():
        if space not in spaces:
            row = conn.execute(
                "SELECT length(vector) FROM embeddings WHERE space = ? LIMIT 1", (space,)
            ).fetchone()
            spaces[str(space)] = (None, int(row[0]) // 4)
    return spaces


def _vector_tables(store: PgKnowledgeStore) -> list[str]:
    with store.db.connection() as conn:
        return [
            f"knowledge_pg_vec_{int(r[0])}"
            for r in conn.execute(
                "SELECT id FROM knowledge_pg_spaces WHERE dim <= %s ORDER BY id", (HNSW_MAX_DIM,)
            )
        ]


def _drop_search_indexes(store: PgKnowledgeStore) -> None:
    with store.db.connection() as conn:
        for name in GIN_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
    for table in _vector_tables(store):
        with store.db.connection() as conn:
            conn.execute(f"DROP INDEX IF EXISTS {table}_hnsw")


def _build_search_indexes(
    store: PgKnowledgeStore,
    *,
    maintenance_work_mem: str,
    index_workers: int | None,
    on_step: Callable[[str], None] | None,
) -> dict[str, float]:
    """Create the GIN and HNSW indexes that are missing; seconds per index built."""
    steps = [
        (name, f"CREATE INDEX IF NOT EXISTS {name} {ddl}") for name, ddl in GIN_INDEXES.items()
    ]
    steps += [
        (f"{table}_hnsw", hnsw_index_sql(table, if_not_exists=True))
        for table in _vector_tables(store)
    ]
    timings: dict[str, float] = {}
    with store.db.connection() as conn:
        present = {
            str(r[0])
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename LIKE 'knowledge_pg_%'"
            )
        }
        missing = [(name, sql) for name, sql in steps if name not in present]
        if not missing:
            return timings
        conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
        )
        if index_workers is not None:
            conn.execute(
                "SELECT set_config('max_parallel_maintenance_workers', %s, false)",
                (str(index_workers),),
            )
        try:
            for name, sql in missing:
                if on_step is not None:
                    on_step(f"index {name}")
                t0 = time.perf_counter()
                conn.execute(sql)
                timings[f"index {name}"] = time.perf_counter() - t0
            conn.execute("ANALYZE knowledge_pg_chunks")
        finally:
            conn.execute("RESET maintenance_work_mem")
            conn.execute("RESET max_parallel_maintenance_workers")
    return timings


def import_workspace(
    workspace: Path,
    store: PgKnowledgeStore,
    *,
    batch_documents: int = 500,
    progress: Callable[[int, int], None] | None = None,
    bulk: bool = True,
    workers: int = 1,
    rebuild_indexes: bool | None = None,
    maintenance_work_mem: str = "1GB",
    index_workers: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ImportReport:
    """Copy the embedded store of ``workspace`` into ``store``; ``progress(done, total)`` is
    told the documents handled (copied or skipped) after each batch.

    Args:
        bulk: ``COPY`` batches (see the module docstring); ``False``: row by row.
        workers: Processes analysing the text for the bulk path (1: in this process).
        rebuild_indexes: Drop the GIN / HNSW indexes during the load and build them after;
            default: when the import brings more chunks than the database holds.
        maintenance_work_mem: For the index builds (an HNSW graph built outside it is slow).
        index_workers: ``max_parallel_maintenance_workers`` for the builds (server default).
        on_step: Told the name of each step as it starts (``rows``, ``index <name>``).

    Raises:
        KnowledgeError: The workspace has no knowledge.db, or a vector space's embedder or
            dimension differs from the one the database already holds.
    """
    if batch_documents < 1 or workers < 1:
        raise KnowledgeError("batch_documents and workers must be at least 1")
    conn = _open(workspace)
    try:
        spaces = _spaces(conn)
        source_rows = [
            (str(r[0]), str(r[1]), str(r[2]))
            for r in conn.execute("SELECT source, content_hash, doc_type FROM sources")
        ]
        total = int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
        incoming = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        with store.db.transaction() as pg:
            tables = {
                space: store._ensure_space(pg, space, dim, model)
                for space, (model, dim) in spaces.items()
            }
            # what must match for a stored document to count as imported
            stored = {
                str(r[0]): (str(r[1]), int(r[2]), str(r[3]), float(r[4]))
                for r in pg.execute(
                    "SELECT doc_id, content_hash, chunk_count, embed_state, updated_at"
                    " FROM knowledge_pg_documents"
                )
            }
            row = pg.execute("SELECT count(*) FROM knowledge_pg_chunks").fetchone()
            held = int(row[0]) if row else 0
        timings: dict[str, float] = {}
        if bulk and (rebuild_indexes if rebuild_indexes is not None else incoming > held):
            _drop_search_indexes(store)
        if on_step is not None:
            on_step("rows")
        t0 = time.perf_counter()
        done = skipped = chunks = vectors = 0
        cursor = conn.execute(
            "SELECT doc_id, source, title, doc_type, content_hash, tenant_id, permission_tags,"
            " updated_at, metadata, embed_state, embed_error, chunk_count FROM documents"
            " ORDER BY doc_id"
        )

        def batches() -> Iterator[_Batch]:
            nonlocal done, skipped
            while True:
                rows = cursor.fetchmany(batch_documents)
                if not rows:
                    return
                todo = [r for r in rows if stored.get(r[0]) != (r[4], r[11], r[9], r[7])]
                skipped += len(rows) - len(todo)
                done += len(rows) - len(todo)
                if todo:
                    yield _read(conn, todo, store.keyword_sql)
                elif progress is not None:
                    progress(done, total)

        def write(batch: _Batch, prepared: _Prepared | None) -> None:
            nonlocal done, chunks, vectors
            replace = [d[0] for d in batch.docs if d[0] in stored]
            if prepared is None:
                store.import_documents(_imported(batch))
                vectors += len(batch.vectors) + sum(map(len, batch.bridges.values()))
            else:
                vectors += _write(store, prepared, replace, tables)
            done += len(batch.docs)
            chunks += len(batch.chunks)
            if progress is not None:
                progress(done, total)

        if not bulk:
            for batch in batches():
                write(batch, None)
        elif workers == 1:
            for batch in batches():
                write(batch, _prepare(batch))
        else:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for prepared in pool.imap(_prepare, batches()):
                    write(prepared.batch, prepared)
        timings["rows"] = time.perf_counter() - t0
        _record_sources(store, source_rows)
        for key, value in conn.execute("SELECT key, value FROM meta WHERE key LIKE 'root:%'"):
            store.set_root_path(str(key)[len("root:") :], str(value))
    finally:
        conn.close()
    timings.update(
        _build_search_indexes(
            store,
            maintenance_work_mem=maintenance_work_mem,
            index_workers=index_workers,
            on_step=on_step,
        )
    )
    return ImportReport(
        documents=done - skipped,
        chunks=chunks,
        vectors=vectors,
        sources=len(source_rows),
        skipped=skipped,
        timings=timings,
    )
