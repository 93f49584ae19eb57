"""Ingest job records in PostgreSQL, and enqueueing them on procrastinate's queue.

A job is one upload (``kind="upload"``: files for a tenant, owned through the upload registry)
or one ``shelfhand ingest`` run (``kind="ingest"``: files named ``<root>/<path>``). Enqueueing
writes, in **one transaction**, the job's record (owner, tenant, roles, tags, status), the
files' bytes and procrastinate's queue row: either all of it exists or none of it does, so a
crash never leaves a job without its bytes or bytes without a job.

The record is what the API shows from any replica (``GET /v1/knowledge/jobs/{id}``): status
``queued`` → ``running`` → ``done`` or ``failed`` (with the reason), the attempt count, and
progress (files, bytes, chunks embedded) that the worker writes while it runs. The files'
bytes are dropped when the job reaches a final status.

:meth:`IngestQueue.exclusive` holds PostgreSQL advisory locks on a dedicated connection for
as long as a job runs: a second run of the same job (a stalled job retried while its first
run is somehow still alive) waits for the first, and two jobs writing the same source never
interleave. The locks die with the connection, so a worker killed with ``kill -9`` releases
them at once.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from shelfhand.backends.postgres import open_pool, pg_errors
from shelfhand.core.context import UserContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.jobs.schema import QUEUE_NAME, TASK_NAME, migrations
from shelfhand.service.job_records import (
    FINAL_STATUSES,
    JobFile,
    JobKind,
    JobProgress,
    JobRecord,
    JobStatus,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

__all__ = ["FINAL_STATUSES", "IngestQueue", "JobFile", "JobProgress", "JobRecord", "JobStatus"]

_COLUMNS = (
    "id, kind, tenant_id, user_id, roles, permission_tags, status, attempts, files, bytes,"
    " sources, progress, error, error_code, report, created_at, started_at, finished_at"
)


def _record(row: Sequence[Any]) -> JobRecord:
    return JobRecord(
        id=row[0],
        kind=row[1],
        tenant_id=row[2],
        user_id=row[3],
        roles=tuple(row[4]),
        permission_tags=None if row[5] is None else tuple(row[5]),
        status=row[6],
        attempts=int(row[7]),
        files=int(row[8]),
        bytes=int(row[9]),
        sources=tuple(row[10]),
        progress=JobProgress.of(row[11] or {}),
        error=row[12],
        error_code=row[13],
        report=row[14],
        created_at=float(row[15]),
        started_at=None if row[16] is None else float(row[16]),
        finished_at=None if row[17] is None else float(row[17]),
    )


class IngestQueue:
    """Job records and the queue, on one PostgreSQL database.

    Args:
        pool: Autocommit connections (:func:`shelfhand.backends.postgres.open_pool`).
    """

    def __init__(self, pool: ConnectionPool[Any], *, url: str) -> None:
        self.pool = pool
        self.url = url

    @classmethod
    def open(cls, url: str, *, max_connections: int = 8) -> IngestQueue:
        """Connect (fails fast with :class:`~shelfhand.core.errors.ConfigurationError`) and
        create the queue's tables if they are missing."""
        schema = migrations()  # the install hint comes before any connection
        return cls(open_pool(url, max_size=max_connections, migrations=schema), url=url)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; PostgreSQL going away is
        :class:`~shelfhand.core.errors.DependencyUnavailableError`
        (the service answers 503 and recovers when it returns)."""
        with pg_errors(self.url), self.pool.connection() as conn:
            yield conn

    # --- the enqueue side (API, CLI) -------------------------------------------------------
    def enqueue(
        self,
        *,
        kind: JobKind,
        user: UserContext,
        files: Sequence[JobFile],
        sources: Sequence[str],
        permission_tags: Sequence[str] | None = None,
    ) -> JobRecord:
        """Record a job with its files and put it on the queue, in one transaction."""
        if not files:
            raise InvalidArgumentError("a job needs at least one file")
        job_id = uuid.uuid4().hex
        now = time.time()
        size = sum(len(f.data) for f in files)
        progress = JobProgress(files_total=len(files), bytes_total=size)
        tags = None if permission_tags is None else json.dumps(list(permission_tags))
        with self._connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO shelfhand_ingest_jobs (id, kind, tenant_id, user_id, roles,"
                " permission_tags, files, bytes, sources, progress, created_at)"
                " VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, %s::jsonb, %s::jsonb, %s)",
                (
                    job_id,
                    kind,
                    user.tenant_id,
                    user.user_id,
                    json.dumps(list(user.roles)),
                    tags,
                    len(files),
                    size,
                    json.dumps(list(sources)),
                    json.dumps(asdict(progress)),
                    now,
                ),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO shelfhand_ingest_job_files (job_id, position, name, folder,"
                    " origin, size, data) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [
                        (job_id, n, f.name, f.folder, f.origin, len(f.data), f.data)
                        for n, f in enumerate(files)
                    ],
                )
            # procrastinate's own enqueue function, inside our transaction
            row = conn.execute(
                "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, 0, NULL, NULL,"
                " %s::jsonb, NULL)::procrastinate_job_to_defer_v1])",
                (QUEUE_NAME, TASK_NAME, json.dumps({"job_id": job_id})),
            ).fetchone()
            assert row is not None
            conn.execute(
                "UPDATE shelfhand_ingest_jobs SET queue_job_id=%s WHERE id=%s",
                (int(row[0][0]), job_id),
            )
        logger.info("queued ingest job %s (%d files, %d bytes)", job_id, len(files), size)
        record = self.get(job_id)
        assert record is not None
        return record

    def get(self, job_id: str) -> JobRecord | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM shelfhand_ingest_jobs WHERE id=%s", (job_id,)
            ).fetchone()
        return None if row is None else _record(row)

    def for_tenant(
        self, tenant_id: str, *, user_id: str | None = None, limit: int = 50
    ) -> list[JobRecord]:
        """The tenant's jobs (only ``user_id``'s when given), newest first."""
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM shelfhand_ingest_jobs WHERE tenant_id=%s"
                " AND (%s::text IS NULL OR user_id=%s::text)"
                " ORDER BY created_at DESC, id LIMIT %s",
                (tenant_id, user_id, user_id, limit),
            ).fetchall()
        return [_record(r) for r in rows]

    def live_workers(self, *, within_s: float = 60.0) -> int:
        """Workers whose last heartbeat is at most ``within_s`` seconds old."""
        with self._connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_workers"
                " WHERE last_heartbeat > now() - make_interval(secs => %s)",
                (within_s,),
            ).fetchone()
        return int(row[0]) if row else 0

    def depth(self) -> dict[str, int]:
        """Ingest jobs on the queue by procrastinate status: ``todo`` (waiting for a worker)
        and ``doing`` (running)."""
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs"
                " WHERE queue_name=%s AND status IN ('todo', 'doing') GROUP BY status",
                (QUEUE_NAME,),
            ).fetchall()
        counts = {"todo": 0, "doing": 0}
        counts.update({str(r[0]): int(r[1]) for r in rows})
        return counts

    # --- the worker side -------------------------------------------------------------------
    def files(self, job_id: str) -> list[JobFile]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT name, data, folder, origin FROM shelfhand_ingest_job_files"
                " WHERE job_id=%s ORDER BY position",
                (job_id,),
            ).fetchall()
        return [JobFile(name=r[0], data=bytes(r[1]), folder=bool(r[2]), origin=r[3]) for r in rows]

    def start(self, job_id: str) -> JobRecord | None:
        """Mark an attempt as running; ``None`` when the job is gone or already final (a
        retried job that completed: nothing to do, so it completes once)."""
        with self._connection() as conn:
            row = conn.execute(
                "UPDATE shelfhand_ingest_jobs SET status='running', attempts=attempts+1,"
                " started_at=%s, error=NULL, error_code=NULL"
                " WHERE id=%s AND status NOT IN ('done', 'failed')"
                f" RETURNING {_COLUMNS}",
                (time.time(), job_id),
            ).fetchone()
        return None if row is None else _record(row)

    def set_progress(self, job_id: str, progress: JobProgress) -> None:
        with self._connection() as conn:
            conn.execute(
                "UPDATE shelfhand_ingest_jobs SET progress=%s::jsonb"
                " WHERE id=%s AND status='running'",
                (json.dumps(asdict(progress)), job_id),
            )

    def finish(self, job_id: str, report: dict[str, Any], progress: JobProgress) -> None:
        """``done``, with the ingest report; the bytes are dropped."""
        self._final(job_id, "done", report=report, progress=progress)

    def fail(self, job_id: str, error: str, code: str) -> None:
        """``failed`` for good (a file that cannot be ingested, a refused write)."""
        self._final(job_id, "failed", error=error, code=code)

    def note_error(self, job_id: str, error: str) -> None:
        """An attempt failed unexpectedly and will be retried: back to ``queued``."""
        with self._connection() as conn:
            conn.execute(
                "UPDATE shelfhand_ingest_jobs SET status='queued', error=%s,"
                " error_code='retrying' WHERE id=%s AND status='running'",
                (error, job_id),
            )

    def _final(
        self,
        job_id: str,
        status: JobStatus,
        *,
        report: dict[str, Any] | None = None,
        progress: JobProgress | None = None,
        error: str | None = None,
        code: str | None = None,
    ) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute(
                "UPDATE shelfhand_ingest_jobs SET status=%s, report=%s::jsonb, error=%s,"
                " error_code=%s, finished_at=%s, progress=COALESCE(%s::jsonb, progress)"
                " WHERE id=%s",
                (
                    status,
                    None if report is None else json.dumps(report),
                    error,
                    code,
                    time.time(),
                    None if progress is None else json.dumps(asdict(progress)),
                    job_id,
                ),
            )
            conn.execute("DELETE FROM shelfhand_ingest_job_files WHERE job_id=%s", (job_id,))

    @contextmanager
    def try_exclusive(self, key: str) -> Iterator[bool]:
        """Hold the advisory lock ``key`` while the block runs if it is free (``True``);
        ``False`` at once when another session holds it."""
        with self._connection() as conn:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)
            ).fetchone()
            got = bool(row and row[0])
            try:
                yield got
            finally:
                if got:
                    conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))

    @contextmanager
    def exclusive(self, keys: Sequence[str]) -> Iterator[None]:
        """Hold an advisory lock per key (sorted: no deadlocks) while the block runs."""
        ordered = sorted(set(keys))
        with self._connection() as conn:
            for key in ordered:
                conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
            try:
                yield
            finally:
                for key in reversed(ordered):
                    conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
