"""The session turn lock: in the process, and shared by replicas in a real Redis."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from service_helpers import ThreadServer

from shelfhand.backends import redis as redis_backend
from shelfhand.backends.redis import open_redis
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.dev.services import free_port, start_redis
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


def test_a_claim_that_got_no_answer_does_not_keep_the_session_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that stops answering (SIGSTOP) while a claim's SET is on its way applies it
    when it resumes: before, the session stayed busy (409 on every replica) for the whole
    ttl with no turn running; now the replica that sent it deletes it as soon as Redis
    answers. A release that got no answer likewise."""
    monkeypatch.setattr(redis_backend, "REDO_EVERY", 1.5)  # (time to see the stale claim)
    server = start_redis(tmp_path / "redis")  # its own: stopped below
    try:
        assert server.process is not None
        lock = RedisTurnLock(open_redis(server.url, timeout=0.5), ttl=30)
        replica = RedisTurnLock(open_redis(server.url, timeout=0.5), ttl=30)
        held = lock.claim("已释放")
        assert held is not None
        server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(DependencyUnavailableError, match="session lock"):
                lock.claim("会话")  # the SET waits in Redis's socket
            held.release()  # gets no answer either
        finally:
            server.process.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while not replica.is_busy("会话") and time.monotonic() < deadline:
            time.sleep(0.02)  # the SET sent while stopped is applied now
        assert replica.is_busy("会话")
        # the other replica finds both free within seconds, not after the 30 s ttl
        deadline = time.monotonic() + 6
        while replica.is_busy("会话") or replica.is_busy("已释放"):
            assert time.monotonic() < deadline, "the stale claims were not deleted"
            time.sleep(0.05)
        taken = replica.claim("会话")
        assert taken is not None and lock.claim("会话") is None  # and it holds, as any claim
        taken.release()
    finally:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


def test_a_redis_that_stops_answering_holds_up_its_turns_not_the_service(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """A turn's claim on its session waits on Redis (up to the client's 2 s timeout) on a
    state thread, not on the event loop: ``/healthz`` answers at once meanwhile. Before, the
    claim's ``SET`` ran on the loop and every request of the service waited with it (3.9 s
    of 4 in a run by hand, three turns starting)."""
    import threading

    import httpx
    from service_helpers import ALICE, start_thread_server, user_contexts

    from shelfhand.api import ServiceConfig, create_app
    from shelfhand.app import App
    from shelfhand.core.settings import Settings
    from shelfhand.testing import FunctionModel

    redis_server = start_redis(tmp_path / "redis")  # its own: stopped below
    try:
        assert redis_server.process is not None
        env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_REDIS_URL": redis_server.url}
        app = App(
            settings=Settings.load(tmp_path, env=env),
            model=FunctionModel(lambda messages, tools: "好的。"),
        )
        server = start_thread_server(
            create_app(app, config=ServiceConfig(), api_keys=user_contexts())
        )
        thread_servers.append(server)
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
            session = c.post("/v1/sessions").json()["id"]
            sent = c.post(f"/v1/sessions/{session}/messages", json={"content": "你好"})
            assert sent.status_code == 200, sent.text
            replies: list[httpx.Response] = []
            turn = threading.Thread(
                target=lambda: replies.append(
                    c.post(f"/v1/sessions/{session}/messages", json={"content": "再来"})
                )
            )
            redis_server.process.send_signal(signal.SIGSTOP)
            try:
                turn.start()
                time.sleep(0.3)  # the claim waits on Redis
                health = httpx.get(f"{server.url}/healthz", timeout=1)  # (before: timed out)
                assert health.status_code == 200
                assert not replies
                turn.join(30)
            finally:
                redis_server.process.send_signal(signal.SIGCONT)
        assert replies[0].status_code == 503
        assert replies[0].json()["code"] == "redis_unavailable"
    finally:
        if redis_server.process is not None:
            redis_server.process.send_signal(signal.SIGCONT)
        redis_server.stop()
