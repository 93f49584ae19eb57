"""One turn at a time per session: in the process, or across replicas in Redis.

:class:`LocalTurnLock` (the default) is a set of busy session ids: right for one service
process. :class:`RedisTurnLock` makes the claim visible to every replica sharing one Redis:
``SET key token NX PX ttl`` with a random owner token, renewed while the turn runs (only by
its owner), released at its end (only by its owner). A replica that crashes mid-turn stops
renewing, so its claim expires after ``ttl`` seconds and the session is usable again.

When Redis cannot be reached the claim fails with
:class:`~shelfhand.core.errors.DependencyUnavailableError` (HTTP 503): a turn never runs
without the lock. A claim whose ``SET`` got no answer (a Redis that stopped answering) may
still have been applied once Redis answers again, and a release that failed leaves its claim
in place: both are kept, and a thread deletes them (only if they still hold their token) as
soon as Redis answers again, so the session is free for every replica then, not ``ttl``
seconds later.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from shelfhand.backends.redis import KEY_PREFIX, Redo, redis_errors
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.offload import on_state_thread

__all__ = ["LocalTurnLock", "RedisTurnLock", "TurnClaim", "TurnLock"]

logger = logging.getLogger(__name__)


class TurnClaim(Protocol):
    """A held claim on one session; :meth:`release` is idempotent."""

    session_id: str
    renews: bool
    """Whether :meth:`keep` has work to do (claims that expire)."""

    async def keep(self) -> None:
        """Keep the claim alive until cancelled or lost (renews claims that expire)."""
        ...

    def release(self) -> None: ...


class TurnLock(Protocol):
    """Who may run a turn of a session right now."""

    blocking: bool
    """Its claims wait on a server (Redis): the service makes and releases them on a state
    thread (:mod:`shelfhand.core.offload`), never on the event loop."""

    def claim(self, session_id: str) -> TurnClaim | None:
        """The claim, or ``None`` when another turn of the session holds it."""
        ...

    def is_busy(self, session_id: str) -> bool: ...


class _LocalClaim:
    __slots__ = ("_busy", "session_id")
    renews = False

    def __init__(self, busy: set[str], session_id: str) -> None:
        self._busy = busy
        self.session_id = session_id

    async def keep(self) -> None:
        return  # nothing expires

    def release(self) -> None:
        self._busy.discard(self.session_id)


class LocalTurnLock:
    """Busy sessions in this process (one service process per workspace)."""

    blocking = False

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def claim(self, session_id: str) -> TurnClaim | None:
        if session_id in self._busy:
            return None
        self._busy.add(session_id)
        return _LocalClaim(self._busy, session_id)

    def is_busy(self, session_id: str) -> bool:
        return session_id in self._busy


# delete / extend only while the key still holds our token
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
_RENEW = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
    "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
)


class _RedisClaim:
    __slots__ = ("_lock", "_released", "key", "session_id", "token")
    renews = True

    def __init__(self, lock: RedisTurnLock, session_id: str, key: str, token: str) -> None:
        self._lock = lock
        self.session_id = session_id
        self.key = key
        self.token = token
        self._released = False

    async def keep(self) -> None:
        lock = self._lock
        while True:
            await asyncio.sleep(lock.ttl / 3)
            try:
                renewed = await on_state_thread(
                    lock.client.eval, _RENEW, 1, self.key, self.token, int(lock.ttl * 1000)
                )
            except Exception as exc:  # Redis away for a moment: the claim may still hold
                logger.warning("renewing the turn lock of %s failed: %s", self.session_id, exc)
                continue
            if not renewed:
                logger.warning(
                    "the turn lock of session %s expired while its turn ran (ttl %.0f s)",
                    self.session_id,
                    lock.ttl,
                )
                return

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            self._lock.client.eval(_RELEASE, 1, self.key, self.token)
        except Exception as exc:  # deleted once Redis answers (a thread), else it expires
            logger.warning("releasing the turn lock of %s failed: %s", self.session_id, exc)
            self._lock.unsure(self.key, self.token)


class RedisTurnLock:
    """Busy sessions in Redis, shared by every replica.

    Args:
        client: A ``redis.Redis`` client (strings decoded).
        ttl: Seconds a claim lives without renewal (a crashed replica's claim expires after
            this); renewed every ``ttl / 3`` seconds while the turn runs.
    """

    blocking = True

    def __init__(self, client: Any, *, ttl: float = 30.0) -> None:
        if ttl <= 0:
            raise InvalidArgumentError("ttl must be positive")
        self.client = client
        self.ttl = ttl
        # claims whose SET or release got no answer: deleted (if still ours) once Redis
        # answers; older than ttl, expired by themselves
        self._unsure = Redo("the session lock", expire_after=ttl)

    @staticmethod
    def key(session_id: str) -> str:
        return f"{KEY_PREFIX}turn:{session_id}"

    def claim(self, session_id: str) -> TurnClaim | None:
        token = uuid.uuid4().hex
        key = self.key(session_id)
        # Redis still away: 503 without asking it twice; a SET that gets no answer may be
        # applied once Redis answers: its claim is then deleted
        won = self._unsure.send(
            functools.partial(self.client.set, key, token, nx=True, px=int(self.ttl * 1000)),
            key=key,
            if_unanswered=self._release_of(key, token),
        )
        return _RedisClaim(self, session_id, key, token) if won else None

    def _release_of(self, key: str, token: str) -> Callable[[], object]:
        """Delete ``token``'s claim on ``key``, only if it still holds that token."""
        return functools.partial(self.client.eval, _RELEASE, 1, key, token)

    def unsure(self, key: str, token: str) -> None:
        """Delete ``token``'s claim on ``key`` (only if it still holds that token) once Redis
        answers again: its ``SET`` or its release got no answer."""
        self._unsure.add(key, self._release_of(key, token))

    def is_busy(self, session_id: str) -> bool:
        with redis_errors("the session lock"):
            return bool(self.client.exists(self.key(session_id)))
