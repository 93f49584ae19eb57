"""Move an embedded workspace into PostgreSQL without re-embedding (``shelfhand pg-import``).

Documents, chunks, their stored vectors (per space, with the embedder name and dimension),
embedding states, source hashes (so the next ingest stays incremental) and root folders are
copied from ``<workspace>/knowledge.db``, read-only, in batches of documents, each batch one
PostgreSQL transaction. Chunks still waiting for embedding stay pending. Running it again
replaces the imported documents (same ids) instead of duplicating them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.pg.store import ImportedDocument, PgKnowledgeStore
from shelfhand.knowledge.store import _CHUNK_COLUMNS, _row_to_chunk
from shelfhand.knowledge.types import Chunk, Document

__all__ = ["ImportReport", "import_workspace"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    documents: int
    chunks: int
    vectors: int
    sources: int


def _open(workspace: Path) -> sqlite3.Connection:
    path = Path(workspace) / "knowledge.db"
    if not path.is_file():
        raise KnowledgeError(f"{path} does not exist: nothing to import")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _batch(conn: sqlite3.Connection, docs: Sequence[Sequence[Any]]) -> list[ImportedDocument]:
    ids = [d[0] for d in docs]
    marks = ",".join("?" * len(ids))
    chunks: dict[str, list[tuple[int, Chunk]]] = {doc_id: [] for doc_id in ids}
    for row in conn.execute(
        f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE doc_id IN ({marks}) ORDER BY rowid",
        ids,
    ):
        chunks[row[2]].append((int(row[0]), _row_to_chunk(row)))
    vectors: dict[int, tuple[str, bytes]] = {
        int(r[0]): (str(r[1]), r[2])
        for r in conn.execute(
            "SELECT e.chunk_rowid, e.space, e.vector FROM embeddings e JOIN chunks c"
            f" ON c.rowid = e.chunk_rowid WHERE c.doc_id IN ({marks})",
            ids,
        )
    }
    out = []
    for d in docs:
        doc = Document(
            doc_id=d[0],
            source=d[1],
            title=d[2],
            doc_type=d[3],
            sections=(),
            content_hash=d[4],
            permission_tags=tuple(json.loads(d[6])),
            tenant_id=d[5],
            updated_at=d[7],
            metadata=json.loads(d[8]),
        )
        per_space: dict[str, tuple[list[int], list[np.ndarray[Any, Any]]]] = {}
        for position, (rowid, _) in enumerate(chunks[d[0]]):
            if rowid in vectors:
                space, blob = vectors[rowid]
                entry = per_space.setdefault(space, ([], []))
                entry[0].append(position)
                entry[1].append(np.frombuffer(blob, dtype=np.float32))
        out.append(
            ImportedDocument(
                doc=doc,
                chunks=[c for _, c in chunks[d[0]]],
                vectors={s: (pos, np.stack(rows)) for s, (pos, rows) in per_space.items()},
                embed_state=d[9],
                embed_error=d[10],
            )
        )
    return out


def import_workspace(
    workspace: Path,
    store: PgKnowledgeStore,
    *,
    batch_documents: int = 200,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Copy the embedded store of ``workspace`` into ``store``; ``progress(done, total)`` is
    told the documents copied after each batch.

    Raises:
        KnowledgeError: The workspace has no knowledge.db, or a vector space's embedder or
            dimension differs from the one the database already holds.
    """
    conn = _open(workspace)
    try:
        spaces = {
            str(r[0]): (str(r[1]), int(r[2]))
            for r in conn.execute("SELECT space, embedder, dim FROM spaces")
        }
        source_rows = [
            (str(r[0]), str(r[1]), str(r[2]))
            for r in conn.execute("SELECT source, content_hash, doc_type FROM sources")
        ]
        total = int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
        done = chunks = vectors = 0
        cursor = conn.execute(
            "SELECT doc_id, source, title, doc_type, content_hash, tenant_id, permission_tags,"
            " updated_at, metadata, embed_state, embed_error FROM documents ORDER BY doc_id"
        )
        first = True
        while True:
            docs = cursor.fetchmany(batch_documents)
            if not docs:
                break
            items = _batch(conn, docs)
            store.import_documents(items, space_models=spaces if first else None)
            first = False
            done += len(items)
            chunks += sum(len(i.chunks) for i in items)
            vectors += sum(len(p) for i in items for p, _ in i.vectors.values())
            if progress is not None:
                progress(done, total)
        store.import_documents([], space_models=spaces, sources=source_rows)
        for key, value in conn.execute("SELECT key, value FROM meta WHERE key LIKE 'root:%'"):
            store.set_root_path(str(key)[len("root:") :], str(value))
    finally:
        conn.close()
    return ImportReport(documents=done, chunks=chunks, vectors=vectors, sources=len(source_rows))
