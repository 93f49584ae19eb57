"""Sessions and long-term user memory in PostgreSQL, shared by several service replicas.

The same stores as in SQLite, statement for statement (:class:`~shelfhand.sessions.store.
SqlSessionStore`, :class:`~shelfhand.sessions.user_memory.SqlUserMemoryStore`): every read and
write names the owner, a session of someone else looks missing, a finished turn is appended in
one transaction (with the session's row locked, so turns recorded by two replicas never
interleave). Tables are their own (``pg_sessions``, ``pg_session_messages``,
``pg_user_memories``), created by the migrations ``sessions_pg_*`` and ``memory_pg_*``
through :mod:`shelfhand.backends.postgres`, so several replicas starting at once apply them once.

A server that cannot be reached is :class:`~shelfhand.core.errors.DependencyUnavailableError`
(HTTP 503); the next call tries again.

::

    pool = open_pool(settings.database_url)
    sessions = PgSessionStore(pool, url=settings.database_url)
    memories = PgUserMemoryStore(pool, url=settings.database_url)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.backends.postgres import pg_migrations
from shelfhand.core.sql import POSTGRES
from shelfhand.sessions.store import SCHEMA, SqlSessionStore, session_names
from shelfhand.sessions.user_memory import (
    MAX_MEMORIES_PER_USER,
    MEMORY_SCHEMA,
    SqlUserMemoryStore,
    memory_names,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["MEMORY_PG_MIGRATIONS", "SESSIONS_PG_MIGRATIONS", "PgSessionStore", "PgUserMemoryStore"]

_PREFIX = "pg_"

SESSIONS_PG_MIGRATIONS = pg_migrations(
    session_names(POSTGRES, prefix=_PREFIX), ("sessions_pg_001_initial", SCHEMA)
)

MEMORY_PG_MIGRATIONS = pg_migrations(
    memory_names(POSTGRES, prefix=_PREFIX), ("memory_pg_001_initial", MEMORY_SCHEMA)
)


class PgSessionStore(SqlSessionStore):
    """Sessions in PostgreSQL (see the module docstring).

    Args:
        pool: An open connection pool (:func:`shelfhand.backends.postgres.open_pool`).
        url: The database URL (named, without password, in errors).
        deadline: Seconds a query may wait for the server (see
            :mod:`shelfhand.backends.pg_deadline`); ``None``: no deadline.
    """

    def __init__(
        self, pool: ConnectionPool[Any], *, url: str, deadline: float | None = QUERY_DEADLINE_S
    ) -> None:
        self.pool = pool
        self.url = url
        database = PgDatabase(pool, url=url, migrations=SESSIONS_PG_MIGRATIONS, deadline=deadline)
        super().__init__(database, prefix=_PREFIX)


class PgUserMemoryStore(SqlUserMemoryStore):
    """Long-term memories keyed by (tenant, user) in PostgreSQL.

    Args:
        pool: An open connection pool.
        url: The database URL (named, without password, in errors).
        max_per_user: The most memories kept per user (oldest dropped first).
        deadline: As for :class:`PgSessionStore`.
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        url: str,
        max_per_user: int = MAX_MEMORIES_PER_USER,
        deadline: float | None = QUERY_DEADLINE_S,
    ) -> None:
        self.pool = pool
        self.url = url
        database = PgDatabase(pool, url=url, migrations=MEMORY_PG_MIGRATIONS, deadline=deadline)
        super().__init__(database, max_per_user=max_per_user, prefix=_PREFIX)
