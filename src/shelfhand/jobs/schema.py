"""The PostgreSQL schema of ingest jobs: procrastinate's queue tables and our job records.

Both are versioned migrations in ``shelfhand_migrations`` (:func:`shelfhand.backends.postgres.
apply_pg_migrations`, under its advisory lock), so two replicas or workers starting at once
create them exactly once. procrastinate's schema is the one its installed version ships
(``procrastinate/sql/schema.sql``); a later procrastinate that changes it ships migrations of
its own (``procrastinate/sql/migrations``), to be added here as further named migrations.
"""

from __future__ import annotations

from shelfhand.backends.postgres import PgMigration
from shelfhand.core.errors import ConfigurationError

__all__ = ["QUEUE_NAME", "TASK_NAME", "migrations"]

QUEUE_NAME = "shelfhand-ingest"
TASK_NAME = "shelfhand.ingest"

_RECORDS = """
CREATE TABLE shelfhand_ingest_jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    roles JSONB NOT NULL,
    permission_tags JSONB,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    files INTEGER NOT NULL,
    bytes BIGINT NOT NULL,
    sources JSONB NOT NULL,
    progress JSONB NOT NULL DEFAULT '{}'::jsonb,
    error TEXT,
    error_code TEXT,
    report JSONB,
    queue_job_id BIGINT,
    created_at DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION
);
CREATE INDEX shelfhand_ingest_jobs_tenant ON shelfhand_ingest_jobs (tenant_id, created_at);
CREATE TABLE shelfhand_ingest_job_files (
    job_id TEXT NOT NULL REFERENCES shelfhand_ingest_jobs (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    folder BOOLEAN NOT NULL DEFAULT false,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (job_id, position)
);
"""


def migrations() -> list[PgMigration]:
    """The migrations of the job queue (needs ``pip install 'shelfhand[worker]'``)."""
    try:
        from procrastinate.schema import SchemaManager
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "ingest workers need the task queue: pip install 'shelfhand[worker]' "
            "(database_url is set, so uploads and ingests go through the queue)"
        ) from exc
    return [
        PgMigration(name="jobs_001_procrastinate_schema", sql=SchemaManager.get_schema()),
        PgMigration(name="jobs_002_ingest_records", sql=_RECORDS),
        PgMigration(
            name="jobs_003_file_origin",
            sql="ALTER TABLE shelfhand_ingest_job_files ADD COLUMN origin TEXT",
        ),
    ]
