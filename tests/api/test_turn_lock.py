"""The session turn lock: in the process, and shared by replicas in a real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from shelfhand.backends.redis import open_redis
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.dev.services import free_port
from shelfhand.service.turn_lock import LocalTurnLock, RedisTurnLock


def test_the_local_lock_holds_one_turn_per_session() -> None:
    lock = LocalTurnLock()
    claim = lock.claim("s1")
    assert claim is not None and lock.is_busy("s1")
    assert lock.claim("s1") is None
    assert lock.claim("s2") is not None  # other sessions run concurrently
    claim.release()
    assert not lock.is_busy("s1") and lock.claim("s1") is not None


def test_a_claim_in_redis_is_seen_by_another_replica_and_freed_only_by_its_owner(
    redis_url: str,
) -> None:
    a = RedisTurnLock(open_redis(redis_url), ttl=30)
    b = RedisTurnLock(open_redis(redis_url), ttl=30)  # another replica, its own connection
    claim = a.claim("会话-1")
    assert claim is not None
    assert b.is_busy("会话-1") and b.claim("会话-1") is None
    claim.release()
    assert not b.is_busy("会话-1")
    taken = b.claim("会话-1")
    assert taken is not None
    claim.release()  # a second release of an old claim never frees someone else's
    assert a.is_busy("会话-1") and a.claim("会话-1") is None
    taken.release()
    assert not a.is_busy("会话-1")


def test_a_crashed_replicas_claim_expires(redis_url: str) -> None:
    lock = RedisTurnLock(open_redis(redis_url), ttl=0.2)
    assert lock.claim("s") is not None  # never released nor renewed: the replica "crashed"
    deadline = time.monotonic() + 10
    while lock.is_busy("s") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.claim("s") is not None


@pytest.mark.anyio
async def test_a_running_turn_keeps_its_claim_past_the_ttl(redis_url: str) -> None:
    lock = RedisTurnLock(open_redis(redis_url), ttl=1.5)
    claim = lock.claim("s")
    assert claim is not None and claim.renews
    keeper = asyncio.create_task(claim.keep())
    await asyncio.sleep(3.5)  # more than twice the ttl: only renewals keep it
    assert lock.is_busy("s")
    keeper.cancel()
    claim.release()
    assert not lock.is_busy("s")


def test_redis_away_is_a_dependency_error_not_a_free_session() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(ConfigurationError, match="unreachable"):
        open_redis(url)  # at start-up: fail fast
    lock = RedisTurnLock(open_redis(url, check=False, timeout=0.5))
    with pytest.raises(DependencyUnavailableError, match="session lock") as failed:
        lock.claim("s")
    assert failed.value.dependency == "redis"
