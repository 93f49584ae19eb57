"""PostgreSQL connections and versioned migrations (``pip install 'shelfhand[pg]'``).

The PostgreSQL counterpart of :mod:`shelfhand.core.db`: every component that keeps its records
in PostgreSQL (the knowledge store, sessions, audit, jobs) opens a pool with :func:`open_pool`
and evolves its schema with a list of :class:`PgMigration`. Applied migrations are recorded by
name in ``shelfhand_migrations``; :func:`apply_pg_migrations` holds an advisory lock while it
runs, so two replicas starting at once apply each migration exactly once.

::

    pool = open_pool(settings.database_url)
    with pool.connection() as conn:
        apply_pg_migrations(conn, [PgMigration(name="sessions_001_initial", sql="CREATE ...")])

Errors name the host and database, never the password (:func:`redact_url`).
"""

from __future__ import annotations

import logging
import select
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelfhand.backends.pg_deadline import hung_up_after
from shelfhand.backends.urls import first_line, redact_url
from shelfhand.core.errors import (
    ConfigurationError,
    DependencyUnavailableError,
    InvalidArgumentError,
)
from shelfhand.core.sql import POSTGRES

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

__all__ = [
    "IDLE_CHECK_S",
    "IdleCheck",
    "PgMigration",
    "applied_pg_migrations",
    "apply_pg_migrations",
    "check_postgres",
    "open_pool",
    "pg_errors",
    "redact_url",
    "refuses_writes",
]

_LOCK_KEY = 0x5348454C  # "SHEL": the advisory lock migrations hold

IDLE_CHECK_S = 2.0
"""A pooled connection idle for longer than this many seconds is checked (one round trip to
the server) before the pool hands it out; one handed out more recently is handed out as it is."""


class IdleCheck:
    """The pool's check of a connection before it is handed out: a round trip
    (``ConnectionPool.check_connection``) only for a connection not handed out in the last
    ``idle_s`` seconds, one the driver already knows is broken, or one the server sent
    something to while it was idle (:func:`_server_spoke`: a restart or a terminated backend
    closes it so, with a message and end of file).

    A check per checkout cost a round trip each time (0.2 ms at a load of 5 on the
    benchmark machine, three times a ``SELECT 1``; a search checks out several). A
    connection in use seconds ago is as good as checked, unless the server closed it since
    (a restart, a terminated backend: what it sent is waiting on the socket, which a poll
    sees without a round trip); a server that went away without a word shows on the next
    statement as it would right after a check (the caller answers 503, and the broken
    connection is dropped when it comes back to the pool). A connection left idle longer
    (behind a proxy's idle timeout, a network that lost the server) is checked, and a dead
    one is replaced by the pool before anyone sees it.

    The time counts from when the connection was last handed out (the pool's ``reset``
    callback would tell when it came back, but with one the pool returns every connection
    through its worker thread). A check that gets no answer within ``deadline`` seconds
    (a server that stopped answering) hangs up the connection: the pool drops it and tries
    the next or a new one, within its own timeout (see :mod:`.pg_deadline`)."""

    def __init__(self, idle_s: float = IDLE_CHECK_S, *, deadline: float = 5.0) -> None:
        self.idle_s = idle_s
        self.deadline = deadline
        self._handed: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        """Raise when the connection does not work (what the pool's ``check`` does)."""
        from psycopg.pq import ConnStatus
        from psycopg_pool import ConnectionPool

        now = time.monotonic()
        handed = self._handed.get(conn)
        if (
            handed is None
            or now - handed >= self.idle_s
            or conn.pgconn.status != ConnStatus.OK
            or _server_spoke(conn)
        ):
            with hung_up_after(conn, self.deadline):
                ConnectionPool.check_connection(conn)
        self._handed[conn] = now


def _server_spoke(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection's socket has something to read (no round trip: a poll of
    it). A connection between statements has nothing to read unless the server sent it
    something unasked: mostly that it is closing it (shut down, restarted, the backend
    terminated), else a notice or notification; either way it is checked before use."""
    try:
        fd = conn.pgconn.socket
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - Windows
    except Exception:  # closed, or no socket: broken
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class PgMigration:
    """One named schema change: a SQL script run in one transaction."""

    name: str
    sql: str


def pg_migrations(names: Mapping[str, str], *steps: tuple[str, str]) -> list[PgMigration]:
    """The PostgreSQL migrations of schema templates written for both databases
    (:mod:`shelfhand.core.sql`): each ``(name, template)`` with its tables named by
    ``names``."""
    return [PgMigration(name=name, sql=POSTGRES.ddl(template, **names)) for name, template in steps]


def _driver() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "PostgreSQL support is not installed: pip install 'shelfhand[pg]'"
        ) from exc
    return psycopg


def connect(url: str, *, timeout: float = 5.0) -> psycopg.Connection[Any]:
    """One autocommit connection; a clear :class:`ConfigurationError` if it cannot be made."""
    driver = _driver()
    try:
        conn: psycopg.Connection[Any] = driver.connect(
            url, autocommit=True, connect_timeout=max(1, int(timeout))
        )
    except driver.Error as exc:
        raise ConfigurationError(
            f"PostgreSQL at {redact_url(url)} is unreachable: {first_line(exc)}"
        ) from exc
    return conn


def open_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 8,
    timeout: float = 5.0,
    migrations: Sequence[PgMigration] = (),
    idle_check_s: float = IDLE_CHECK_S,
) -> ConnectionPool[Any]:
    """A connection pool (autocommit connections), opened and checked: fails fast with
    :class:`ConfigurationError` when the server cannot be reached. ``migrations`` are applied
    (:func:`apply_pg_migrations`) before it is returned; the pool is closed if that fails.
    A connection idle longer than ``idle_check_s`` is checked before it is handed out
    (:class:`IdleCheck`; 0 checks every one). The pool reconnects without back-off once the
    server is back (:class:`~shelfhand.backends.pg_pool.RecoveringPool`)."""
    _driver()
    try:
        from psycopg_pool import PoolTimeout

        from shelfhand.backends.pg_pool import RecoveringPool
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "PostgreSQL support is not installed: pip install 'shelfhand[pg]'"
        ) from exc
    pool = RecoveringPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
        timeout=timeout,
        open=False,
        check=IdleCheck(idle_check_s, deadline=timeout),
        name="shelfhand",
    )
    try:
        # not open(wait=True): the pool gives a failed connection up after one retry, and
        # waiting for one retries every RETRY_S (a server still starting is waited for)
        pool.open()
        pool.wait_connected(timeout)
    except PoolTimeout as exc:
        pool.close()
        raise ConfigurationError(
            f"PostgreSQL at {redact_url(url)} is unreachable (no connection within {timeout:g} s)"
        ) from exc
    if migrations:
        try:
            with pool.connection() as conn:
                apply_pg_migrations(conn, migrations)
        except BaseException:
            pool.close()
            raise
    return pool


def check_postgres(url: str, *, need_vector: bool = False, timeout: float = 5.0) -> str:
    """Connect once and return the server version; with ``need_vector``, also require the
    pgvector extension (created if it is available but not yet created).

    Raises:
        ConfigurationError: unreachable, or pgvector missing, with what to do about it.
    """
    with connect(url, timeout=timeout) as conn:
        version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        if need_vector:
            available = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
            if available is None:
                raise ConfigurationError(
                    f"PostgreSQL {version} at {redact_url(url)} has no pgvector extension: "
                    "install pgvector (https://github.com/pgvector/pgvector) on the server"
                )
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return version


def applied_pg_migrations(conn: psycopg.Connection[Any]) -> list[str]:
    """Names of the migrations applied to this database, oldest first."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS shelfhand_migrations ("
        " name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    )
    rows = conn.execute("SELECT name FROM shelfhand_migrations ORDER BY applied_at, name")
    return [str(r[0]) for r in rows.fetchall()]


def apply_pg_migrations(conn: psycopg.Connection[Any], migrations: Sequence[PgMigration]) -> int:
    """Apply the migrations not yet recorded, in one transaction under an advisory lock
    (several processes may call this at once; a failing migration leaves the database as it
    was and names itself). Returns how many were applied."""
    names = [m.name for m in migrations]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"duplicate migration names in {names}")
    applied = 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        done = set(applied_pg_migrations(conn))
        for migration in migrations:
            if migration.name in done:
                continue
            with conn.transaction():  # a savepoint: one failing migration names itself
                try:
                    conn.execute(migration.sql.encode())
                except Exception as exc:
                    raise ConfigurationError(
                        f"PostgreSQL migration {migration.name} failed: {first_line(exc)}"
                    ) from exc
                conn.execute(
                    "INSERT INTO shelfhand_migrations (name) VALUES (%s)", (migration.name,)
                )
            logger.info("applied PostgreSQL migration %s", migration.name)
            applied += 1
    return applied


def refuses_writes(url: str, exc: BaseException) -> DependencyUnavailableError:
    """The error for a server that takes no writes (``ReadOnlySqlTransaction``: a standby a
    failover left the URL pointing at, or ``default_transaction_read_only``)."""
    return DependencyUnavailableError(
        f"PostgreSQL at {redact_url(url)} takes no writes: {first_line(exc)} (a standby, or "
        "default_transaction_read_only); try again shortly",
        dependency="postgresql",
    )


@contextmanager
def pg_errors(url: str) -> Iterator[None]:
    """Raise :class:`DependencyUnavailableError` (``postgresql``) when the server cannot be
    reached in the block (a lost connection, no connection from the pool in time), or takes
    no writes (:func:`refuses_writes`)."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise DependencyUnavailableError(
            f"PostgreSQL at {redact_url(url)} is unreachable: {first_line(exc)}; try again shortly",
            dependency="postgresql",
        ) from exc
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        raise refuses_writes(url, exc) from exc
