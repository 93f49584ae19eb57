"""Conversation sessions persisted in SQLite (DESIGN P1).

A session belongs to one caller (tenant + user) and holds its whole transcript, the
short-term memory window (which messages the model still sees verbatim, and the summary of
the older ones) and the outcome of its last run. Everything is in ``<workspace>/sessions.db``,
so a restarted service resumes every conversation where it stopped.

Every read and write names the owner: a session of another tenant or user is indistinguishable
from a missing one (``None`` / ``False``), so callers cannot probe for other people's ids.

Statements are short (a few rows, no fsync per commit in WAL mode), so the store is called
directly from the event loop; one connection, guarded by a lock, serves every thread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, apply_migrations, connect, transaction
from shelfhand.core.messages import Message

__all__ = [
    "MIGRATIONS",
    "MemoryWindow",
    "RunState",
    "SessionInfo",
    "SessionStore",
    "SqliteSessionStore",
]

RunState = Literal["idle", "failed"]
"""Outcome of a session's last run: ``idle`` (answered, or never ran) or ``failed``."""

MIGRATIONS = [
    Migration(
        name="sessions_001_initial",
        sql="""
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'idle',
    last_trace_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT '',
    summary TEXT NOT NULL DEFAULT '',
    window_from INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_owner ON sessions (tenant_id, user_id, updated_at);
CREATE TABLE session_messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    trace_id TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
""",
    ),
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

    def create(self, owner: UserContext, *, title: str = "") -> SessionInfo: ...

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


class SqliteSessionStore:
    """Sessions in one SQLite file.

    Args:
        path: The database file (created with its folder when missing).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection = connect(self.path)
        apply_migrations(self._conn, MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def check(self) -> None:
        """Raise if the database cannot be read (for readiness probes)."""
        with self._lock:
            self._conn.execute("SELECT COUNT(*) FROM sessions").fetchone()

    # --- sessions ---------------------------------------------------------------------------
    def create(self, owner: UserContext, *, title: str = "") -> SessionInfo:
        """A new, empty session owned by ``owner``."""
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
        with self._lock:
            self._conn.execute(
                "INSERT INTO sessions (id, tenant_id, user_id, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (info.id, info.tenant_id, info.user_id, info.title, now, now),
            )
        return info

    def get(self, session_id: str, owner: UserContext) -> SessionInfo | None:
        """The session if it exists and belongs to ``owner``."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE id=? AND tenant_id=? AND user_id=?",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
        return None if row is None else _info(row)

    def list_sessions(self, owner: UserContext, *, limit: int = 50) -> list[SessionInfo]:
        """``owner``'s sessions, most recently used first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id=? AND user_id=?"
                " ORDER BY updated_at DESC, rowid DESC LIMIT ?",
                (owner.tenant_id, owner.user_id, max(1, limit)),
            ).fetchall()
        return [_info(r) for r in rows]

    def delete(self, session_id: str, owner: UserContext) -> bool:
        """Delete a session and its messages; ``False`` if ``owner`` has no such session."""
        with self._lock, transaction(self._conn):
            cur = self._conn.execute(
                "DELETE FROM sessions WHERE id=? AND tenant_id=? AND user_id=?",
                (session_id, owner.tenant_id, owner.user_id),
            )
        return cur.rowcount > 0

    # --- messages ---------------------------------------------------------------------------
    def messages(self, session_id: str, owner: UserContext) -> list[Message] | None:
        """The whole transcript in order, or ``None`` if ``owner`` has no such session."""
        with self._lock:
            if not self._owned(session_id, owner):
                return None
            rows = self._conn.execute(
                "SELECT body FROM session_messages WHERE session_id=? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [Message.from_dict(json.loads(r[0])) for r in rows]

    def window(self, session_id: str, owner: UserContext) -> MemoryWindow | None:
        """The short-term memory of a session, or ``None`` if ``owner`` has no such session."""
        with self._lock:
            row = self._conn.execute(
                "SELECT summary, window_from FROM sessions WHERE id=? AND tenant_id=?"
                " AND user_id=?",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            rows = self._conn.execute(
                "SELECT body FROM session_messages WHERE session_id=? AND seq>=? ORDER BY seq",
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
        """Append a finished turn and the memory state after it, in one transaction.

        Args:
            session_id: The session.
            owner: Its owner (nothing is written for anyone else).
            new_messages: The turn's messages (user prompt, replies, tool results).
            window: The messages the memory keeps verbatim after the turn (a suffix of the
                transcript); older ones are covered by ``summary``.
            summary: The memory's summary of older turns.
            trace_id: The turn's trace id, stored with each message.

        Returns:
            The updated session, or ``None`` if ``owner`` has no such session (it may have
            been deleted while the turn ran).
        """
        now = time.time()
        with self._lock, transaction(self._conn):
            row = self._conn.execute(
                "SELECT message_count, title FROM sessions WHERE id=? AND tenant_id=?"
                " AND user_id=?",
                (session_id, owner.tenant_id, owner.user_id),
            ).fetchone()
            if row is None:
                return None
            start = int(row[0])
            self._conn.executemany(
                "INSERT INTO session_messages (session_id, seq, message_id, role, trace_id, body)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (session_id, start + i, m.id, m.role, trace_id, m.to_json())
                    for i, m in enumerate(new_messages)
                ],
            )
            count = start + len(new_messages)
            window_from = count
            if window:
                first = self._conn.execute(
                    "SELECT seq FROM session_messages WHERE session_id=? AND message_id=?",
                    (session_id, window[0].id),
                ).fetchone()
                window_from = int(first[0]) if first is not None else count - len(window)
            title = str(row[1]) or _title_from(new_messages)
            self._conn.execute(
                "UPDATE sessions SET message_count=?, window_from=?, summary=?, title=?,"
                " updated_at=?, state='idle', last_trace_id=?, last_error='' WHERE id=?",
                (count, window_from, summary, title, now, trace_id, session_id),
            )
            updated = self._conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE id=?", (session_id,)
            ).fetchone()
        return _info(updated)

    def record_failure(
        self, session_id: str, owner: UserContext, *, trace_id: str, error: str
    ) -> None:
        """Note that the last run failed (its messages are not kept)."""
        with self._lock:
            self._conn.execute(
                "UPDATE sessions SET state='failed', last_trace_id=?, last_error=?, updated_at=?"
                " WHERE id=? AND tenant_id=? AND user_id=?",
                (trace_id, error[:500], time.time(), session_id, owner.tenant_id, owner.user_id),
            )

    def _owned(self, session_id: str, owner: UserContext) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM sessions WHERE id=? AND tenant_id=? AND user_id=?",
            (session_id, owner.tenant_id, owner.user_id),
        ).fetchone()
        return row is not None
