"""Ingest jobs as values (a job's record, files and progress) and what a job runner needs of
the queue that keeps them (:class:`JobQueue`; :class:`~shelfhand.jobs.queue.IngestQueue` keeps
them in PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shelfhand.core.context import UserContext

__all__ = [
    "FINAL_STATUSES",
    "JobFile",
    "JobKind",
    "JobProgress",
    "JobQueue",
    "JobRecord",
    "JobStatus",
]

JobStatus = Literal["queued", "running", "done", "failed"]
JobKind = Literal["upload", "ingest"]
FINAL_STATUSES: frozenset[str] = frozenset({"done", "failed"})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobProgress:
    """Where a running job is: phase ``queued``, ``index`` (files stored, keyword-searchable
    at once), ``embed`` (chunks embedded) or ``done``."""

    phase: str = "queued"
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    chunks_embedded: int = 0
    chunks_to_embed: int = 0
    source: str = ""

    @classmethod
    def of(cls, data: dict[str, Any]) -> JobProgress:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFile:
    """One file of a job: for an upload its file name; for an ingest ``<root>/<path>``."""

    name: str
    data: bytes = field(repr=False)
    folder: bool = False
    """(ingest) The root was given as a folder: what vanished from it is removed."""
    origin: str | None = None
    """(ingest) The root's folder as the client resolved it (for a file given alone, the
    folder it is in): its identity, so the same folder ingested queued or in process (on any
    worker) is one root, and a file is named by where it really is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    id: str
    kind: JobKind
    tenant_id: str
    user_id: str
    roles: tuple[str, ...]
    permission_tags: tuple[str, ...] | None
    """``None``: a replaced source keeps its tags (see :func:`~shelfhand.service.source_access.
    replacement_tags`)."""
    status: JobStatus
    attempts: int
    files: int
    bytes: int
    sources: tuple[str, ...]
    progress: JobProgress
    error: str | None
    error_code: str | None
    report: dict[str, Any] | None
    created_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def user(self) -> UserContext:
        """Who enqueued it: the identity the job acts for (never anything the files say)."""
        return UserContext(tenant_id=self.tenant_id, user_id=self.user_id, roles=self.roles)


class JobQueue(Protocol):
    """Job records and the locks a runner holds while it runs a job."""

    def get(self, job_id: str) -> JobRecord | None: ...

    def files(self, job_id: str) -> list[JobFile]: ...

    def start(self, job_id: str) -> JobRecord | None: ...

    def set_progress(self, job_id: str, progress: JobProgress) -> None: ...

    def finish(self, job_id: str, report: dict[str, Any], progress: JobProgress) -> None: ...

    def fail(self, job_id: str, error: str, code: str) -> None: ...

    def note_error(self, job_id: str, error: str) -> None: ...

    def try_exclusive(self, key: str) -> AbstractContextManager[bool]: ...

    def exclusive(self, keys: Sequence[str]) -> AbstractContextManager[None]: ...
