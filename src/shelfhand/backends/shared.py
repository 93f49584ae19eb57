"""The connections several service replicas share their state through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SharedState"]


@dataclass(slots=True)
class SharedState:
    """Connections to what replicas share: Redis (``redis_url``) and PostgreSQL
    (``database_url``); ``None`` for what is not configured."""

    redis: Any = None
    """A ``redis.Redis`` client (strings decoded)."""
    pool: Any = None
    """A ``psycopg_pool.ConnectionPool`` for sessions, memory and audit."""

    @classmethod
    def open(cls, *, redis_url: str | None, database_url: str | None) -> SharedState:
        """Connect to what is configured; an unreachable service is a ConfigurationError."""
        state = cls()
        try:
            if redis_url:
                from shelfhand.backends.redis import open_redis

                state.redis = open_redis(redis_url)
            if database_url:
                from shelfhand.backends.postgres import open_pool

                state.pool = open_pool(database_url, max_size=10)
        except BaseException:
            state.close()
            raise
        return state

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.redis is not None:
            self.redis.close()
            self.redis = None
