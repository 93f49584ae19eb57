"""A PostgreSQL pool as a :class:`~shelfhand.core.sql.Database` (``pip install 'shelfhand[pg]'``).

The stores that write their statements once for SQLite and PostgreSQL (see
:mod:`shelfhand.core.sql`) run them here on a pool's connections: one connection per block,
taken from the pool and given back, every error reaching the server a
:class:`~shelfhand.core.errors.DependencyUnavailableError` (HTTP 503) naming the server
without its password; the next block tries again.

::

    pool = open_pool(settings.database_url)
    database = PgDatabase(pool, url=settings.database_url, migrations=SESSIONS_PG_MIGRATIONS)
    with database.transaction() as conn:
        conn.execute(POSTGRES.render("UPDATE {sessions} SET ... WHERE id=?", ...), (...,))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shelfhand.backends.pg_deadline import deadline
from shelfhand.backends.postgres import PgMigration, apply_pg_migrations, pg_errors
from shelfhand.core.sql import POSTGRES, Dialect, SqlCursor

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PgDatabase"]


class PgDatabase:
    """A pool's connections as a :class:`~shelfhand.core.sql.Database`.

    Args:
        pool: An open connection pool (:func:`shelfhand.backends.postgres.open_pool`); it
            belongs to whoever opened it.
        url: The database URL (named, without password, in errors).
        migrations: Applied when this object is made (see
            :func:`~shelfhand.backends.postgres.apply_pg_migrations`).
        deadline: Seconds a block may wait for the server before its connection is hung up
            and the block fails with ``DependencyUnavailableError`` (see
            :mod:`shelfhand.backends.pg_deadline`); ``None``: no deadline (stores whose
            blocks may run long on purpose).
    """

    dialect: Dialect = POSTGRES

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        url: str,
        migrations: Sequence[PgMigration] = (),
        deadline: float | None = None,
    ) -> None:
        self.pool = pool
        self.url = url
        self.deadline = deadline
        if migrations:
            with pg_errors(url), pool.connection() as conn:
                apply_pg_migrations(conn, migrations)

    @contextmanager
    def connection(self) -> Iterator[_PgConnection]:
        """A pooled (autocommit) connection: each statement commits by itself."""
        with (
            pg_errors(self.url),
            self.pool.connection() as conn,
            deadline(conn, self.deadline, self.url),
        ):
            yield _PgConnection(conn)

    @contextmanager
    def transaction(self) -> Iterator[_PgConnection]:
        """A pooled connection inside one transaction."""
        with (
            pg_errors(self.url),
            self.pool.connection() as conn,
            deadline(conn, self.deadline, self.url),
            conn.transaction(),
        ):
            yield _PgConnection(conn)

    def close(self) -> None:
        """Nothing to close: the pool belongs to whoever opened it."""


class _PgConnection:
    """A psycopg connection with the DB-API ``executemany`` of a SQLite one."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> SqlCursor:
        # Always with parameters, even none: a rendered statement spells "%" as "%%".
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql, rows)
