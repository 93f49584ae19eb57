"""Sessions and long-term user memory, persisted in the workspace (docs/design.md P1)."""

from shelfhand.sessions.store import MemoryWindow, SessionInfo, SessionStore, SqliteSessionStore
from shelfhand.sessions.user_memory import (
    MemoryItem,
    SqliteUserMemoryStore,
    format_memories,
)

__all__ = [
    "MemoryItem",
    "MemoryWindow",
    "SessionInfo",
    "SessionStore",
    "SqliteSessionStore",
    "SqliteUserMemoryStore",
    "format_memories",
]
