"""Uploads as ingest jobs, and the job endpoints (``/v1/knowledge/jobs``).

With ``database_url`` set, ``POST /v1/knowledge/files`` receives and validates the files as
always (bad names, types, sizes and unreadable files are refused at once, nothing stored),
checks that the caller may write the sources and has quota, and then, instead of ingesting in
process, enqueues one job for ``shelfhand worker`` (files, record and queue row in one
PostgreSQL transaction). The response keeps its shapes:

* by default the request follows the job and answers, once it is done, the same
  :class:`~shelfhand.api.schemas.IngestOut` as an in-process ingest (with ``job_id``), or the
  same error (422 unreadable, 409 conflict ...); if the job is not done within
  ``ServiceConfig.job_wait`` seconds it answers **202** with the
  :class:`~shelfhand.api.schemas.JobOut` to poll; when no worker is alive (no heartbeat in
  the last minute) it answers 202 at once, its ``note`` saying so;
* ``wait=false`` answers 202 with the job at once;
* ``stream=true`` streams ``ingest_progress`` events (``kind`` ``progress`` or ``embedded``)
  and one ``ingest_done`` (or ``error``) event, as before; ``ingest_queued`` (the job to poll)
  when it is not done within ``job_wait``, and at once, its ``note`` saying why, when no
  worker is alive.

Progress is read from the job record in PostgreSQL, so any replica answers for any job. A
caller sees the jobs of its tenant that it enqueued (``admin``/``system``: all of the
tenant's); any other job is 404.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from shelfhand.api.chat_routes import error_response
from shelfhand.api.deps import Caller, Service, ServiceDep, sse_event
from shelfhand.api.schemas import (
    ErrorBody,
    IngestFailureOut,
    IngestOut,
    JobList,
    JobOut,
    JobProgressOut,
)
from shelfhand.core.context import PRIVILEGED_ROLES, UserContext
from shelfhand.jobs.queue import IngestQueue, JobFile, JobRecord
from shelfhand.service.uploads import Staged, tenant_folder

router = APIRouter(prefix="/v1")

POLL_S = 0.25
"""How often a waiting upload reads its job record."""

_STATUS_OF_CODE = {"source_conflict": 409, "tenant_quota": 413, "error": 500}


def job_out(job: JobRecord) -> JobOut:
    p = job.progress
    return JobOut(
        id=job.id,
        kind=job.kind,
        status=job.status,
        sources=list(job.sources),
        files=job.files,
        bytes=job.bytes,
        attempts=job.attempts,
        progress=JobProgressOut(
            phase=p.phase,
            files_done=p.files_done,
            files_total=p.files_total,
            bytes_done=p.bytes_done,
            bytes_total=p.bytes_total,
            chunks_embedded=p.chunks_embedded,
            chunks_to_embed=p.chunks_to_embed,
        ),
        error=job.error,
        code=job.error_code,
        result=_result(job),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def _result(job: JobRecord) -> IngestOut | None:
    r = job.report
    if job.status != "done" or r is None:
        return None
    return IngestOut(
        added=list(r.get("added", ())),
        updated=list(r.get("updated", ())),
        unchanged=list(r.get("unchanged", ())),
        chunks=int(r.get("chunks", 0)),
        embedding_failed=[
            IngestFailureOut(source=f["source"], reason=f["reason"])
            for f in r.get("embedding_failed", ())
        ],
        seconds=round(float(r.get("total_seconds", 0.0)), 4),
        job_id=job.id,
    )


def _visible(job: JobRecord | None, caller: UserContext) -> bool:
    if job is None or job.tenant_id != caller.tenant_id:
        return False
    return job.user_id == caller.user_id or not PRIVILEGED_ROLES.isdisjoint(caller.roles)


def _final_response(job: JobRecord) -> Response:
    if job.status == "done":
        result = _result(job)
        assert result is not None
        return JSONResponse(result.model_dump())
    code = job.error_code or "error"
    return error_response(_STATUS_OF_CODE.get(code, 422), job.error or "ingest failed", code)


NO_WORKER = (
    "no ingest worker is alive: the job waits in the queue until `shelfhand worker` runs "
    "with the same database_url"
)
"""What an upload that did not wait for its job says (:attr:`JobOut.note`)."""


def _accepted(job: JobRecord, note: str | None = None) -> Response:
    out = job_out(job)
    if note is not None:
        out.note = note
    return JSONResponse(
        out.model_dump(),
        status_code=202,
        headers={"Location": f"/v1/knowledge/jobs/{job.id}"},
    )


def enqueue_upload(
    jobs: IngestQueue,
    staged: Staged,
    caller: UserContext,
    permission_tags: tuple[str, ...] | None,
) -> JobRecord:
    """Put the staged files (already validated and checked) on the queue (blocking)."""
    files = [JobFile(name=path.name, data=path.read_bytes()) for path, _ in staged.files]
    tenant_dir = tenant_folder(caller.tenant_id)
    return jobs.enqueue(
        kind="upload",
        user=caller,
        files=files,
        sources=[f"{tenant_dir}/{f.name}" for f in files],
        permission_tags=permission_tags,
    )


async def queued_upload(
    service: Service,
    jobs: IngestQueue,
    staged: Staged,
    caller: UserContext,
    permission_tags: tuple[str, ...] | None,
    *,
    stream: bool,
    wait: bool,
) -> Response:
    """The rest of an upload once its files are validated: check, enqueue, follow."""
    await asyncio.to_thread(service.uploads.check, staged, caller, service.kb, permission_tags)
    job = await asyncio.to_thread(enqueue_upload, jobs, staged, caller, permission_tags)
    if not wait and not stream:
        return _accepted(job)
    # no one would take the job within job_wait: said now, not after it
    alone = not await asyncio.to_thread(jobs.live_workers)
    if stream:
        return StreamingResponse(
            _job_events(jobs, job, 0.0 if alone else service.config.job_wait, alone),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    if alone:
        return _accepted(job, NO_WORKER)
    deadline = time.monotonic() + service.config.job_wait
    while not job.final and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        job = await asyncio.to_thread(_reload, jobs, job)
    return _final_response(job) if job.final else _accepted(job)


def _reload(jobs: IngestQueue, job: JobRecord) -> JobRecord:
    return jobs.get(job.id) or job


async def _job_events(
    jobs: IngestQueue, job: JobRecord, wait: float, alone: bool
) -> AsyncIterator[bytes]:
    """The job's progress events, then its end (or ``ingest_queued`` after ``wait`` seconds;
    ``alone``: no worker is alive, so the queued event comes at once with the reason)."""
    n = 0
    last: Any = None
    deadline = time.monotonic() + wait
    while True:
        p = job.progress
        now = (p.phase, p.files_done, p.bytes_done, p.chunks_embedded)
        if now != last and p.phase in ("index", "embed"):
            last = now
            n += 1
            embedding = p.phase == "embed"
            yield sse_event(
                {
                    "type": "ingest_progress",
                    "kind": "embedded" if embedding else "progress",
                    "source": p.source,
                    "done": p.chunks_embedded if embedding else p.files_done,
                    "total": p.chunks_to_embed if embedding else p.files_total,
                    "job_id": job.id,
                },
                n,
            )
        if job.final or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
        job = await asyncio.to_thread(_reload, jobs, job)
    if job.status == "done":
        result = _result(job)
        assert result is not None
        done: dict[str, Any] = {"type": "ingest_done", **result.model_dump()}
    elif job.status == "failed":
        code = job.error_code or "error"
        done = {
            "type": "error",
            "status": _STATUS_OF_CODE.get(code, 422),
            "code": code,
            "message": job.error or "ingest failed",
        }
    else:  # still queued or running: the client polls the job
        out = job_out(job)
        if alone:
            out.note = NO_WORKER
        done = {"type": "ingest_queued", **out.model_dump()}
    yield sse_event(done, n + 1)


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or unknown API key."},
    404: {"model": ErrorBody, "description": "No such job (of the caller), or no workers."},
}


def _queue(service: Service) -> IngestQueue:
    if service.jobs is None:
        raise HTTPException(
            status_code=404,
            detail="no ingest jobs here: uploads are ingested in process (no database_url)",
        )
    return service.jobs


@router.get("/knowledge/jobs/{job_id}", tags=["knowledge"], responses=_ERRORS)
async def get_job(
    job_id: Annotated[str, Path(min_length=1, max_length=64)],
    service: ServiceDep,
    caller: Caller,
) -> JobOut:
    """An ingest job the caller enqueued: status, progress, result or reason of failure."""
    job = await asyncio.to_thread(_queue(service).get, job_id)
    if job is None or not _visible(job, caller):
        raise HTTPException(status_code=404, detail="job not found")
    return job_out(job)


@router.get("/knowledge/jobs", tags=["knowledge"], responses=_ERRORS)
async def list_jobs(
    service: ServiceDep,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> JobList:
    """The caller's recent ingest jobs (its tenant's for admins), newest first."""
    admin = not PRIVILEGED_ROLES.isdisjoint(caller.roles)
    jobs = await asyncio.to_thread(
        _queue(service).for_tenant,
        caller.tenant_id,
        user_id=None if admin else caller.user_id,
        limit=limit,
    )
    return JobList(jobs=[job_out(j) for j in jobs])
