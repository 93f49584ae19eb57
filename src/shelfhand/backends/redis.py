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

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from shelfhand.backends.urls import first_line, redact_url
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError

__all__ = ["KEY_PREFIX", "REDO_EVERY", "Redo", "open_redis", "redis_errors"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

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


_REFUSING = ("MISCONF", "BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS")
"""How Redis begins an error answer that says it takes no command now (a failed snapshot
stops writes, a script runs too long, a replica has lost its primary...), whatever the
command."""


@contextmanager
def redis_errors(what: str = "") -> Iterator[None]:
    """Raise :class:`DependencyUnavailableError` (``redis``) for a connection failure in the
    block, or an answer refusing the command for Redis's own state (out of memory under
    ``maxmemory``, a read-only replica, an ACL without the command, ``MISCONF``, ``BUSY``...);
    ``what`` names what needed Redis (e.g. ``"the session lock"``). Other error answers (a
    key of another type, a script's error) are raised as they are."""
    redis = _redis_module()
    needed = f" for {what}" if what else ""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise DependencyUnavailableError(
            f"Redis is unreachable{needed}: {first_line(exc)}; try again shortly",
            dependency="redis",
        ) from exc
    except redis.ResponseError as exc:
        states = (
            redis.exceptions.OutOfMemoryError,
            redis.exceptions.ReadOnlyError,
            redis.exceptions.NoPermissionError,
        )
        if not (isinstance(exc, states) or str(exc).startswith(_REFUSING)):
            raise
        raise DependencyUnavailableError(
            f"Redis refused a command{needed}: {first_line(exc)}", dependency="redis"
        ) from exc


REDO_EVERY = 0.5
"""Seconds between tries of :class:`Redo` (while Redis does not answer)."""


class Redo:
    """Writes that got no answer from Redis (a Redis that stopped answering, a socket timeout),
    done again by a thread of this process as soon as Redis answers.

    Such a write may have been applied (it was sent) or not: each one given here must be
    idempotent, and say so through its key (a token the write checks, a marker it sets).
    One that still gets no answer after ``expire_after`` seconds is dropped (what it would
    undo has expired by then, or is left as it is: counted, never lost); so is one that
    Redis answers with an error (logged), which would get the same answer every time.

    Args:
        what: What the writes are for, in log messages and errors ("the session lock").
        expire_after: Seconds a write is tried for.
    """

    def __init__(self, what: str, *, expire_after: float) -> None:
        self.what = what
        self.expire_after = expire_after
        self._pending: dict[str, tuple[Callable[[], object], float]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        """Whether writes wait for Redis."""
        return bool(self._pending)

    def send(self, write: Callable[[], _T], *, key: str, if_unanswered: Callable[[], object]) -> _T:
        """``write``'s answer, once the writes still waiting are done; with no answer from
        Redis, ``if_unanswered`` (idempotent: ``write`` may yet be applied) is kept under
        ``key`` to do once Redis answers.

        Raises:
            DependencyUnavailableError: Redis does not answer (the waiting writes, or this
                one).
        """
        self.run()
        try:
            with redis_errors(self.what):
                return write()
        except DependencyUnavailableError:
            self.add(key, if_unanswered)
            raise

    def add(self, key: str, write: Callable[[], object]) -> None:
        """Do ``write`` (idempotent) once Redis answers; a later ``write`` of the same ``key``
        replaces it."""
        with self._lock:
            self._pending[key] = (write, time.monotonic())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="shelfhand-redis-redo", daemon=True
                )
                self._thread.start()

    def run(self) -> None:
        """Do the waiting writes now (those older than ``expire_after`` are dropped).

        Raises:
            DependencyUnavailableError: Redis still does not answer (the writes are kept).
        """
        if not self._pending:
            return
        with self._lock:
            oldest = time.monotonic() - self.expire_after
            for key in [k for k, (_, when) in self._pending.items() if when < oldest]:
                logger.warning("%s: a write Redis never answered is dropped (%s)", self.what, key)
                del self._pending[key]
            waiting = list(self._pending.items())
        redis = _redis_module()
        for key, entry in waiting:
            try:
                with redis_errors(self.what):
                    entry[0]()
            except redis.RedisError as exc:
                # Redis answered, with an error (a key of another type, a script's error):
                # the same write gets the same answer again, and kept, it would fail every
                # write after it until it expires
                logger.warning(
                    "%s: Redis refused a write done again; it is dropped (%s): %s",
                    self.what,
                    key,
                    first_line(exc),
                )
            with self._lock:
                if self._pending.get(key) is entry:
                    del self._pending[key]

    def _loop(self) -> None:
        """:meth:`run` every :data:`REDO_EVERY` seconds until nothing waits."""
        while True:
            time.sleep(REDO_EVERY)
            try:
                self.run()
            except DependencyUnavailableError:
                pass  # still away
            except Exception as exc:  # never dies with writes left: tried again
                logger.warning("%s: writing again to Redis failed: %s", self.what, exc)
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
