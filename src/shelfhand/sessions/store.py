"""Conversation sessions persisted in SQLite or PostgreSQL (docs/design.md P1).

A session belongs to one caller (tenant + user) and holds its whole transcript, the
short-term memory window (which messages the model still sees verbatim, and the summary of
the older ones) and the outcome of its last run. Everything is in ``<workspace>/sessions.db``,
so a restarted service resumes every conversation where it stopped.

Every read and write names the owner: a session of another tenant or user is indistinguishable
from a missing one (``None`` / ``False``), so callers cannot probe for other people's ids.

Each statement is written once, for both databases (:class:`SqlSessionStore`, see
:mod:`shelfhand.core.sql`); :class:`SqliteSessionStore` and
:class:`~shelfhand.sessions.pg.PgSessionStore` only say where the tables are. In SQLite,
statements are short (a few rows, no fsync per commit in WAL mode), so the store is called
directly from the event loop; one connection, guarded by a lock, serves every thread.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.messages import Message
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements

__all__ = [
    "MIGRATIONS",
    "SCHEMA",
    "MemoryWindow",
    "RunState",
    "SessionInfo",
    "SessionStore",
    "SqlSessionStore",
    "SqliteSessionStore",
    "session_names",
]

RunState = Literal["idle", "failed"]
"""Outcome of a session's last run: ``idle`` (answered, or never ran) or ``failed``."""

SCHEMA = """
CREATE TABLE {sessions} (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    state TEXT NOT NULL DEFAULT 'idle',
    last_trace_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT '',
    summary TEXT NOT NULL DEFAULT '',
    window_from INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0{order_column}
);
CREATE INDEX {sessions}_owner ON {sessions} (tenant_id, user_id, updated_at);
CREATE TABLE {messages} (
    session_id TEXT NOT NULL REFERENCES {sessions} (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    trace_id TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
){without_rowid};
"""
"""The sessions' tables, for either database (see :func:`session_names`)."""


def session_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    """The names the statements use: the tables (``prefix`` before each) and the column
    that orders sessions by creation."""
    return {
        "sessions": f"{prefix}sessions",
        "messages": f"{prefix}session_messages",
        "order": dialect.insertion_order("created_seq"),
        "order_column": dialect.insertion_column("created_seq"),
    }


MIGRATIONS = [
    Migration(name="sessions_001_initial", sql=SQLITE.ddl(SCHEMA, **session_names(SQLITE))),
]

TITLE_CHARS = 60


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfo:
    """A session's header (no messages)."""

    id: str
    tenant_id: str
    user_id: str
    title: str
    created_at: float
    updated_at: float
    state: RunState
    message_count: int
    last_trace_id: str = ""
    last_error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryWindow:
    """What the model still sees of a session: recent messages and a summary of older ones."""

    messages: tuple[Message, ...]
    summary: str


class SessionStore(Protocol):
    """Where sessions live: SQLite here, PostgreSQL (:mod:`shelfhand.sessions.pg`) when
    several replicas run."""

    def check(self) -> None: ...

    def create(
        self, owner: UserContext, *, title: str = "", session_id: str | None = None
    ) -> SessionInfo: ...

    def get(self, session_id: str, owner: UserContext) -> SessionInfo | None: ...

    def list_sessions(self, owner: UserContext, *, limit: int = 50) -> list[SessionInfo]: ...

    def delete(self, session_id: str, owner: UserContext) -> bool: ...

    def messages(self, session_id: str, owner: UserContext) -> list[Message] | None: ...

    def window(self, session_id: str, owner: UserContext) -> MemoryWindow | None: ...

    def record_turn(
        self,
        session_id: str,
        owner: UserContext,
        new_messages: Sequence[Message],
        *,
        window: Sequence[Message],
        summary: str,
        trace_id: str,
    ) -> SessionInfo | None: ...

    def record_failure(
        self, session_id: str, owner: UserContext, *, trace_id: str, error: str
    ) -> None: ...

    def close(self) -> None: ...


_COLUMNS = (
    "id, tenant_id, user_id, title, created_at, updated_at, state, message_count,"
    " last_trace_id, last_error"
)
_OWNED = "id=? AND tenant_id=? AND user_id=?"


def _info(row: Sequence[object]) -> SessionInfo:
    state: RunState = "failed" if row[6] == "failed" else "idle"
    return SessionInfo(
        id=str(row[0]),
        tenant_id=str(row[1]),
        user_id=str(row[2]),
        title=str(row[3]),
        created_at=float(row[4]),  # type: ignore[arg-type]
        updated_at=float(row[5]),  # type: ignore[arg-type]
        state=state,
        message_count=int(row[7]),  # type: ignore[call-overload]
        last_trace_id=str(row[8]),
        last_error=str(row[9]),
    )


def _title_from(messages: Sequence[Message]) -> str:
    first = next((m.text for m in messages if m.role == "user" and m.text.strip()), "")
    line = " ".join(first.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


class SqlSessionStore:
    """Sessions in a SQL :class:`~shelfhand.core.sql.Database`: every statement written once,
    for SQLite (:class:`SqliteSessionStore`) and PostgreSQL
    (:class:`~shelfhand.sessions.pg.PgSessionStore`).

    Args:
        database: Where the tables are (created by the caller's migrations).
        prefix: Before each table's name (``pg_`` in PostgreSQL).
    """

    def __init__(self, database: Database, *, prefix: str = "") -> None:
        self.database = database
        self._sql = Statements(database.dialect, **session_names(database.dialect, prefix=prefix))

    def close(self) -> None:
        self.database.close()

    def check(self) -> None:
        """Raise if the database cannot be read (for readiness probes)."""
        with self.database.connection() as conn:
            conn.execute(self._sql("SELECT 1 FROM {sessions} LIMIT 1")).fetchone()

    # --- sessions ---------------------------------------------------------------------------
    def create(
        self, owner: UserContext, *, title: str = "", session_id: str | None = None
    ) -> SessionInfo:
        """A new, empty session owned by ``owner`` (``session_id``: a chosen id, e.g. one
        derived from a client's conversation key; an id already taken fails)."""
        now = time.time()
        info = SessionInfo(
            id=session_id or uuid.uuid4().hex,
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            title=title.strip()[:200],
            created_at=now,
            updated_at=now,
            state="idle",
            message_count=0,
        )
        with self.database.connection() as conn:
            conn.execute(
                self._sql(
                    "INSERT INTO {sessions} (id, tenant_id, user_id, title, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                (info.id, info.tenant_id, info.user_id, info.title, now, now),
            )
        return info

    def get(self, session_id: str, owner: UserContext) -> SessionInfo | None:
        """The session if it exists and belongs to ``owner``."""
        with self.database.connection() as conn:
            row = conn.execute(
                self._sql(f"SELECT {_COLUMNS} FROM {{sessions}} WHERE {_OWNED}"),
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
        return None if row is None else _info(row)

    def list_sessions(self, owner: UserContext, *, limit: int = 50) -> list[SessionInfo]:
        """``owner``'s sessions, most recently used first."""
        with self.database.connection() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {_COLUMNS} FROM {{sessions}} WHERE tenant_id=? AND user_id=?"
                    " ORDER BY updated_at DESC, {order} DESC LIMIT ?"
                ),
                (owner.tenant_id, owner.user_id, max(1, limit)),
            ).fetchall()
        return [_info(r) for r in rows]

    def delete(self, session_id: str, owner: UserContext) -> bool:
        """Delete a session and its messages; ``False`` if ``owner`` has no such session."""
        with self.database.transaction() as conn:
            cur = conn.execute(
                self._sql(f"DELETE FROM {{sessions}} WHERE {_OWNED}"),
                (session_id, owner.tenant_id, owner.user_id),
            )
        return cur.rowcount > 0

    # --- messages ---------------------------------------------------------------------------
    def messages(self, session_id: str, owner: UserContext) -> list[Message] | None:
        """The whole transcript in order, or ``None`` if ``owner`` has no such session."""
        with self.database.connection() as conn:
            owned = conn.execute(
                self._sql(f"SELECT 1 FROM {{sessions}} WHERE {_OWNED}"),
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if owned is None:
                return None
            rows = conn.execute(
                self._sql("SELECT body FROM {messages} WHERE session_id=? ORDER BY seq"),
                (session_id,),
            ).fetchall()
        return [Message.from_dict(json.loads(r[0])) for r in rows]

    def window(self, session_id: str, owner: UserContext) -> MemoryWindow | None:
        """The short-term memory of a session, or ``None`` if ``owner`` has no such session."""
        with self.database.connection() as conn:
            row = conn.execute(
                self._sql(f"SELECT summary, window_from FROM {{sessions}} WHERE {_OWNED}"),
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            rows = conn.execute(
                self._sql("SELECT body FROM {messages} WHERE session_id=? AND seq>=? ORDER BY seq"),
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
        session's row is locked, so turns recorded by two replicas never interleave).

        Args:
            session_id: The session.
            owner: Its owner (nothing is written for anyone else).
            new_messages: The turn's messages (user prompt, replies, tool results).
            window: The messages the memory keeps verbatim after the turn (a suffix of the
                transcript); older ones are covered by ``summary``. It starts at the last
                place its first message stands that leaves room for the whole window (a
                message recorded twice counts where the memory has it).
            summary: The memory's summary of older turns.
            trace_id: The turn's trace id, stored with each message.

        Returns:
            The updated session, or ``None`` if ``owner`` has no such session (it may have
            been deleted while the turn ran).
        """
        now = time.time()
        with self.database.transaction() as conn:
            row = conn.execute(
                self._sql(
                    f"SELECT message_count, title FROM {{sessions}} WHERE {_OWNED}{{for_update}}"
                ),
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            start = int(row[0])
            conn.executemany(
                self._sql(
                    "INSERT INTO {messages} (session_id, seq, message_id, role, trace_id, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                ),
                [
                    (session_id, start + i, m.id, m.role, trace_id, m.to_json())
                    for i, m in enumerate(new_messages)
                ],
            )
            count = start + len(new_messages)
            window_from = count - len(window)
            if window:
                first = conn.execute(
                    self._sql(
                        "SELECT seq FROM {messages} WHERE session_id=? AND message_id=?"
                        " AND seq<=? ORDER BY seq DESC LIMIT 1"
                    ),
                    (session_id, window[0].id, window_from),
                ).fetchone()
                if first is not None:
                    window_from = int(first[0])
            title = str(row[1]) or _title_from(new_messages)
            updated = conn.execute(
                self._sql(
                    "UPDATE {sessions} SET message_count=?, window_from=?, summary=?, title=?,"
                    " updated_at=?, state='idle', last_trace_id=?, last_error='' WHERE id=?"
                    f" RETURNING {_COLUMNS}"
                ),
                (count, window_from, summary, title, now, trace_id, session_id),
            ).fetchone()
        return _info(updated)

    def record_failure(
        self, session_id: str, owner: UserContext, *, trace_id: str, error: str
    ) -> None:
        """Note that the last run failed (its messages are not kept)."""
        with self.database.connection() as conn:
            conn.execute(
                self._sql(
                    "UPDATE {sessions} SET state='failed', last_trace_id=?, last_error=?,"
                    f" updated_at=? WHERE {_OWNED}"
                ),
                (trace_id, error[:500], time.time(), session_id, owner.tenant_id, owner.user_id),
            )


class SqliteSessionStore(SqlSessionStore):
    """Sessions in one SQLite file.

    Args:
        path: The database file (created with its folder when missing).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        super().__init__(SqliteDatabase(self.path, MIGRATIONS))
