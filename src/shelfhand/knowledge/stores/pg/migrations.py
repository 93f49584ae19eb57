"""The PostgreSQL knowledge store's schema, versioned with :class:`~shelfhand.backends.postgres.PgMigration`.

Every name starts with ``knowledge_pg_`` (other components keep their own tables in the same
database). Vector tables are created per vector space at run time
(:class:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore`), each with its own dimension and
HNSW index: see :mod:`shelfhand.knowledge.stores.pg`.
"""

from __future__ import annotations

from shelfhand.backends.postgres import PgMigration

__all__ = ["MIGRATIONS"]

_INITIAL = """
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE knowledge_pg_meta (
    key TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO knowledge_pg_meta (key, value) VALUES ('generation', 0);

CREATE TABLE knowledge_pg_documents (
    doc_id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    permission_tags TEXT[] NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    metadata JSONB NOT NULL,
    chunk_count INTEGER NOT NULL,
    embed_state TEXT NOT NULL,
    embed_error TEXT
);
CREATE INDEX knowledge_pg_documents_source ON knowledge_pg_documents (source);

-- body: title + section path + text; head: the chunk's own heading; codes: identifiers of
-- the text. Each a tsvector of our analysed tokens (positions 1..tf carry the term
-- frequency), with its length in tokens for BM25.
CREATE TABLE knowledge_pg_chunks (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chunk_id TEXT NOT NULL,
    doc_id TEXT NOT NULL REFERENCES knowledge_pg_documents (doc_id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    text TEXT NOT NULL,
    title TEXT NOT NULL,
    section_path TEXT[] NOT NULL,
    page INTEGER,
    source TEXT NOT NULL,
    start_ INTEGER NOT NULL,
    end_ INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    permission_tags TEXT[] NOT NULL,
    tenant_id TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    language TEXT,
    space TEXT,
    body TSVECTOR NOT NULL,
    head TSVECTOR NOT NULL,
    codes TSVECTOR NOT NULL,
    body_len INTEGER NOT NULL,
    head_len INTEGER NOT NULL,
    codes_len INTEGER NOT NULL
);
CREATE INDEX knowledge_pg_chunks_doc ON knowledge_pg_chunks (doc_id);
CREATE INDEX knowledge_pg_chunks_tenant ON knowledge_pg_chunks (tenant_id);
CREATE INDEX knowledge_pg_chunks_hash ON knowledge_pg_chunks (content_hash);
CREATE INDEX knowledge_pg_chunks_pending ON knowledge_pg_chunks (rowid) WHERE space IS NULL;
CREATE INDEX knowledge_pg_chunks_leaf
    ON knowledge_pg_chunks (tenant_id, (section_path[cardinality(section_path)]));
CREATE INDEX knowledge_pg_chunks_body ON knowledge_pg_chunks USING gin (body);
CREATE INDEX knowledge_pg_chunks_head ON knowledge_pg_chunks USING gin (head);
CREATE INDEX knowledge_pg_chunks_codes ON knowledge_pg_chunks USING gin (codes);

-- BM25 statistics: per field ('b' body, 'h' head, 'c' codes) the chunk count and total
-- length, and per term its document frequency; maintained in each write's transaction.
CREATE TABLE knowledge_pg_field_stats (
    field CHAR(1) PRIMARY KEY,
    docs BIGINT NOT NULL,
    tokens BIGINT NOT NULL
);
INSERT INTO knowledge_pg_field_stats (field, docs, tokens) VALUES ('b', 0, 0), ('h', 0, 0), ('c', 0, 0);
CREATE TABLE knowledge_pg_terms (
    field CHAR(1) NOT NULL,
    term TEXT NOT NULL,
    df BIGINT NOT NULL,
    PRIMARY KEY (field, term)
);

CREATE TABLE knowledge_pg_sources (
    source TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    doc_type TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE knowledge_pg_roots (
    name TEXT PRIMARY KEY,
    path TEXT NOT NULL
);

-- One table per vector space (knowledge_pg_vec_<id>): its own dimension and HNSW index.
CREATE TABLE knowledge_pg_spaces (
    id INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    space TEXT NOT NULL UNIQUE,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL
);
"""

# Changed documents, for a derived index (the Qdrant index): shelfhand.knowledge.stores.pg.outbox.
_OUTBOX = """
CREATE TABLE knowledge_pg_outbox (
    id BIGSERIAL PRIMARY KEY,
    doc_id TEXT NOT NULL
);
INSERT INTO knowledge_pg_meta (key, value) VALUES ('outbox', 0), ('outbox_acked', 0);
"""

# Chunks stored without keyword fields while a Qdrant index serves the searches
# (body_len -1; the 'u' statistics row counts them): shelfhand.knowledge.stores.pg.backfill.
_UNANALYSED = """
INSERT INTO knowledge_pg_field_stats (field, docs, tokens) VALUES ('u', 0, 0);
CREATE INDEX knowledge_pg_chunks_unanalysed ON knowledge_pg_chunks (rowid) WHERE body_len < 0;
"""

# BM25 statistics per tenant: a tenant's searches rank by its own chunks' (the term frequencies
# of every tenant together, knowledge_pg_terms, are replaced: their sums over the tenants).
_TENANT_STATISTICS = """
CREATE TABLE knowledge_pg_tenant_terms (
    tenant_id TEXT NOT NULL,
    field CHAR(1) NOT NULL,
    term TEXT NOT NULL,
    df BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, field, term)
);
INSERT INTO knowledge_pg_tenant_terms (tenant_id, field, term, df)
SELECT c.tenant_id, f.field, u.lexeme, count(*)
FROM knowledge_pg_chunks c
CROSS JOIN LATERAL (VALUES ('b', c.body), ('h', c.head), ('c', c.codes)) AS f (field, vec)
CROSS JOIN LATERAL unnest(f.vec) AS u
WHERE c.body_len >= 0
GROUP BY c.tenant_id, f.field, u.lexeme;
CREATE TABLE knowledge_pg_tenant_stats (
    tenant_id TEXT NOT NULL,
    field CHAR(1) NOT NULL,
    docs BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, field)
);
INSERT INTO knowledge_pg_tenant_stats (tenant_id, field, docs, tokens)
SELECT c.tenant_id, f.field, count(*), COALESCE(sum(f.len), 0)
FROM knowledge_pg_chunks c
CROSS JOIN LATERAL (VALUES ('b', c.body_len), ('h', c.head_len), ('c', c.codes_len)) AS f (field, len)
WHERE c.body_len >= 0
GROUP BY c.tenant_id, f.field;
DROP TABLE knowledge_pg_terms;
"""

MIGRATIONS = [
    PgMigration(name="knowledge_pg_001_initial", sql=_INITIAL),
    PgMigration(name="knowledge_pg_002_outbox", sql=_OUTBOX),
    PgMigration(name="knowledge_pg_003_unanalysed", sql=_UNANALYSED),
    PgMigration(name="knowledge_pg_004_tenant_statistics", sql=_TENANT_STATISTICS),
]
