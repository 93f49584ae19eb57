"""The knowledge database's schema, as a list of named migrations (applied in order, once)."""

from __future__ import annotations

from shelfhand.core.db import Migration

__all__ = ["MIGRATIONS"]

MIGRATIONS = [
    Migration(
        name="knowledge_001_initial",
        sql="""
CREATE TABLE documents (
    doc_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    permission_tags TEXT NOT NULL,
    updated_at REAL NOT NULL,
    metadata TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    embed_state TEXT NOT NULL,
    embed_error TEXT
);
CREATE INDEX documents_source ON documents(source);
CREATE TABLE chunks (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    text TEXT NOT NULL,
    title TEXT NOT NULL,
    section_path TEXT NOT NULL,
    page INTEGER,
    source TEXT NOT NULL,
    start INTEGER NOT NULL,
    end_ INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    permission_tags TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    updated_at REAL NOT NULL,
    language TEXT NOT NULL,
    space TEXT
);
CREATE INDEX chunks_doc ON chunks(doc_id);
CREATE INDEX chunks_hash ON chunks(content_hash);
CREATE TABLE embeddings (
    chunk_rowid INTEGER NOT NULL REFERENCES chunks(rowid) ON DELETE CASCADE,
    space TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (chunk_rowid, space)
) WITHOUT ROWID;
CREATE INDEX embeddings_space ON embeddings(space);
CREATE TABLE sources (
    source TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE index_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    generation INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    old_rowids TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE spaces (
    space TEXT PRIMARY KEY,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta (key, value) VALUES ('generation', '0');
""",
    ),
    Migration(
        name="knowledge_002_pending_embeddings",
        # A chunk without vectors has ``space IS NULL``: it is keyword-searchable and waits for
        # phase 2 of ingest. Outbox rows gain a kind: ``doc`` (the document was replaced, as
        # before), ``chunks`` (``rowids`` were appended to a document being ingested in
        # batches) or ``vectors`` (``rowids`` got their vectors).
        sql="""
ALTER TABLE index_outbox ADD COLUMN kind TEXT NOT NULL DEFAULT 'doc';
ALTER TABLE index_outbox ADD COLUMN rowids TEXT NOT NULL DEFAULT '[]';
CREATE INDEX chunks_pending ON chunks(rowid) WHERE space IS NULL;
CREATE INDEX chunks_pending_doc ON chunks(doc_id) WHERE space IS NULL;
""",
    ),
]
