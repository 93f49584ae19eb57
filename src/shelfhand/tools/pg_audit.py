"""The audit log in PostgreSQL (``database_url``): one table for every replica.

:class:`PgAuditLog` is :class:`~shelfhand.tools.audit.AuditLog` with its rows in the table
``audit_pg_log`` (migrations ``audit_pg_*`` through :mod:`shelfhand.backends.postgres`): the same
schema, statements, batching off the calling path, redaction, hashing and queries, rendered for
PostgreSQL (:mod:`shelfhand.core.sql`). Records of all replicas land in one table, so
``shelfhand audit`` and the query API see every call.

A batch that cannot be written (PostgreSQL away) is logged and lost, as a failed SQLite
write is; the calls themselves are not held up.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.backends.postgres import PgMigration
from shelfhand.backends.urls import redact_url
from shelfhand.core.sql import POSTGRES
from shelfhand.tools.audit import AuditLog, audit_schema

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["AUDIT_PG_MIGRATIONS", "PgAuditLog"]

_TABLE = "audit_pg_log"

AUDIT_PG_MIGRATIONS = [
    PgMigration(name="audit_pg_001_initial", sql=audit_schema(POSTGRES, _TABLE)),
]


class PgAuditLog(AuditLog):
    """Batched, append-only audit log in PostgreSQL (see the module docstring).

    Args:
        pool: An open connection pool (:func:`shelfhand.backends.postgres.open_pool`).
        url: The database URL (named, without password, in errors).
        batch_size: Buffered records that trigger a write.
        flush_interval: Seconds after which buffered records are written anyway.
        deadline: Seconds a write may wait for the server (see
            :mod:`shelfhand.backends.pg_deadline`): a batch that gets no answer is dropped,
            loudly, rather than holding the writer while records pile up in memory. Reads
            (an export of the whole log) run without one.
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        url: str,
        batch_size: int = 512,
        flush_interval: float = 0.5,
        deadline: float | None = QUERY_DEADLINE_S,
    ) -> None:
        self.pool = pool
        self.url = url
        self.path = Path(redact_url(url))  # named in log lines only
        database = PgDatabase(pool, url=url, migrations=AUDIT_PG_MIGRATIONS)
        writes = PgDatabase(pool, url=url, deadline=deadline)
        self._start(
            database, _TABLE, batch_size=batch_size, flush_interval=flush_interval, writes=writes
        )
