"""SQLite connections and named migrations (the simonw/llm way).

Every embedded store (knowledge, sessions, audit) opens its file with :func:`connect` and evolves
its schema with a list of :class:`Migration`. Applied migrations are recorded by name in a
``migrations`` table, so each runs exactly once per database file. Migration names must be unique
within a file; prefix them with the component (``knowledge_001_initial``) when several components
share one file.

::

    conn = connect(workspace / "knowledge.db")
    apply_migrations(conn, [Migration(name="knowledge_001_initial", sql="CREATE TABLE ...")])
    with transaction(conn):
        conn.execute("INSERT ...")

A store whose statements also run on PostgreSQL opens its file as a :class:`SqliteDatabase`
(a :class:`~shelfhand.core.sql.Database`; see :mod:`shelfhand.core.sql`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shelfhand.core.errors import (
    ConfigurationError,
    DependencyUnavailableError,
    InvalidArgumentError,
)
from shelfhand.core.sql import SQLITE, Dialect

logger = logging.getLogger(__name__)

__all__ = [
    "Migration",
    "SqliteDatabase",
    "applied_migrations",
    "apply_migrations",
    "connect",
    "transaction",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """One named schema change: a SQL script, or a function of the connection."""

    name: str
    sql: str | None = None
    run: Callable[[sqlite3.Connection], None] | None = None

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.run is None):
            raise InvalidArgumentError(f"migration {self.name!r} needs exactly one of sql= or run=")


def connect(
    path: Path | str, *, busy_timeout_ms: int = 5000, cache_kib: int | None = None
) -> sqlite3.Connection:
    """Open a SQLite file tuned for one writer and many readers.

    WAL journal, foreign keys on, a busy timeout and ``synchronous=NORMAL`` (durable at
    checkpoints, never corrupt). The connection is in autocommit mode: use :func:`transaction`
    for atomic groups of statements. It may be shared across threads if the caller serialises
    access (stores hold a lock).

    Args:
        path: The database file; its parent directory is created when missing.
        busy_timeout_ms: How long a statement waits for another connection's lock.
        cache_kib: The most page cache this connection keeps (SQLite's default: 2 MB).

    Raises:
        ConfigurationError: The file is not a SQLite database (damaged, or another file).
    """
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
    )
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        if isinstance(exc, sqlite3.OperationalError):  # (locked, read-only: not the file's fault)
            raise
        raise ConfigurationError(
            f"{path} is not a SQLite database ({exc}): it is damaged, or another file took its "
            "name; move it aside (shelfhand then starts a new one) or restore it from a backup"
        ) from exc
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA synchronous=NORMAL")
    if cache_kib is not None:
        conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Run the block in one ``BEGIN IMMEDIATE`` transaction; roll back on any exception.

    ``IMMEDIATE`` takes the write lock up front, so two writers never deadlock half-way. When
    another connection keeps it past the busy timeout, this raises
    :class:`~shelfhand.core.errors.DependencyUnavailableError` naming the file (the service
    answers 503, the CLI says so) instead of SQLite's bare "database is locked".
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        file = conn.execute("PRAGMA database_list").fetchone()[2] or ":memory:"
        waited = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        raise DependencyUnavailableError(
            f"the SQLite database {file} is locked by another connection (waited {waited} ms "
            "for its write lock): try again when that process has finished writing",
            dependency="sqlite",
        ) from exc
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteDatabase:
    """One SQLite file as a :class:`~shelfhand.core.sql.Database`: one connection, guarded by
    a lock, serves every thread (statements are short: a few rows, no fsync per commit).

    Args:
        path: The database file (created with its folder when missing).
        migrations: Applied when opening (see :func:`apply_migrations`).
    """

    dialect: Dialect = SQLITE

    def __init__(self, path: Path | str, migrations: Sequence[Migration] = ()) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = connect(self.path)
        apply_migrations(self._conn, migrations)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, for statements that commit one by one."""
        with self._lock:
            yield self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside one ``BEGIN IMMEDIATE`` transaction (see :func:`transaction`)."""
        with self._lock, transaction(self._conn):
            yield self._conn

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._conn.close()


def _ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations ( name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied to this database, oldest first."""
    _ensure_table(conn)
    rows = conn.execute("SELECT name FROM migrations ORDER BY applied_at, rowid").fetchall()
    return [str(r[0]) for r in rows]


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> list[str]:
    """Apply, in order, each migration not yet recorded; each in its own transaction.

    Returns:
        The names applied by this call (empty when the schema is current).
    """
    names = [m.name for m in migrations]
    if len(set(names)) != len(names):
        raise InvalidArgumentError("migration names must be unique")
    done = set(applied_migrations(conn))
    applied: list[str] = []
    for migration in migrations:
        if migration.name in done:
            continue
        with transaction(conn):
            if migration.sql is not None:
                # executescript would COMMIT our transaction; run statement by statement.
                for statement in _split_sql(migration.sql):
                    conn.execute(statement)
            elif migration.run is not None:
                migration.run(conn)
            conn.execute(
                "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, time.time()),
            )
        logger.debug("applied migration %s", migration.name)
        applied.append(migration.name)
    return applied


def _split_sql(script: str) -> list[str]:
    """Split a script into complete statements (handles ``;`` inside strings and triggers)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
