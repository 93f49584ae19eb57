"""``shelfhand worker``: run ingest jobs from the PostgreSQL queue (``database_url``)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, open_app
from shelfhand.core.secrets import redact_log_handlers


@app.command()
def worker(
    workspace: WorkspaceOpt = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Jobs run at once by this worker.", min=1)
    ] = 1,
    heartbeat: Annotated[
        float,
        typer.Option(help="Seconds between the worker's heartbeats.", min=0.1),
    ] = 10.0,
    stalled_after: Annotated[
        float,
        typer.Option(
            help="Seconds without a heartbeat after which a worker is taken for dead and its "
            "jobs are retried (at least twice --heartbeat).",
            min=0.2,
        ),
    ] = 30.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run ingest jobs (uploads and `shelfhand ingest` with SHELFHAND_DATABASE_URL set).

    Start as many workers as you like, on one machine or several: they share the queue.
    SIGTERM or Ctrl-C stops a worker after its running jobs; a worker killed outright has its
    jobs retried by the others (or the next one started) after --stalled-after seconds.
    """
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.jobs.worker import WorkerOptions, run_worker

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    redact_log_handlers()
    a = open_app(workspace, create=True)
    try:
        options = WorkerOptions(
            concurrency=concurrency,
            heartbeat_s=heartbeat,
            stalled_after_s=stalled_after,
            stalled_check_s=max(heartbeat, stalled_after / 2),
            poll_s=min(5.0, stalled_after / 2),
        )
        run_worker(a, options)
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
