"""``shelfhand worker``: a process that runs ingest jobs from the queue.

Several worker processes (on one machine or several) share the queue: each takes the next job
with procrastinate's ``SELECT ... FOR UPDATE SKIP LOCKED`` and runs it with
:class:`~shelfhand.service.jobs.JobRunner`; ``--concurrency N`` runs up to N jobs at once in one
process (in threads).

**Stopping.** ``SIGTERM`` or ``SIGINT`` stops a worker gracefully: it takes no new job and
exits when its running jobs are done.

**Dying.** A worker killed with ``kill -9`` (or whose machine dies) stops sending heartbeats.
Every worker looks for jobs left ``doing`` by a worker whose last heartbeat is older than
``stalled_after_s`` (at start and every ``stalled_check_s``) and puts them back on the queue;
the runner makes the retried job complete exactly once (see :mod:`shelfhand.service.jobs`).

**Knowledge store.** With the embedded store (SQLite, tantivy and faiss files in the
workspace) a job takes the workspace's writer lock while it writes, so the jobs of several
workers on one workspace write one after another; a shared store (PostgreSQL) lets them write
in parallel.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from shelfhand.backends.urls import redact_url
from shelfhand.core.errors import ConfigurationError
from shelfhand.jobs.schema import QUEUE_NAME, TASK_NAME
from shelfhand.service.jobs import MAX_ATTEMPTS, EventHook, JobKnowledge, JobRunner

if TYPE_CHECKING:
    import procrastinate

    from shelfhand.core.settings import Settings
    from shelfhand.jobs.queue import IngestQueue
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.knowledge.stores.workspace_lock import Role
    from shelfhand.service.uploads import UploadRecords

logger = logging.getLogger(__name__)

__all__ = [
    "KnowledgeOpener",
    "WorkerApp",
    "WorkerOptions",
    "build_runner",
    "close_runner",
    "queue_app",
    "run_worker",
]

WRITER_WAIT_S = 24 * 3600.0
"""How long a job waits for the workspace's writer lock (embedded store): as long as it takes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How a worker runs.

    Args:
        concurrency: Jobs run at once in this process.
        heartbeat_s: Seconds between this worker's heartbeats.
        stalled_after_s: A worker silent for longer is taken for dead and its jobs retried;
            keep it several heartbeats long.
        stalled_check_s: Seconds between looks for stalled jobs.
        poll_s: Seconds between looks for new jobs when no notification came.
    """

    concurrency: int = 1
    heartbeat_s: float = 10.0
    stalled_after_s: float = 30.0
    stalled_check_s: float = 15.0
    poll_s: float = 5.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigurationError("worker concurrency must be at least 1")
        if self.stalled_after_s < 2 * self.heartbeat_s:
            raise ConfigurationError(
                f"stalled_after_s ({self.stalled_after_s:g}) must be at least twice "
                f"heartbeat_s ({self.heartbeat_s:g}): a live worker would be taken for dead"
            )


def _procrastinate() -> Any:
    try:
        import procrastinate
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "ingest workers need the task queue: pip install 'shelfhand[worker]'"
        ) from exc
    return procrastinate


def queue_app(url: str, runner: JobRunner | None = None) -> procrastinate.App:
    """procrastinate's app on ``url`` with the ingest task (run by ``runner`` when given)."""
    pc = _procrastinate()
    app: procrastinate.App = pc.App(connector=pc.PsycopgConnector(conninfo=url))

    @app.task(
        name=TASK_NAME,
        queue=QUEUE_NAME,
        retry=pc.RetryStrategy(max_attempts=MAX_ATTEMPTS - 1, wait=2),
    )
    def ingest(job_id: str) -> None:
        if runner is None:  # pragma: no cover - an enqueue-only app never runs tasks
            raise RuntimeError("this procrastinate app only enqueues")
        runner.run(job_id)

    return app


class WorkerApp(Protocol):
    """What a worker needs of the composition root: :class:`~shelfhand.app.App` fits."""

    settings: Settings

    def open_knowledge(self, *, writer: Role | None = None, wait: float = 0.0) -> KnowledgeBase: ...

    def upload_registry(self) -> UploadRecords: ...


class KnowledgeOpener:
    """Opens the knowledge base for each job of a worker process.

    The embedded store (files in the workspace) is opened per job under the workspace's
    writer lock, so jobs of several workers on one workspace write one after another. A shared
    store (PostgreSQL: opened without a workspace lock) is opened once and used by every job of
    the process, in parallel.
    """

    def __init__(self, app: WorkerApp) -> None:
        self.app = app
        self._shared: KnowledgeBase | None = None
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self) -> Iterator[JobKnowledge]:
        with self._lock:
            shared = self._shared
        if shared is not None:
            yield shared
            return
        kb = self.app.open_knowledge(writer="ingest", wait=WRITER_WAIT_S)
        if kb.lock is None:  # no workspace lock: a shared store, kept open for every job
            with self._lock:
                if self._shared is None:
                    self._shared = kb
                else:
                    kb.close()
                    kb = self._shared
            yield kb
            return
        try:
            yield kb
        finally:
            kb.close()

    def close(self) -> None:
        with self._lock:
            if self._shared is not None:
                self._shared.close()
                self._shared = None


def build_runner(
    app: WorkerApp, queue: IngestQueue, *, on_event: EventHook | None = None
) -> JobRunner:
    """The runner for ``app``'s workspace: the service's upload logic and registry, and the
    knowledge base through a :class:`KnowledgeOpener` (close it with :func:`close_runner`)."""
    from shelfhand.service.uploads import Uploads

    workspace = app.settings.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    registry = app.upload_registry()
    # the limits were enforced when the job was queued; the worker checks ownership again
    uploads = Uploads(workspace / "uploads", registry, max_file_bytes=2**62, max_files=2**31)
    return JobRunner(
        queue,
        uploads,
        KnowledgeOpener(app),
        staging=workspace / "jobs" / "staging",
        on_event=on_event,
    )


def close_runner(runner: JobRunner) -> None:
    """Close what :func:`build_runner` opened (the shared knowledge base, the registry)."""
    if isinstance(runner.open_knowledge, KnowledgeOpener):
        runner.open_knowledge.close()
    runner.uploads.registry.close()


async def _recover_stalled(pc_app: procrastinate.App, options: WorkerOptions) -> None:
    """Put jobs of dead workers back on the queue, now and every ``stalled_check_s``."""
    manager = pc_app.job_manager
    while True:
        try:
            stalled = await manager.get_stalled_jobs(
                queue=QUEUE_NAME, seconds_since_heartbeat=options.stalled_after_s
            )
            for job in stalled:
                logger.warning(
                    "job %s was left running by a worker that stopped answering; retrying it",
                    job.id,
                )
                await manager.retry_job(job)
        except Exception:  # the database may be away for a while: try again later
            logger.warning("looking for stalled jobs failed", exc_info=True)
        await asyncio.sleep(options.stalled_check_s)


async def run_worker_async(
    url: str, runner: JobRunner, options: WorkerOptions, *, install_signal_handlers: bool = True
) -> None:
    """Run jobs until stopped (``SIGTERM``/``SIGINT``: after the running jobs finish)."""
    pc_app = queue_app(url, runner)
    async with pc_app.open_async():
        recovery = asyncio.create_task(_recover_stalled(pc_app, options), name="stalled-jobs")
        logger.info(
            "worker on %s: concurrency %d, heartbeat %.0f s",
            redact_url(url),
            options.concurrency,
            options.heartbeat_s,
        )
        try:
            await pc_app.run_worker_async(
                queues=[QUEUE_NAME],
                concurrency=options.concurrency,
                update_heartbeat_interval=options.heartbeat_s,
                stalled_worker_timeout=options.stalled_after_s,
                fetch_job_polling_interval=options.poll_s,
                install_signal_handlers=install_signal_handlers,
                delete_jobs="successful",
            )
        finally:
            recovery.cancel()


def run_worker(
    app: WorkerApp, options: WorkerOptions | None = None, *, on_event: EventHook | None = None
) -> None:
    """Run a worker for ``app``'s workspace and ``database_url`` until stopped (blocking)."""
    url = app.settings.database_url
    if not url:
        raise ConfigurationError(
            "shelfhand worker needs PostgreSQL for its queue: set SHELFHAND_DATABASE_URL "
            "(database_url in shelfhand.toml)"
        )
    from shelfhand.jobs.queue import IngestQueue

    opts = options or WorkerOptions()
    queue = IngestQueue.open(url, max_connections=2 * opts.concurrency + 2)
    try:
        runner = build_runner(app, queue, on_event=on_event)
        try:
            asyncio.run(run_worker_async(url, runner, opts))
        finally:
            close_runner(runner)
    finally:
        queue.close()
