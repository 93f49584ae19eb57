"""Long-term memory per user: facts and preferences the agent chose to keep (docs/design.md P1, K5).

The model saves a memory through the ``remember`` tool (``shelfhand.agent.remember``); the
caller's identity comes from the injected :class:`UserContext`, never from an argument, so a
memory always lands with the user who was talking and can never be read in another tenant.
:func:`format_memories` renders them for the "Memory" section of the system prompt, apart from
knowledge and from the conversation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements

__all__ = [
    "MAX_MEMORY_CHARS",
    "MEMORY_SCHEMA",
    "MemoryItem",
    "SqlUserMemoryStore",
    "SqliteUserMemoryStore",
    "UserMemoryStore",
    "format_memories",
]

MAX_MEMORY_CHARS = 500
"""The longest memory the tool accepts (a fact, not a document)."""
MAX_MEMORIES_PER_USER = 200
"""Beyond this, the oldest memories of a user are dropped."""

MEMORY_SCHEMA = """
CREATE TABLE {memories} (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at {real} NOT NULL{order_column},
    UNIQUE (tenant_id, user_id, content)
);
CREATE INDEX {memories}_owner ON {memories} (tenant_id, user_id, created_at);
"""
"""The memories' table, for either database (see :func:`memory_names`)."""


def memory_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    """The names the statements use: the table (``prefix`` before it) and the column that
    orders memories saved in the same instant."""
    return {
        "memories": f"{prefix}user_memories",
        "order": dialect.insertion_order("seq"),
        "order_column": dialect.insertion_column("seq"),
    }


MIGRATIONS = [
    Migration(
        name="user_memory_001_initial", sql=SQLITE.ddl(MEMORY_SCHEMA, **memory_names(SQLITE))
    ),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryItem:
    id: str
    content: str
    created_at: float


class UserMemoryStore(Protocol):
    """Where long-term memories live: SQLite here, PostgreSQL
    (:mod:`shelfhand.sessions.pg`) when several replicas run."""

    def remember(self, user: UserContext, content: str) -> MemoryItem: ...

    def recall(self, user: UserContext, *, limit: int = 50) -> list[MemoryItem]: ...

    def forget(self, user: UserContext, memory_id: str) -> bool: ...

    def close(self) -> None: ...


def clean_memory(content: str) -> str:
    """``content`` with its whitespace folded, checked against the limits.

    Raises:
        InvalidArgumentError: empty or longer than :data:`MAX_MEMORY_CHARS` (a ValueError).
    """
    text = " ".join(content.split())
    if not text:
        raise InvalidArgumentError("a memory needs some text")
    if len(text) > MAX_MEMORY_CHARS:
        raise InvalidArgumentError(f"a memory is at most {MAX_MEMORY_CHARS} characters; shorten it")
    return text


class SqlUserMemoryStore:
    """Memories keyed by (tenant, user) in a SQL :class:`~shelfhand.core.sql.Database`: every
    statement written once, for SQLite (:class:`SqliteUserMemoryStore`) and PostgreSQL
    (:class:`~shelfhand.sessions.pg.PgUserMemoryStore`).

    Args:
        database: Where the table is (created by the caller's migrations).
        max_per_user: The most memories kept per user (oldest dropped first).
        prefix: Before the table's name (``pg_`` in PostgreSQL).
    """

    def __init__(
        self, database: Database, *, max_per_user: int = MAX_MEMORIES_PER_USER, prefix: str = ""
    ) -> None:
        self.database = database
        self.max_per_user = max(1, max_per_user)
        self._sql = Statements(database.dialect, **memory_names(database.dialect, prefix=prefix))

    def close(self) -> None:
        self.database.close()

    def remember(self, user: UserContext, content: str) -> MemoryItem:
        """Keep ``content`` for ``user``; saving the same text again returns the existing item.

        Raises:
            InvalidArgumentError: ``content`` is empty or longer than
                :data:`MAX_MEMORY_CHARS` (a ValueError).
        """
        text = clean_memory(content)
        key = (user.tenant_id, user.user_id)
        item = MemoryItem(id=uuid.uuid4().hex, content=text, created_at=time.time())
        with self.database.transaction() as conn:
            inserted = conn.execute(
                self._sql(
                    "INSERT INTO {memories} (id, tenant_id, user_id, content, created_at)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (tenant_id, user_id, content) DO NOTHING RETURNING id"
                ),
                (item.id, *key, item.content, item.created_at),
            ).fetchone()
            if inserted is None:  # saved before: the existing item
                row = conn.execute(
                    self._sql(
                        "SELECT id, content, created_at FROM {memories}"
                        " WHERE tenant_id=? AND user_id=? AND content=?"
                    ),
                    (*key, text),
                ).fetchone()
                return MemoryItem(id=row[0], content=row[1], created_at=row[2])
            conn.execute(
                self._sql(
                    "DELETE FROM {memories} WHERE tenant_id=? AND user_id=? AND id NOT IN"
                    " (SELECT id FROM {memories} WHERE tenant_id=? AND user_id=?"
                    "  ORDER BY created_at DESC, {order} DESC LIMIT ?)"
                ),
                (*key, *key, self.max_per_user),
            )
        return item

    def recall(self, user: UserContext, *, limit: int = 50) -> list[MemoryItem]:
        """``user``'s memories, oldest first (the order they were learnt)."""
        with self.database.connection() as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT id, content, created_at FROM (SELECT id, content, created_at,"
                    " {order} AS learnt FROM {memories} WHERE tenant_id=? AND user_id=?"
                    " ORDER BY created_at DESC, {order} DESC LIMIT ?) AS recent"
                    " ORDER BY created_at, learnt"
                ),
                (user.tenant_id, user.user_id, max(1, limit)),
            ).fetchall()
        return [MemoryItem(id=r[0], content=r[1], created_at=r[2]) for r in rows]

    def forget(self, user: UserContext, memory_id: str) -> bool:
        """Delete one of ``user``'s memories; ``False`` if they have no such memory."""
        with self.database.connection() as conn:
            cur = conn.execute(
                self._sql("DELETE FROM {memories} WHERE id=? AND tenant_id=? AND user_id=?"),
                (memory_id, user.tenant_id, user.user_id),
            )
        return cur.rowcount > 0


class SqliteUserMemoryStore(SqlUserMemoryStore):
    """Memories keyed by (tenant, user), in a SQLite file (usually ``sessions.db``).

    Args:
        path: The database file.
        max_per_user: The most memories kept per user (oldest dropped first).
    """

    def __init__(self, path: Path | str, *, max_per_user: int = MAX_MEMORIES_PER_USER) -> None:
        self.path = Path(path)
        super().__init__(SqliteDatabase(self.path, MIGRATIONS), max_per_user=max_per_user)


def format_memories(items: Sequence[MemoryItem]) -> str:
    """The memories as the model reads them in its "Memory" section (one fact per line)."""
    return "\n".join(f"- {m.content}" for m in items)
