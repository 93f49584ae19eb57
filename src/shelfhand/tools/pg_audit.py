"""The audit log in PostgreSQL (``database_url``): one table for every replica.

:class:`PgAuditLog` is :class:`~shelfhand.tools.audit.AuditLog` with its rows in the table
``audit_pg_log`` (migrations ``audit_pg_*`` through :mod:`shelfhand.backends.postgres`): the same
batching off the calling path, the same redaction, hashing and queries. Records of all
replicas land in one table, so ``shelfhand audit`` and the query API see every call.

A batch that cannot be written (PostgreSQL away) is logged and lost, as a failed SQLite
write is; the calls themselves are not held up.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelfhand.backends.postgres import PgMigration, apply_pg_migrations, pg_errors
from shelfhand.backends.urls import redact_url
from shelfhand.tools.audit import _INSERT, AuditLog

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["AUDIT_PG_MIGRATIONS", "PgAuditLog"]

logger = logging.getLogger(__name__)

AUDIT_PG_MIGRATIONS = [
    PgMigration(
        name="audit_pg_001_initial",
        sql="""
CREATE TABLE audit_pg_log (
    id BIGSERIAL PRIMARY KEY,
    ts DOUBLE PRECISION NOT NULL,
    tool TEXT NOT NULL,
    tenant TEXT NOT NULL,
    user_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    arguments TEXT NOT NULL,
    decision TEXT NOT NULL,
    outcome TEXT NOT NULL,
    error_class TEXT NOT NULL,
    duration_ms DOUBLE PRECISION NOT NULL,
    cache_hit INTEGER NOT NULL,
    dedup_hit INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    repairs TEXT NOT NULL DEFAULT '',
    parent_trace_id TEXT NOT NULL DEFAULT '',
    depth INTEGER NOT NULL DEFAULT 0,
    agent TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_pg_log_ts ON audit_pg_log (ts);
CREATE INDEX audit_pg_log_parent ON audit_pg_log (parent_trace_id);
""",
    ),
]

_TABLE = "audit_pg_log"


def _pg_sql(sql: str) -> str:
    """The SQLite statement for PostgreSQL: its table and ``%s`` placeholders."""
    return sql.replace("audit_log", _TABLE).replace("?", "%s")


_PG_INSERT = _pg_sql(_INSERT)


class PgAuditLog(AuditLog):
    """Batched, append-only audit log in PostgreSQL (see the module docstring).

    Args:
        pool: An open connection pool (:func:`shelfhand.backends.postgres.open_pool`).
        url: The database URL (named, without password, in errors).
        batch_size: Buffered records that trigger a write.
        flush_interval: Seconds after which buffered records are written anyway.
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        url: str,
        batch_size: int = 512,
        flush_interval: float = 0.5,
    ) -> None:
        self.pool = pool
        self.url = url
        self.path = Path(redact_url(url))  # named in log lines only
        with pg_errors(url), pool.connection() as conn:
            apply_pg_migrations(conn, AUDIT_PG_MIGRATIONS)
        self._start_buffer(batch_size=batch_size, flush_interval=flush_interval)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        # a failure propagates: the writer thread logs it (the batch is lost, loudly, as
        # with SQLite) and a query answers 503
        with (
            pg_errors(self.url),
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            cur.executemany(_PG_INSERT, [_pg_row(r) for r in rows])

    def _fetch(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        with pg_errors(self.url), self.pool.connection() as conn:
            return list(conn.execute(_pg_sql(sql), params).fetchall())

    def _close_store(self) -> None:
        """Nothing to close: the pool belongs to whoever opened it."""


def _pg_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # cache_hit and dedup_hit are stored as integers, as in SQLite
    return (*row[:13], int(row[13]), int(row[14]), *row[15:])
