"""Ingest jobs on a task queue: uploads and ``shelfhand ingest`` run on ``shelfhand worker``
processes when ``database_url`` is set (``pip install 'shelfhand[worker]'``).

The queue is `procrastinate <https://procrastinate.readthedocs.io>`_ over PostgreSQL: the
jobs live in the same database as the system of record, so an upload's record, its bytes and
its queue job are written in one transaction (no second durable broker to run, back up or keep
consistent). :mod:`shelfhand.jobs.queue` writes and reads job records (API, CLI);
:mod:`shelfhand.service.jobs` runs one job (in a worker); :mod:`shelfhand.jobs.worker` is the
worker process (procrastinate's worker plus stalled-job recovery).
"""

from __future__ import annotations

from shelfhand.jobs.queue import (
    FINAL_STATUSES,
    IngestQueue,
    JobFile,
    JobProgress,
    JobRecord,
    JobStatus,
)

__all__ = [
    "FINAL_STATUSES",
    "IngestQueue",
    "JobFile",
    "JobProgress",
    "JobRecord",
    "JobStatus",
]
