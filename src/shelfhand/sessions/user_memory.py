"""Long-term memory per user: facts and preferences the agent chose to keep (DESIGN P1, K5).

The model saves a memory through the ``remember`` tool (``shelfhand.agent.remember``); the
caller's identity comes from the injected :class:`UserContext`, never from an argument, so a
memory always lands with the user who was talking and can never be read in another tenant.
:func:`format_memories` renders them for the "Memory" section of the system prompt, apart from
knowledge and from the conversation.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, apply_migrations, connect, transaction

__all__ = [
    "MAX_MEMORY_CHARS",
    "MemoryItem",
    "SqliteUserMemoryStore",
    "UserMemoryStore",
    "format_memories",
]

MAX_MEMORY_CHARS = 500
"""The longest memory the tool accepts (a fact, not a document)."""
MAX_MEMORIES_PER_USER = 200
"""Beyond this, the oldest memories of a user are dropped."""

MIGRATIONS = [
    Migration(
        name="user_memory_001_initial",
        sql="""
CREATE TABLE user_memories (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (tenant_id, user_id, content)
);
CREATE INDEX user_memories_owner ON user_memories (tenant_id, user_id, created_at);
""",
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
        ValueError: empty or longer than :data:`MAX_MEMORY_CHARS`.
    """
    text = " ".join(content.split())
    if not text:
        raise ValueError("a memory needs some text")
    if len(text) > MAX_MEMORY_CHARS:
        raise ValueError(f"a memory is at most {MAX_MEMORY_CHARS} characters; shorten it")
    return text


class SqliteUserMemoryStore:
    """Memories keyed by (tenant, user), in a SQLite file (usually ``sessions.db``).

    Args:
        path: The database file.
        max_per_user: The most memories kept per user (oldest dropped first).
    """

    def __init__(self, path: Path | str, *, max_per_user: int = MAX_MEMORIES_PER_USER) -> None:
        self.path = Path(path)
        self.max_per_user = max(1, max_per_user)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection = connect(self.path)
        apply_migrations(self._conn, MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def remember(self, user: UserContext, content: str) -> MemoryItem:
        """Keep ``content`` for ``user``; saving the same text again returns the existing item.

        Raises:
            ValueError: ``content`` is empty or longer than :data:`MAX_MEMORY_CHARS`.
        """
        text = clean_memory(content)
        key = (user.tenant_id, user.user_id)
        with self._lock, transaction(self._conn):
            row = self._conn.execute(
                "SELECT id, content, created_at FROM user_memories"
                " WHERE tenant_id=? AND user_id=? AND content=?",
                (*key, text),
            ).fetchone()
            if row is not None:
                return MemoryItem(id=row[0], content=row[1], created_at=row[2])
            item = MemoryItem(id=uuid.uuid4().hex, content=text, created_at=time.time())
            self._conn.execute(
                "INSERT INTO user_memories (id, tenant_id, user_id, content, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (item.id, *key, item.content, item.created_at),
            )
            self._conn.execute(
                "DELETE FROM user_memories WHERE tenant_id=? AND user_id=? AND id NOT IN"
                " (SELECT id FROM user_memories WHERE tenant_id=? AND user_id=?"
                "  ORDER BY created_at DESC, rowid DESC LIMIT ?)",
                (*key, *key, self.max_per_user),
            )
        return item

    def recall(self, user: UserContext, *, limit: int = 50) -> list[MemoryItem]:
        """``user``'s memories, oldest first (the order they were learnt)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, content, created_at FROM (SELECT id, content, created_at, rowid"
                " FROM user_memories WHERE tenant_id=? AND user_id=?"
                " ORDER BY created_at DESC, rowid DESC LIMIT ?) ORDER BY created_at, rowid",
                (user.tenant_id, user.user_id, max(1, limit)),
            ).fetchall()
        return [MemoryItem(id=r[0], content=r[1], created_at=r[2]) for r in rows]

    def forget(self, user: UserContext, memory_id: str) -> bool:
        """Delete one of ``user``'s memories; ``False`` if they have no such memory."""
        with self._lock:
            cur = self._conn.execute(
                "DELETE FROM user_memories WHERE id=? AND tenant_id=? AND user_id=?",
                (memory_id, user.tenant_id, user.user_id),
            )
        return cur.rowcount > 0


def format_memories(items: Sequence[MemoryItem]) -> str:
    """The memories as the model reads them in its "Memory" section (one fact per line)."""
    return "\n".join(f"- {m.content}" for m in items)
