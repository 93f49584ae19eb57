"""Traces in PostgreSQL, shared by several service replicas (``pip install 'shelfhand[pg]'``).

The same statements as the SQLite store (:class:`~shelfhand.traces.store.SqlTraceStore`), in
the tables ``pg_traces`` and ``pg_trace_span_batches`` (and ``pg_trace_spans``, spans stored
one per row before the batches), created by the migration ``traces_pg_*``
through :mod:`shelfhand.backends.postgres` (several replicas starting at once apply it once).
"""

from __future__ import annotations

from typing import Any

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.backends.postgres import pg_migrations
from shelfhand.core.sql import POSTGRES
from shelfhand.traces.store import OUTCOME, SCHEMA, SPAN_BATCHES, SqlTraceStore, trace_names

__all__ = ["TRACES_PG_MIGRATIONS", "PgTraceStore"]

_PREFIX = "pg_"

TRACES_PG_MIGRATIONS = pg_migrations(
    trace_names(POSTGRES, prefix=_PREFIX),
    ("traces_pg_001_initial", SCHEMA),
    ("traces_pg_002_span_batches", SPAN_BATCHES),
    ("traces_pg_003_outcome", OUTCOME),
)


class PgTraceStore(SqlTraceStore):
    """Traces in PostgreSQL (see the module docstring).

    Args:
        pool: An open ``psycopg_pool.ConnectionPool``
            (:func:`shelfhand.backends.postgres.open_pool`).
        url: The database URL (named, without password, in errors).
        deadline: Seconds a read or a write may wait for the server (see
            :mod:`shelfhand.backends.pg_deadline`); the retention, which may delete many
            traces at once, runs without one.
    """

    def __init__(self, pool: Any, *, url: str, deadline: float | None = QUERY_DEADLINE_S) -> None:
        self.pool = pool
        self.url = url
        database = PgDatabase(pool, url=url, migrations=TRACES_PG_MIGRATIONS, deadline=deadline)
        super().__init__(database, prefix=_PREFIX)
        self._unbounded = PgDatabase(pool, url=url)

    def prune(self, *, max_traces: int | None = None, max_age_days: float | None = None) -> int:
        return self._prune(self._unbounded, max_traces=max_traces, max_age_days=max_age_days)
