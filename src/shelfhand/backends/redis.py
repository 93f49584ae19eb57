"""Redis: the client replicas share state through, and its connection errors.

Several ``shelfhand serve`` processes behave as one service when they share their state: the
session turn lock, rate limits, circuit breakers, the result cache and approvals in Redis
(``redis_url``); sessions, long-term memory and the audit log in PostgreSQL
(``database_url``). This module opens the Redis client and turns a lost connection to either
service into :class:`~shelfhand.core.errors.DependencyUnavailableError` (HTTP 503 with the
reason, never the password); every call tries again, so the service recovers by itself.

::

    client = open_redis(settings.redis_url)      # fails fast at start-up when unreachable
    with redis_errors():
        client.set("k", "v")
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shelfhand.backends.urls import first_line, redact_url
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError

__all__ = ["KEY_PREFIX", "open_redis", "redis_errors"]

KEY_PREFIX = "shelfhand:"
"""Every Redis key shelfhand writes starts with this."""


def _redis_module() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "Redis support is not installed: pip install 'shelfhand[redis]'"
        ) from exc
    return redis


def open_redis(url: str, *, timeout: float = 2.0, check: bool = True) -> Any:
    """A Redis client (``redis.Redis``, strings decoded) for ``url``; with ``check``, one
    ``PING`` now, so a wrong or unreachable URL fails at start-up with ConfigurationError."""
    redis = _redis_module()
    try:
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=30,
        )
    except ValueError as exc:
        raise ConfigurationError(f"redis_url {redact_url(url)} is not valid: {exc}") from exc
    if check:
        try:
            client.ping()
        except redis.RedisError as exc:
            client.close()
            raise ConfigurationError(
                f"Redis at {redact_url(url)} is unreachable: {first_line(exc)}"
            ) from exc
    return client


@contextmanager
def redis_errors(what: str = "") -> Iterator[None]:
    """Raise :class:`DependencyUnavailableError` (``redis``) for a connection failure in the
    block; ``what`` names what needed Redis (e.g. ``"the session lock"``)."""
    redis = _redis_module()
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        needed = f" for {what}" if what else ""
        raise DependencyUnavailableError(
            f"Redis is unreachable{needed}: {first_line(exc)}; try again shortly",
            dependency="redis",
        ) from exc
