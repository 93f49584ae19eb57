"""The knowledge store's connection pool: outages become :class:`DependencyUnavailableError`.

Every query of the PostgreSQL store runs through :meth:`PgDatabase.connection` (or
:meth:`~PgDatabase.transaction`). A server that cannot be reached (refused, dropped
connection, no pooled connection within the pool timeout) raises
:class:`~shelfhand.core.errors.DependencyUnavailableError` naming PostgreSQL and the reason; the
service answers 503 and the next request tries again (the pool reconnects by itself). Nothing
is ever answered from a local copy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S, deadline
from shelfhand.backends.postgres import apply_pg_migrations, open_pool, refuses_writes
from shelfhand.backends.urls import redact_url
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.knowledge.types import Scope

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

__all__ = ["PgDatabase", "acl_sql"]


class PgDatabase:
    """A connection pool on ``url`` with the knowledge schema migrated and pgvector loaded.

    Args:
        url: ``postgresql://...``.
        min_size, max_size: Pool bounds.
        timeout: Seconds to wait for a connection (at open, and from the pool) before the
            database counts as unreachable.
        read_deadline: Seconds a read on the request path (a search, a lookup) may wait for
            the server (see :mod:`shelfhand.backends.pg_deadline`); ``None``: no deadline.

    Raises:
        ConfigurationError: The server cannot be reached at open, or a migration fails.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 5.0,
        read_deadline: float | None = QUERY_DEADLINE_S,
    ) -> None:
        from shelfhand.knowledge.stores.pg.migrations import MIGRATIONS

        self.url = url
        self.read_deadline = read_deadline
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self.pool: ConnectionPool[Any] = open_pool(
            url, min_size=min_size, max_size=max_size, timeout=timeout
        )
        self._broken = False
        self._swap = threading.Lock()
        self._vector_info: Any = None
        try:
            with self.pool.connection() as conn:
                apply_pg_migrations(conn, MIGRATIONS)
                from psycopg.types import TypeInfo

                self._vector_info = TypeInfo.fetch(conn, "vector")
        except BaseException:
            self.pool.close()
            raise

    def close(self) -> None:
        self.pool.close()

    def _unavailable(self, exc: BaseException) -> DependencyUnavailableError:
        text = str(exc).strip().splitlines()
        reason = text[0] if text else type(exc).__name__
        return DependencyUnavailableError(
            f"PostgreSQL at {redact_url(self.url)} is unavailable: {reason}",
            dependency="postgresql",
        )

    def _recover(self) -> None:
        """After an outage: probe the server once (a refused connection fails at once, so a
        request during the outage is answered quickly) and, when it answers, swap in a fresh
        pool. The old pool would only retry on its growing back-off schedule."""
        import psycopg

        with self._swap:
            if not self._broken:
                return
            try:
                psycopg.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self._timeout))
                ).close()
                fresh = open_pool(
                    self.url,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    timeout=self._timeout,
                )
            except (psycopg.Error, ConfigurationError) as exc:
                raise self._unavailable(exc) from exc
            old, self.pool = self.pool, fresh
            self._broken = False
            logger.info("PostgreSQL at %s is back", redact_url(self.url))
        old.close(timeout=0)

    @contextmanager
    def connection(self, *, read: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection with the ``vector`` type registered; ``read``: a
        read on the request path, hung up after :attr:`read_deadline` seconds without an
        answer (see :mod:`shelfhand.backends.pg_deadline`)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        if self._broken:
            self._recover()
        try:
            with self.pool.connection() as conn:
                if conn.adapters.types.get("vector") is None:
                    from pgvector.psycopg.vector import register_vector_info

                    register_vector_info(conn, self._vector_info)
                with deadline(conn, self.read_deadline if read else None, self.url):
                    yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            self._broken = True
            raise self._unavailable(exc) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:  # it answers: the pool is fine
            raise refuses_writes(self.url, exc) from exc
        except DependencyUnavailableError as exc:
            if exc.dependency == "postgresql":  # no answer in time: probed before the next
                self._broken = True
            raise

    @contextmanager
    def transaction(self, *, read: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction (committed at the end of the block); ``read``
        as for :meth:`connection`."""
        with self.connection(read=read) as conn, conn.transaction():
            yield conn


def acl_sql(
    alias: str, scope: Scope, *, tags_column: str = "permission_tags"
) -> tuple[str, list[Any]]:
    """What ``scope`` may read as a SQL condition on ``alias`` (and its parameters); see
    :class:`~shelfhand.knowledge.types.Scope` for the rule."""
    sql = f"{alias}.tenant_id = %s"
    params: list[Any] = [scope.tenant_id]
    if not scope.privileged:
        sql += f" AND (cardinality({alias}.{tags_column}) = 0"
        if scope.roles:
            sql += f" OR {alias}.{tags_column} && %s::text[]"
            params.append(sorted(scope.roles))
        sql += ")"
    if scope.doc_types is not None:
        sql += f" AND {alias}.doc_type = ANY(%s::text[])"
        params.append(list(scope.doc_types))
    if scope.sources is not None:
        sql += f" AND {alias}.source = ANY(%s::text[])"
        params.append(list(scope.sources))
    return sql, params
