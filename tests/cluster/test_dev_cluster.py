"""The dev cluster: a round-robin proxy over real servers, and the whole cluster started for
real (PostgreSQL, Redis, two `shelfhand serve` processes)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.dev.cluster import RoundRobinProxy, start_dev_cluster
from shelfhand.dev.services import free_port


async def _named_server(name: str) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: answer every request on the connection
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            body = name.encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            )
            writer.write(body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


@pytest.mark.anyio
async def test_the_proxy_takes_turns_skips_a_dead_backend_and_says_503_when_none_is_up() -> None:
    a, port_a = await _named_server("A")
    b, port_b = await _named_server("B")
    dead = free_port()
    proxy = RoundRobinProxy([("127.0.0.1", port_a), ("127.0.0.1", dead), ("127.0.0.1", port_b)])
    port = await proxy.start()
    try:
        seen = []
        for _ in range(4):  # a new connection each time
            async with httpx.AsyncClient() as c:
                seen.append((await c.get(f"http://127.0.0.1:{port}/")).text)
        assert sorted(seen) == ["A", "A", "B", "B"]
        # keep-alive: one connection stays on its backend
        async with httpx.AsyncClient() as c:
            same = {(await c.get(f"http://127.0.0.1:{port}/x")).text for _ in range(3)}
        assert len(same) == 1
        a.close()
        b.close()
        await a.wait_closed()
        await b.wait_closed()
        async with httpx.AsyncClient() as c:
            r = await c.get(f"http://127.0.0.1:{port}/")
        assert r.status_code == 503 and r.json()["code"] == "no_backend"
    finally:
        await proxy.close()


@pytest.mark.anyio
async def test_concurrent_connections_each_try_every_backend_once() -> None:
    # drawn from the shared rotation at each try, 50 of 200 concurrent connections got 503
    # "no replica is up" while one of the two was
    live, port_live = await _named_server("live")
    proxy = RoundRobinProxy([("127.0.0.1", free_port()), ("127.0.0.1", port_live)])
    port = await proxy.start()
    try:

        async def one() -> int:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            writer.close()
            return status

        statuses = await asyncio.gather(*(one() for _ in range(200)))
        assert statuses == [200] * 200
    finally:
        await proxy.close()
        live.close()
        await live.wait_closed()


@pytest.fixture
def cluster_folder() -> Iterator[Path]:
    """A folder for the cluster, not under pytest's basetemp (private to root, which the
    PostgreSQL server's own user cannot enter; see pg_server in tests/conftest.py)."""
    folder = Path(tempfile.mkdtemp(prefix="shelfhand-test-cluster-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_dev_cluster_starts_two_replicas_on_one_database_and_stops_cleanly(
    cluster_folder: Path, pg_server: object, redis_server: object
) -> None:
    # pg_server, redis_server: only to skip, with the reason, when PostgreSQL or Redis cannot
    # start here (as every other test that needs them)
    cluster = start_dev_cluster(
        cluster_folder / "cluster",
        replicas=2,
        workers=0,
        serve_args=["--allow-anonymous"],
        extra_env={"SHELFHAND_RETRIEVAL_MODE": "keyword"},
    )
    try:
        assert len(cluster.replica_urls) == 2
        for url in cluster.replica_urls:
            assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200
        assert cluster.env["SHELFHAND_DATABASE_URL"] == cluster.database_url
        import psycopg

        with psycopg.connect(cluster.database_url) as conn:
            assert conn.execute(
                "SELECT extname FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
    finally:
        procs = list(cluster.replicas)
        cluster.stop()
    assert all(p.poll() is not None for p in procs)
    assert not cluster.postgres.running()


def test_a_dev_cluster_on_qdrant_searches_what_a_worker_ingested_and_keeps_tenants_apart(
    cluster_folder: Path, pg_server: object, redis_server: object
) -> None:
    # one replica with Qdrant Edge in its process, one worker process writing PostgreSQL
    pytest.importorskip("qdrant_edge")
    keys = {"ka": {"tenant": "t1", "user": "alice"}, "kb": {"tenant": "t2", "user": "bob"}}
    cluster = start_dev_cluster(
        cluster_folder / "cluster",
        replicas=1,
        workers=1,
        qdrant=True,
        extra_env={"SHELFHAND_RETRIEVAL_MODE": "keyword", "SHELFHAND_API_KEYS": json.dumps(keys)},
    )
    try:
        assert cluster.qdrant_url == str(cluster_folder.resolve() / "cluster" / "qdrant")
        assert "SHELFHAND_QDRANT_URL" not in cluster.env  # workers write PostgreSQL only
        url = cluster.replica_urls[0]
        alice = {"authorization": "Bearer ka"}
        bob = {"authorization": "Bearer kb"}
        doc = "# 退货政策\n\n投影仪 P20 的退货期限是 30 天，凭订单号 RMA 办理。\n".encode()
        up = httpx.post(
            f"{url}/v1/knowledge/files",
            files=[("files", ("退货.md", doc))],
            headers=alice,
            timeout=120,
        )
        assert up.status_code == 200 and up.json()["job_id"], up.text  # the worker ran it
        found = httpx.get(f"{url}/v1/knowledge/search", params={"q": "退货期限"}, headers=alice)
        assert [r["source"] for r in found.json()["results"]][:1] == ["t1/退货.md"]
        other = httpx.get(f"{url}/v1/knowledge/search", params={"q": "退货期限"}, headers=bob)
        assert other.json()["results"] == []
    finally:
        cluster.stop()


def test_qdrant_edge_in_a_dev_cluster_takes_one_replica(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--replicas 1"):
        start_dev_cluster(tmp_path / "c", replicas=2, qdrant=True)
