"""Sessions and long-term user memory in PostgreSQL, shared by several service replicas.

The same protocols and semantics as the SQLite stores (:class:`~shelfhand.sessions.store.
SqliteSessionStore`, :class:`~shelfhand.sessions.user_memory.SqliteUserMemoryStore`): every
read and write names the owner, a session of someone else looks missing, a finished turn is
appended in one transaction. Tables are their own (``pg_sessions``, ``pg_session_messages``,
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

import json
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shelfhand.backends.postgres import PgMigration, apply_pg_migrations, pg_errors
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.sessions.store import MemoryWindow, SessionInfo, _info, _title_from
from shelfhand.sessions.user_memory import MAX_MEMORIES_PER_USER, MemoryItem, clean_memory

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["MEMORY_PG_MIGRATIONS", "SESSIONS_PG_MIGRATIONS", "PgSessionStore", "PgUserMemoryStore"]

SESSIONS_PG_MIGRATIONS = [
    PgMigration(
        name="sessions_pg_001_initial",
        sql="""
CREATE TABLE pg_sessions (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    state TEXT NOT NULL DEFAULT 'idle',
    last_trace_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT '',
    summary TEXT NOT NULL DEFAULT '',
    window_from INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    created_seq BIGSERIAL
);
CREATE INDEX pg_sessions_owner ON pg_sessions (tenant_id, user_id, updated_at);
CREATE TABLE pg_session_messages (
    session_id TEXT NOT NULL REFERENCES pg_sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    trace_id TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
""",
    ),
]

MEMORY_PG_MIGRATIONS = [
    PgMigration(
        name="memory_pg_001_initial",
        sql="""
CREATE TABLE pg_user_memories (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    seq BIGSERIAL,
    UNIQUE (tenant_id, user_id, content)
);
CREATE INDEX pg_user_memories_owner ON pg_user_memories (tenant_id, user_id, created_at);
""",
    ),
]

_COLUMNS = (
    "id, tenant_id, user_id, title, created_at, updated_at, state, message_count,"
    " last_trace_id, last_error"
)


class _PgStore:
    def __init__(
        self, pool: ConnectionPool[Any], *, url: str, migrations: Sequence[PgMigration]
    ) -> None:
        self.pool = pool
        self.url = url
        with pg_errors(url), pool.connection() as conn:
            apply_pg_migrations(conn, migrations)

    def close(self) -> None:
        """Nothing to close: the pool belongs to whoever opened it."""

    def check(self) -> None:
        """Raise if the database cannot be read (for readiness probes)."""
        with pg_errors(self.url), self.pool.connection() as conn:
            conn.execute("SELECT 1").fetchone()


class PgSessionStore(_PgStore):
    """Sessions in PostgreSQL (see the module docstring).

    Args:
        pool: An open connection pool (:func:`shelfhand.backends.postgres.open_pool`).
        url: The database URL (named, without password, in errors).
    """

    def __init__(self, pool: ConnectionPool[Any], *, url: str) -> None:
        super().__init__(pool, url=url, migrations=SESSIONS_PG_MIGRATIONS)

    def create(self, owner: UserContext, *, title: str = "") -> SessionInfo:
        now = time.time()
        info = SessionInfo(
            id=uuid.uuid4().hex,
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            title=title.strip()[:200],
            created_at=now,
            updated_at=now,
            state="idle",
            message_count=0,
        )
        with pg_errors(self.url), self.pool.connection() as conn:
            conn.execute(
                "INSERT INTO pg_sessions (id, tenant_id, user_id, title, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (info.id, info.tenant_id, info.user_id, info.title, now, now),
            )
        return info

    def get(self, session_id: str, owner: UserContext) -> SessionInfo | None:
        with pg_errors(self.url), self.pool.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM pg_sessions WHERE id=%s AND tenant_id=%s AND user_id=%s",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
        return None if row is None else _info(row)

    def list_sessions(self, owner: UserContext, *, limit: int = 50) -> list[SessionInfo]:
        with pg_errors(self.url), self.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM pg_sessions WHERE tenant_id=%s AND user_id=%s"
                " ORDER BY updated_at DESC, created_seq DESC LIMIT %s",
                (owner.tenant_id, owner.user_id, max(1, limit)),
            ).fetchall()
        return [_info(r) for r in rows]

    def delete(self, session_id: str, owner: UserContext) -> bool:
        with pg_errors(self.url), self.pool.connection() as conn:
            cur = conn.execute(
                "DELETE FROM pg_sessions WHERE id=%s AND tenant_id=%s AND user_id=%s",
                (session_id, owner.tenant_id, owner.user_id),
            )
        return bool(cur.rowcount > 0)

    def messages(self, session_id: str, owner: UserContext) -> list[Message] | None:
        with pg_errors(self.url), self.pool.connection() as conn:
            owned = conn.execute(
                "SELECT 1 FROM pg_sessions WHERE id=%s AND tenant_id=%s AND user_id=%s",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if owned is None:
                return None
            rows = conn.execute(
                "SELECT body FROM pg_session_messages WHERE session_id=%s ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [Message.from_dict(json.loads(r[0])) for r in rows]

    def window(self, session_id: str, owner: UserContext) -> MemoryWindow | None:
        with pg_errors(self.url), self.pool.connection() as conn:
            row = conn.execute(
                "SELECT summary, window_from FROM pg_sessions WHERE id=%s AND tenant_id=%s"
                " AND user_id=%s",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            rows = conn.execute(
                "SELECT body FROM pg_session_messages WHERE session_id=%s AND seq>=%s ORDER BY seq",
                (session_id, row[1]),
            ).fetchall()
        return MemoryWindow(
            messages=tuple(Message.from_dict(json.loads(r[0])) for r in rows),
            summary=str(row[0]),
        )

    def record_turn(
        self,
        session_id: str,
        owner: UserContext,
        new_messages: Sequence[Message],
        *,
        window: Sequence[Message],
        summary: str,
        trace_id: str,
    ) -> SessionInfo | None:
        """Append a finished turn and the memory state after it, in one transaction (the
        session row is locked, so turns recorded by two replicas never interleave)."""
        now = time.time()
        with pg_errors(self.url), self.pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT message_count, title FROM pg_sessions WHERE id=%s AND tenant_id=%s"
                " AND user_id=%s FOR UPDATE",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            start = int(row[0])
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO pg_session_messages"
                    " (session_id, seq, message_id, role, trace_id, body)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    [
                        (session_id, start + i, m.id, m.role, trace_id, m.to_json())
                        for i, m in enumerate(new_messages)
                    ],
                )
            count = start + len(new_messages)
            window_from = count
            if window:
                first = conn.execute(
                    "SELECT seq FROM pg_session_messages WHERE session_id=%s AND message_id=%s"
                    " ORDER BY seq LIMIT 1",
                    (session_id, window[0].id),
                ).fetchone()
                window_from = int(first[0]) if first is not None else count - len(window)
            title = str(row[1]) or _title_from(new_messages)
            updated = conn.execute(
                "UPDATE pg_sessions SET message_count=%s, window_from=%s, summary=%s, title=%s,"
                " updated_at=%s, state='idle', last_trace_id=%s, last_error='' WHERE id=%s"
                f" RETURNING {_COLUMNS}",
                (count, window_from, summary, title, now, trace_id, session_id),
            ).fetchone()
        assert updated is not None
        return _info(updated)

    def record_failure(
        self, session_id: str, owner: UserContext, *, trace_id: str, error: str
    ) -> None:
        with pg_errors(self.url), self.pool.connection() as conn:
            conn.execute(
                "UPDATE pg_sessions SET state='failed', last_trace_id=%s, last_error=%s,"
                " updated_at=%s WHERE id=%s AND tenant_id=%s AND user_id=%s",
                (trace_id, error[:500], time.time(), session_id, owner.tenant_id, owner.user_id),
            )


class PgUserMemoryStore(_PgStore):
    """Long-term memories keyed by (tenant, user) in PostgreSQL.

    Args:
        pool: An open connection pool.
        url: The database URL (named, without password, in errors).
        max_per_user: The most memories kept per user (oldest dropped first).
    """

    def __init__(
        self, pool: ConnectionPool[Any], *, url: str, max_per_user: int = MAX_MEMORIES_PER_USER
    ) -> None:
        super().__init__(pool, url=url, migrations=MEMORY_PG_MIGRATIONS)
        self.max_per_user = max(1, max_per_user)

    def remember(self, user: UserContext, content: str) -> MemoryItem:
        text = clean_memory(content)
        key = (user.tenant_id, user.user_id)
        item = MemoryItem(id=uuid.uuid4().hex, content=text, created_at=time.time())
        with pg_errors(self.url), self.pool.connection() as conn, conn.transaction():
            inserted = conn.execute(
                "INSERT INTO pg_user_memories (id, tenant_id, user_id, content, created_at)"
                " VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (tenant_id, user_id, content) DO NOTHING RETURNING id",
                (item.id, *key, item.content, item.created_at),
            ).fetchone()
            if inserted is None:  # saved before: the existing item
                row = conn.execute(
                    "SELECT id, content, created_at FROM pg_user_memories"
                    " WHERE tenant_id=%s AND user_id=%s AND content=%s",
                    (*key, text),
                ).fetchone()
                assert row is not None
                return MemoryItem(id=row[0], content=row[1], created_at=row[2])
            conn.execute(
                "DELETE FROM pg_user_memories WHERE tenant_id=%s AND user_id=%s AND id NOT IN"
                " (SELECT id FROM pg_user_memories WHERE tenant_id=%s AND user_id=%s"
                "  ORDER BY created_at DESC, seq DESC LIMIT %s)",
                (*key, *key, self.max_per_user),
            )
        return item

    def recall(self, user: UserContext, *, limit: int = 50) -> list[MemoryItem]:
        with pg_errors(self.url), self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, content, created_at FROM (SELECT id, content, created_at, seq"
                " FROM pg_user_memories WHERE tenant_id=%s AND user_id=%s"
                " ORDER BY created_at DESC, seq DESC LIMIT %s) AS recent"
                " ORDER BY created_at, seq",
                (user.tenant_id, user.user_id, max(1, limit)),
            ).fetchall()
        return [MemoryItem(id=r[0], content=r[1], created_at=r[2]) for r in rows]

    def forget(self, user: UserContext, memory_id: str) -> bool:
        with pg_errors(self.url), self.pool.connection() as conn:
            cur = conn.execute(
                "DELETE FROM pg_user_memories WHERE id=%s AND tenant_id=%s AND user_id=%s",
                (memory_id, user.tenant_id, user.user_id),
            )
        return bool(cur.rowcount > 0)
